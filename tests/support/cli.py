"""The ``fencing`` command run in-process (``fencing.cli.main``), and what its output must be.

>>> code, out, err = run(capsys, "status", *at(server, namespace))    # doctest: +SKIP
>>> one_error_line(err)                                                # doctest: +SKIP
"""

from __future__ import annotations

import pytest

from fencing.cli import main

from ..conftest import ServerInfo

__all__ = ["at", "one_error_line", "run"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def at(server: ServerInfo, namespace: str) -> list[str]:
    return ["--url", server.url, "--namespace", namespace]


def one_error_line(err: str) -> str:
    assert err.startswith("fencing: "), err
    assert err.count("\n") == 1, err
    assert err.endswith("\n"), err
    assert "Traceback" not in err
    return err

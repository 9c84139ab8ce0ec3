"""A user's own pytest run in a folder of theirs (a subprocess): the test files the docs
show, and the projects that use ``fencing.testing``'s plugin.

>>> result = run_user_pytest(tmp_path, "test_orders.py")   # doctest: +SKIP
>>> assert result.returncode == 0, result.stdout
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .paths import ROOT

__all__ = ["run_user_pytest"]

#: Bound on one such run.
TIMEOUT = 300.0


def run_user_pytest(
    folder: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest <args>`` in ``folder``, with this repository importable, none of
    this run's FENCING_* or PYTEST_* variables (the user's run sets its own), then ``env``."""
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("FENCING_", "PYTEST_"))
    }
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=folder,
        env=environ,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )

"""``fencing demo``: the guided demo of :mod:`fencing.demo`, parsed by a parser of its own
that adds the demo's options to the common ones. Imported only when asked for: the CLI
works without the demo (and its extras).

>>> run_demo(["--quick"])                                             # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from ..errors import InvalidArgument
from ._parser import Parser, common


def run_demo(argv: list[str]) -> int:
    """Run the demo with the arguments after ``demo``; returns its exit status."""
    try:
        demo: Any = importlib.import_module("fencing.demo")
    except ImportError as exc:
        if exc.name in ("fencing.demo", "fencing"):
            raise InvalidArgument(
                "the demo is not part of this installation (no fencing.demo module)"
            ) from exc
        raise InvalidArgument(
            f"the demo needs {exc.name}: pip install 'redis-fencing[demo]'"
        ) from exc
    if not (hasattr(demo, "add_arguments") and hasattr(demo, "run")):
        raise InvalidArgument(
            "the demo is not complete in this installation (fencing.demo has no add_arguments/run)"
        )
    parser = Parser(
        prog="fencing demo",
        description="redis-fencing demo",
        parents=[common()],
        # The demo may define its own --url and friends: its definitions win.
        conflict_handler="resolve",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_arguments(parser)
    return int(demo.run(parser.parse_args(argv)))

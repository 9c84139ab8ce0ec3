"""``python -m fencing.demo``: the same as ``fencing demo``.

>>> # python -m fencing.demo --quick --plot demo.png
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import add_arguments, run


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` with the demo's options and run it; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m fencing.demo")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

"""The argument types of the commands' options: each turns a bad value into a usage error.

>>> start("latest"), start("100"), partition("0")
('latest', 100, 0)
"""

from __future__ import annotations

import argparse


def partition(value: str) -> int:
    """A partition number (``-p``/``--partition``): an integer >= 0."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"a partition is an integer >= 0, got {value!r}")
    return number


def positive(value: str) -> int:
    """A count such as ``--max``: an integer >= 1."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value!r}")
    return number


def start(value: str) -> int | str:
    """Where ``tail --from`` starts: ``earliest``, ``latest`` or an offset >= 0."""
    if value in ("earliest", "latest"):
        return value
    try:
        offset = int(value)
    except ValueError:
        offset = -1
    if offset < 0:
        raise argparse.ArgumentTypeError(
            f"--from takes earliest, latest or an offset >= 0, got {value!r}"
        )
    return offset

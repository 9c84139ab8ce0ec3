"""Checks of plain arguments shared by the handles (names live in :mod:`fencing.keys`)."""

from __future__ import annotations

from .errors import InvalidArgument, InvalidArgumentType


def check_int(what: str, value: object, *, minimum: int = 0) -> int:
    """``value`` if it is an int (not a bool) >= ``minimum``, else a typed error.

    >>> check_int("partition", 3)
    3
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentType(f"{what} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise InvalidArgument(f"{what} must be >= {minimum}, got {value}")
    return value

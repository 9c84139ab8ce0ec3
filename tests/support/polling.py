"""Polling with a deadline: the way a test waits for something to become true.

>>> wait_until(lambda: server_ms(r) > deadline_ms, timeout=5.0)        # doctest: +SKIP

A sleep is never a synchronisation: a test polls the condition it needs, with a deadline
that turns "never happened" into a failure saying what was awaited.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_until"]

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.01,
    *,
    what: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that value.

    Checked at least once, also with ``timeout=0``; raises :class:`AssertionError` naming
    ``what`` if it is still falsy after ``timeout`` seconds (``time.monotonic``).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(interval)

"""Polling with a deadline: the way a test waits for something to become true.

>>> wait_until(lambda: server_ms(r) > deadline_ms, timeout=5.0)        # doctest: +SKIP
>>> await wait_until_async(lambda: producer.queued() == 3)             # doctest: +SKIP
>>> await wait_until_equal_async(election.candidates, 1)                # doctest: +SKIP

A sleep is never a synchronisation: a test polls the condition it needs, with a deadline
that turns "never happened" into a failure saying what was awaited (and, given
``detail``, whatever else helps: every thread's stack for a hang, say).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["wait_until", "wait_until_async", "wait_until_equal_async"]

T = TypeVar("T")


def _failure(what: str, timeout: float, detail: Callable[[], str] | None) -> AssertionError:
    extra = f"\n{detail()}" if detail is not None else ""
    return AssertionError(f"{what} not met within {timeout}s{extra}")


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.01,
    *,
    what: str = "condition",
    detail: Callable[[], str] | None = None,
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that value.

    Checked at least once, also with ``timeout=0``; raises :class:`AssertionError` naming
    ``what`` (and ``detail()``) if it is still falsy after ``timeout`` seconds
    (``time.monotonic``).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _failure(what, timeout, detail)
        time.sleep(interval)


async def wait_until_async(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.002,
    *,
    what: str = "condition",
    detail: Callable[[], str] | None = None,
) -> T:
    """:func:`wait_until` in a coroutine: the loop runs other tasks between the looks."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _failure(what, timeout, detail)
        await asyncio.sleep(interval)


async def wait_until_equal_async(
    look: Callable[[], Awaitable[object]],
    want: object,
    timeout: float = 10.0,
    interval: float = 0.01,
    *,
    what: str = "condition",
) -> None:
    """Await ``look()`` (a server query, say) until it returns ``want``; the failure says
    what it returned last."""
    deadline = time.monotonic() + timeout
    while (got := await look()) != want:
        if time.monotonic() > deadline:
            raise _failure(what, timeout, lambda: f"last {got!r}, wanted {want!r}")
        await asyncio.sleep(interval)

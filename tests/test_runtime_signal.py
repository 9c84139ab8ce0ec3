"""The one-waiter wake-up both runtimes give a queued send (runtime ``Signal``)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from fencing._runtime.tasks import primitives as tasks
from fencing._runtime.threads import primitives as threads

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_task_signal_set_before_the_wait_returns_at_once_and_clears() -> None:
    signal = tasks.Signal()
    signal.set()
    signal.set()  # any number of times: one wake-up
    assert await signal.wait(10) is True
    assert await signal.wait(0.01) is False  # cleared: this one runs out


async def test_a_task_signal_set_while_waiting_wakes_the_waiter() -> None:
    signal = tasks.Signal()
    loop = asyncio.get_running_loop()
    loop.call_later(0.01, signal.set)
    assert await signal.wait(10) is True


async def test_a_cancelled_wait_raises_and_leaves_the_signal_usable() -> None:
    signal = tasks.Signal()
    waiting = asyncio.ensure_future(signal.wait(10))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    signal.set()
    assert await signal.wait(10) is True


async def test_a_set_racing_a_cancel_is_not_lost_for_the_next_wait() -> None:
    signal = tasks.Signal()
    waiting = asyncio.ensure_future(signal.wait(10))
    await asyncio.sleep(0)
    signal.set()  # the waiter's future is done ...
    waiting.cancel()  # ... and its task cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await signal.wait(0.01) is True  # the set is still there


def test_a_thread_signal_wakes_a_waiter_in_another_thread() -> None:
    signal = threads.Signal()
    signal.set()
    signal.set()
    assert signal.wait(10) is True
    assert signal.wait(0.01) is False
    timer = threading.Timer(0.01, signal.set)
    timer.start()
    assert signal.wait(10) is True


def test_waits_time_out_on_every_loop_and_leave_no_timer_behind() -> None:
    # One ticker per loop: a second loop (asyncio.run makes a new one) keeps its own, and
    # once no wait runs the ticker's timer is gone (a loop can close with nothing pending).
    async def two_waits() -> tuple[bool, bool, bool]:
        a, b, c = tasks.Signal(), tasks.Signal(), tasks.Signal()
        loop = asyncio.get_running_loop()
        loop.call_later(0.02, b.set)
        got = await asyncio.gather(a.wait(0.01), b.wait(10), c.wait(0.2))
        ticker = getattr(loop, tasks._TICKER)
        return got[0], got[1], not ticker.waiting

    for _ in range(2):
        assert asyncio.run(two_waits()) == (False, True, True)


def test_a_loop_without_weak_references_times_waits_out_on_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tasks, "_ticker_of", lambda loop: None)

    async def waits() -> tuple[bool, bool]:
        a, b = tasks.Signal(), tasks.Signal()
        asyncio.get_running_loop().call_later(0.01, b.set)
        return await a.wait(0.01), await b.wait(10)

    assert asyncio.run(waits()) == (False, True)

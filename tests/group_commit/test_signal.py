"""The one-waiter wake-up both runtimes give a queued send (runtime ``Signal``): set,
waited, cancelled, timed out by one ticker per event loop, and no loop kept alive by it
once it is done or closed with a wait pending."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
import weakref

import pytest

from fencing._runtime.tasks import primitives as tasks
from fencing._runtime.threads import primitives as threads

pytestmark = pytest.mark.anyio


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


@pytest.mark.usefixtures("restore_sigint")
def test_an_event_loop_is_not_kept_alive_by_its_signal_ticker() -> None:
    """A program runs asyncio.run() many times (a CLI per command, a test per loop), each time with
    a queued send (a Signal waited on with a timeout).

    Each finished loop is freed."""

    async def one_wait() -> None:
        assert await tasks.Signal().wait(0.001) is False

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(one_wait())
    finally:
        loop.close()
    ref = weakref.ref(loop)
    del loop
    gc.collect()
    assert ref() is None, "the closed loop is still alive (held by its ticker)"


@pytest.mark.usefixtures("no_recheck")
async def test_ticker_timeouts_end_while_other_waits_come_and_go() -> None:
    """Waits on many signals with timeouts, some set, some cancelled, some timing out,
    started at different times: each timed-out wait returns False no later than its
    timeout plus two ticks, each set one returns True, a cancel racing a set leaves the set
    for the next wait, and the ticker holds no wait once all are over."""
    loop = asyncio.get_running_loop()
    bound = 2 * tasks._TICK + 0.05
    results: list[tuple[str, float, float, bool]] = []

    async def timing_out(delay: float, timeout: float) -> None:
        await asyncio.sleep(delay)
        began = loop.time()
        got = await tasks.Signal().wait(timeout)
        results.append(("timeout", timeout, loop.time() - began, got))

    async def set_later(delay: float) -> None:
        signal = tasks.Signal()
        loop.call_later(delay, signal.set)
        began = loop.time()
        got = await signal.wait(10)
        results.append(("set", delay, loop.time() - began, got))

    async def cancel_racing_set() -> None:
        signal = tasks.Signal()
        waiting = asyncio.ensure_future(signal.wait(10))
        await asyncio.sleep(0.01)
        signal.set()
        waiting.cancel()
        try:
            await waiting
        except asyncio.CancelledError:
            assert await signal.wait(0.001) is True  # the set was kept
        results.append(("race", 0.0, 0.0, True))

    jobs = [timing_out(0.01 * i, 0.02 + 0.03 * (i % 4)) for i in range(20)]
    jobs += [set_later(0.005 * i) for i in range(20)]
    jobs += [cancel_racing_set() for _ in range(5)]
    async with asyncio.timeout(10):
        await asyncio.gather(*jobs)
    for kind, timeout, took, got in results:
        if kind == "timeout":
            assert not got and timeout - 0.005 <= took <= timeout + bound, (timeout, took)
        else:
            assert got
    ticker = getattr(loop, tasks._TICKER, None)
    assert ticker is None or not ticker.waiting
    await asyncio.sleep(2 * tasks._TICK)
    assert ticker is None or not ticker._armed  # (no tick left armed for nothing)


def test_a_loop_closed_with_a_wait_pending_is_freed() -> None:
    """A program runs an event loop with loop.run_until_complete() and leaves a task waiting on a
    queued send (a Signal wait with a timeout: its ticker holds the wait), then closes the
    loop and drops it (a Ctrl-C out of run_until_complete, a test whose loop is torn down
    with tasks left, a worker thread's loop).

    The loop, its tasks and everything they reference are freed."""

    async def waiting(signal: tasks.Signal) -> None:
        await signal.wait(60)

    loop = asyncio.new_event_loop()
    signal = tasks.Signal()
    task = loop.create_task(waiting(signal))
    loop.run_until_complete(asyncio.sleep(0.01))  # the task now waits (the ticker holds it)
    assert not task.done()
    loop.close()
    ref = weakref.ref(loop)
    task._log_destroy_pending = False  # type: ignore[attr-defined]  (no warning on free)
    del loop, task, signal
    gc.collect()
    assert ref() is None, "the closed loop is still alive (held through its ticker's waits)"


def test_signal_waits_time_out_on_many_loops_in_many_threads() -> None:
    """Twelve threads each run ten short event loops one after the other, each loop with waits that
    time out, waits that are set from the loop, and waits cancelled; every timeout ends
    within two ticks, and no ticker outlives its loop (once collected)."""
    errors: list[BaseException] = []
    bound = 2 * tasks._TICK + 0.1
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def one_loop() -> None:
        loop = asyncio.get_running_loop()
        loops.append(weakref.ref(loop))
        a, b, c = tasks.Signal(), tasks.Signal(), tasks.Signal()
        loop.call_later(0.005, b.set)
        began = loop.time()
        waiting_c = asyncio.ensure_future(c.wait(30))
        got = await asyncio.gather(a.wait(0.02), b.wait(30))
        took = loop.time() - began
        waiting_c.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting_c
        assert got == [False, True], got
        assert took <= 0.02 + bound, took

    def worker() -> None:
        try:
            for _ in range(10):
                asyncio.run(one_loop())
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(12)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 30
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
    assert not any(w.is_alive() for w in workers), "a loop's wait never ended"
    assert not errors, errors
    gc.collect()
    assert len(loops) == 120
    alive = [r for r in loops if r() is not None]
    assert not alive, f"{len(alive)} loops (and their tickers) outlived asyncio.run()"

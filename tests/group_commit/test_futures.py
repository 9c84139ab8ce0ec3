"""The ``send_async()`` future: a ``concurrent.futures.Future`` (threads) that makes its
Condition only once somebody waits on it, driven through every path of the standard one
(results read before and after they are set, from other threads, ``wait``/``as_completed``,
callbacks, cancellation, ``asyncio.wrap_future``), raced from many threads, and answered
with metadata that behaves as the dataclass in every way users touch it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import dataclasses
import pickle
import threading
import time
from typing import Any

import pytest

import fencing
import fencing._group_commit
from fencing._record import RecordMetadata, placed
from fencing._runtime.threads import primitives as threads
from fencing._runtime.threads.primitives import claim_future, fail, new_future, settle

from ..support.group_commit import run_threads, stacks
from ..support.logs import log_of
from ..support.polling import wait_until


def test_the_future_is_a_concurrent_futures_future_settled_without_waiters() -> None:
    future = new_future()
    assert isinstance(future, concurrent.futures.Future)
    assert not future.done()
    assert not future.running()
    assert not future.cancelled()
    assert claim_future(future)
    assert future.running()
    settle(future, 41)
    assert future.done()
    assert future.result() == 41
    assert future.exception() is None
    settle(future, 42)  # a second answer is dropped, not raised
    assert future.result(timeout=0) == 41
    assert "finished" in repr(future)


def test_the_send_async_path_never_makes_a_futures_condition(client: fencing.Client) -> None:
    # The cheap path is the point of the lazy future: queueing, claiming, settling and
    # reading a result must not make the Condition (a standard method that takes it, say
    # running(), would silently make every future the expensive kind again).
    topic = client.topic("t", partitions=1)
    with topic.producer() as producer:
        futures = [producer.send_async(b"%d" % i, partition=0) for i in range(50)]
        producer.flush()
        assert [f.result().offset for f in futures] == list(range(50))
        assert all(f.done() and not f.running() and not f.cancelled() for f in futures)
    assert not any(f._made for f in futures)  # type: ignore[attr-defined]


def test_a_failed_future_raises_its_error() -> None:
    future = new_future()
    fail(future, fencing.InvalidArgument("gone"))
    with pytest.raises(fencing.InvalidArgument, match="gone"):
        future.result()
    assert isinstance(future.exception(), fencing.InvalidArgument)


def test_a_result_waited_for_in_another_thread_arrives() -> None:
    futures = [new_future() for _ in range(200)]
    got: list[Any] = []
    started = threading.Event()

    def waiter() -> None:
        started.set()
        got.extend(f.result(timeout=10) for f in futures)

    thread = threading.Thread(target=waiter)
    thread.start()
    started.wait(5)
    for i, future in enumerate(futures):
        settle(future, i)  # some before the waiter looks, some while it waits
    thread.join(10)
    assert got == list(range(200))


def test_wait_and_as_completed_see_futures_settled_later() -> None:
    futures = [new_future() for _ in range(5)]
    timer = threading.Timer(0.05, lambda: [settle(f, i) for i, f in enumerate(futures)])
    timer.start()
    done, not_done = concurrent.futures.wait(futures, timeout=10)
    assert len(done) == 5
    assert not not_done
    assert sorted(f.result() for f in concurrent.futures.as_completed(futures, timeout=10)) == [
        0,
        1,
        2,
        3,
        4,
    ]


def test_callbacks_run_once_when_added_before_or_after() -> None:
    calls: list[Any] = []
    future = new_future()
    future.add_done_callback(lambda f: calls.append(("before", f.result())))
    settle(future, "x")
    future.add_done_callback(lambda f: calls.append(("after", f.result())))
    assert calls == [("before", "x"), ("after", "x")]


def test_a_cancelled_future_is_never_claimed_nor_settled() -> None:
    future = new_future()
    assert future.cancel()
    assert future.cancelled()
    assert future.done()
    assert not claim_future(future)
    settle(future, 1)  # dropped
    with pytest.raises(concurrent.futures.CancelledError):
        future.result()
    running = new_future()
    assert claim_future(running)
    assert not running.cancel()  # a claimed future can no longer be cancelled


def test_futures_settled_while_many_threads_wait_on_them() -> None:
    # Settling races the Condition being made by a waiter: each future is answered once,
    # and every waiter sees it (a lost notification would hang a waiter until its timeout).
    rounds = 300
    futures = [new_future() for _ in range(rounds)]
    seen: list[list[Any]] = [[] for _ in range(4)]

    def waiter(i: int) -> None:
        for f in futures:
            seen[i].append(f.result(timeout=10))

    threads = [threading.Thread(target=waiter, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for i, f in enumerate(futures):
        claim_future(f)
        settle(f, i)
    for t in threads:
        t.join(20)
    assert all(s == list(range(rounds)) for s in seen)


def test_placed_metadata_equals_the_dataclass_built_one() -> None:
    built = placed("orders", 3, 41, 7, 3)
    assert built == [RecordMetadata("orders", 3, 41 + i, 7) for i in range(3)]
    assert all(type(md) is RecordMetadata for md in built)
    assert hash(built[0]) == hash(RecordMetadata("orders", 3, 41, 7))
    with pytest.raises(AttributeError):
        built[0].offset = 5  # type: ignore[misc]  # still frozen


@pytest.mark.usefixtures("no_recheck")
def test_send_async_futures_cancelled_waited_and_called_back_from_many_threads(
    client: fencing.Client,
) -> None:
    """send_async() futures, while the sender answers them, are cancelled, waited for
    (wait, as_completed, result) and given callbacks from other threads: each callback
    runs once, a cancelled future's record never lands, every other one lands once at the
    offset its future holds."""
    topic = client.topic("t", partitions=1)
    calls: dict[int, int] = {}
    clock = threading.Lock()
    with topic.producer(linger_ms=1, batch_size=64) as producer:
        futures = []
        for i in range(600):
            futures.append(producer.send_async(b"v%d" % i, partition=0))

        def canceller() -> None:
            for f in futures[::7]:
                f.cancel()

        def callbacks() -> None:
            for i, f in enumerate(futures):

                def cb(_: Any, i: int = i) -> None:
                    with clock:
                        calls[i] = calls.get(i, 0) + 1

                f.add_done_callback(cb)

        def waiter() -> None:
            concurrent.futures.wait(futures[::3], timeout=10)
            seen = list(concurrent.futures.as_completed(futures[1::5], timeout=10))
            assert len(seen) == len(futures[1::5])

        def reader() -> None:
            for f in futures[::2]:
                with contextlib.suppress(concurrent.futures.CancelledError):
                    f.result(timeout=10)

        run_threads([canceller, callbacks, waiter, reader])
        producer.flush()
        assert all(f.done() for f in futures)
    assert calls == dict.fromkeys(range(600), 1)
    log = log_of(topic, 0)
    landed = {v: o for o, v in log.items()}
    for i, f in enumerate(futures):
        if f.cancelled():
            assert b"v%d" % i not in landed
        else:
            assert landed[b"v%d" % i] == f.result().offset
    assert len(landed) == len(log) == sum(1 for f in futures if not f.cancelled())


@pytest.mark.usefixtures("no_recheck")
def test_the_future_settled_while_threads_race_to_make_its_condition() -> None:
    """The lazily made Condition raced by wait(), as_completed(), add_done_callback(),
    cancel() and the fast settle path from several threads: every future ends in one
    state, every waiter returns, every callback runs once."""
    rounds = 400
    futures = [new_future() for _ in range(rounds)]
    ran = [0] * rounds
    lock = threading.Lock()
    outcomes: dict[int, str] = {}

    def settler() -> None:
        for i, f in enumerate(futures):
            if claim_future(f):
                settle(f, i)
                outcomes[i] = "set"
            else:
                outcomes[i] = "cancelled"

    def canceller() -> None:
        for f in futures[::5]:
            f.cancel()

    def adder() -> None:
        for i, f in enumerate(futures):

            def cb(_: Any, i: int = i) -> None:
                with lock:
                    ran[i] += 1

            f.add_done_callback(cb)

    def waiter() -> None:
        _, not_done = concurrent.futures.wait(futures, timeout=10)
        assert not not_done
        assert len(list(concurrent.futures.as_completed(futures, timeout=10))) == rounds

    run_threads([settler, canceller, adder, waiter, waiter])
    assert ran == [1] * rounds
    for i, f in enumerate(futures):
        if outcomes[i] == "set":
            assert f.result(timeout=0) == i and not f.cancelled()
        else:
            assert f.cancelled()


def test_placed_metadata_behaves_as_the_dataclass_in_every_way_users_touch_it() -> None:
    """RecordMetadata built by placed() (a class swap, not the dataclass __init__): equal,
    hash-equal, pickled, copied, deep-copied, replaced, asdict'ed, repr'ed and frozen
    exactly as one built by RecordMetadata(...); placed(n=0) is empty."""
    built = [RecordMetadata("t", 3, 41 + i, 7) for i in range(3)]
    made = placed("t", 3, 41, 7, 3)
    assert made == built and [hash(m) for m in made] == [hash(b) for b in built]
    assert all(type(m) is RecordMetadata for m in made)
    for m, b in zip(made, built, strict=True):
        assert pickle.loads(pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL)) == b
        assert pickle.loads(pickle.dumps(m, protocol=0)) == b
        assert copy.copy(m) == b
        assert copy.deepcopy(m) == b
        assert dataclasses.replace(m, offset=0) == dataclasses.replace(b, offset=0)
        assert dataclasses.asdict(m) == dataclasses.asdict(b)
        assert repr(m) == repr(b)
        with pytest.raises(dataclasses.FrozenInstanceError):
            m.offset = 0  # type: ignore[misc]
        assert not hasattr(m, "__dict__")
    assert placed("t", 0, 5, 1, 0) == []
    assert {made[0]: 1}[built[0]] == 1


def test_lazy_futures_raced_by_cancel_wait_as_completed_and_callbacks_from_many_threads() -> None:
    """2000 lazy futures; per future, threads race: the sender's claim_future then settle (or
    fail), a user's cancel(), add_done_callback(), concurrent.futures.wait() and
    as_completed() over slices. Every future ends exactly one of cancelled or answered (a
    cancelled one was never claimed), every callback runs exactly once, and every wait() and
    as_completed() sees every future done."""
    n = 2000
    futures = [threads.new_future() for _ in range(n)]
    called = [0] * n
    claimed: list[bool | None] = [None] * n
    lock = threading.Lock()
    errors: list[BaseException] = []
    go = threading.Barrier(5)

    def sender() -> None:
        go.wait(10)
        for i, f in enumerate(futures):
            claimed[i] = ok = threads.claim_future(f)
            if ok:
                if i % 7 == 0:
                    threads.fail(f, ValueError(i))
                else:
                    threads.settle(f, i)
            elif i % 3 == 0:
                threads.settle(f, -1)  # (answering a cancelled one does nothing)

    def canceller() -> None:
        go.wait(10)
        for f in futures[::2]:
            f.cancel()

    def calling_back() -> None:
        go.wait(10)
        for i, f in enumerate(futures):

            def cb(_: Any, i: int = i) -> None:
                with lock:
                    called[i] += 1

            f.add_done_callback(cb)

    def waiting() -> None:
        go.wait(10)
        for k in range(0, n, 250):
            _, not_done = concurrent.futures.wait(futures[k : k + 250], timeout=10)
            if not_done:
                errors.append(AssertionError(f"wait() missed {len(not_done)}"))

    def completing() -> None:
        go.wait(10)
        try:
            seen = set(concurrent.futures.as_completed(futures[1::2], timeout=10))
            if len(seen) != len(futures[1::2]):
                errors.append(AssertionError("as_completed() missed some"))
        except BaseException as exc:
            errors.append(exc)

    workers = [
        threading.Thread(target=t, daemon=True)
        for t in (sender, canceller, calling_back, waiting, completing)
    ]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 20
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
    assert not any(w.is_alive() for w in workers), "a thread hung"
    assert not errors, errors
    assert called == [1] * n
    for i, f in enumerate(futures):
        assert f.done()
        if f.cancelled():
            assert claimed[i] is False
        else:
            assert claimed[i] is True
            if i % 7 == 0:
                assert isinstance(f.exception(), ValueError)
            else:
                assert f.result() == i


def test_asyncio_wrap_future_of_a_lazy_future() -> None:
    """asyncio.wrap_future() of a send_async()-style future: its answer reaches the asyncio future;
    cancelling the asyncio one cancels the lazy one if not yet claimed (claim_future then
    refuses it), and is ignored once it was claimed."""

    async def main() -> None:
        a, b, c = threads.new_future(), threads.new_future(), threads.new_future()
        wa, wb, wc = asyncio.wrap_future(a), asyncio.wrap_future(b), asyncio.wrap_future(c)
        threading.Thread(target=threads.settle, args=(a, "ok"), daemon=True).start()
        assert await asyncio.wait_for(wa, 5) == "ok"
        wb.cancel()
        await asyncio.sleep(0)
        assert b.cancelled()
        assert threads.claim_future(b) is False
        assert threads.claim_future(c) is True
        wc.cancel()
        await asyncio.sleep(0)
        assert not c.cancelled()
        threads.settle(c, 1)
        assert c.result(timeout=1) == 1

    asyncio.run(main())


def test_a_blocking_send_from_a_future_callback_does_not_deadlock_the_sender(
    client: fencing.Client,
) -> None:
    """``fut.add_done_callback(lambda f: producer.send(b"next"))`` on a send_async() future
    (chaining a record after another one is acked, a common pattern).

    The callback's send() lands (or is refused at once with a clear error), the other queued
    futures are answered, flush() returns."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer(linger_ms=200, batch_size=10**9)
    got: list[object] = []

    def chain(_: concurrent.futures.Future[Any]) -> None:
        try:
            got.append(producer.send(b"chained"))
        except BaseException as exc:
            got.append(exc)

    first = producer.send_async(b"a")
    first.add_done_callback(chain)
    assert not first.done()  # the callback runs on the sender, after the linger
    try:
        wait_until(first.done, 5, interval=0.002)
        second = producer.send_async(b"b")
        deadline = time.monotonic() + 1.5  # an answer takes milliseconds
        while not (got and second.done()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got and isinstance(got[0], fencing.RecordMetadata | fencing.FencingError), (
            f"the callback's send() never returned; stacks:\n{stacks()}"
        )
        assert second.done()
    finally:
        # Unstick the callback's send (it waits in the queue), so the sender thread ends.
        standing = producer._queues[0]
        standing.sending.fail_all(fencing.InvalidArgument("unstuck by the test"))
        wait_until(lambda: bool(got), 5, interval=0.002)
        producer.close()

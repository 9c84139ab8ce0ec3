"""Group commit on threads: the send_async() future and the chained wake-ups of callers.

The future is a ``concurrent.futures.Future`` that makes its Condition only once somebody
waits on it; these tests drive every path of the standard one through it (results read
after and before they are set, from other threads, ``wait``/``as_completed``, callbacks,
cancellation). The chain (a sender wakes the first answered caller, each wakes the next)
must never lose a wake-up: the tests set the queued callers' own re-check to a minute, so
a caller left asleep would show as a send that never returns.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import pytest

import fencing
from fencing._record import RecordMetadata, placed
from fencing._runtime.threads.primitives import claim_future, fail, new_future, settle
from fencing._sync import producer as sync_producer
from fencing.verify import Attempt, verify_log


def wait_for(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.002)


# -- the future ---------------------------------------------------------------------------------


def test_the_future_is_a_concurrent_futures_future_settled_without_waiters() -> None:
    future = new_future()
    assert isinstance(future, concurrent.futures.Future)
    assert not future.done() and not future.running() and not future.cancelled()
    assert claim_future(future)
    assert future.running()
    settle(future, 41)
    assert future.done() and future.result() == 41 and future.exception() is None
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
    assert len(done) == 5 and not not_done
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
    assert future.cancelled() and future.done()
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


# -- the chain of wake-ups ----------------------------------------------------------------------


@pytest.fixture
def no_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued caller never looks again on its own within a test: only wake-ups count."""
    monkeypatch.setattr(sync_producer, "_RECHECK_SECONDS", 60.0)


def _run_all(workers: list[threading.Thread], hung: str) -> None:
    """Start the threads and join them within 30 s in all; a thread still alive fails."""
    for w in workers:
        w.start()
    deadline = time.monotonic() + 30
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
    assert not any(w.is_alive() for w in workers), hung


def _threads_sending(
    producer: fencing.Producer, threads: int, each: int
) -> tuple[list[list[fencing.RecordMetadata]], list[BaseException]]:
    results: list[list[fencing.RecordMetadata]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    go = threading.Barrier(threads)

    def worker(i: int) -> None:
        go.wait()
        try:
            for n in range(each):
                results[i].append(producer.send(b"t%d-%d" % (i, n), partition=0))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    _run_all(workers, "a send waited for a wake-up that never came")
    return results, errors


@pytest.mark.usefixtures("no_recheck")
def test_every_chained_caller_is_woken_and_the_log_holds_each_send_once(
    client: fencing.Client,
) -> None:
    topic = client.topic("t", partitions=1)
    with topic.producer() as producer:
        results, errors = _threads_sending(producer, threads=8, each=150)
    assert not errors
    offsets = sorted(md.offset for r in results for md in r)
    assert offsets == list(range(8 * 150))
    records = topic.reader(0, start_offset="earliest").read(max_records=2000)
    by_offset = {r.offset: r.value for r in records}
    for i, mine in enumerate(results):
        assert [by_offset[md.offset] for md in mine] == [b"t%d-%d" % (i, n) for n in range(150)]
    attempts = [
        Attempt(by_offset[md.offset], 0, "acked", md.offset, md.epoch)
        for mine in results
        for md in mine
    ]
    report = verify_log(client, "t", attempts=attempts, exclusive=False)
    assert report.ok, report.summary()


@pytest.mark.usefixtures("no_recheck")
def test_a_chained_caller_interrupted_still_wakes_the_rest(client: fencing.Client) -> None:
    """A KeyboardInterrupt raised in one answered caller as it wakes: the callers chained
    after it are still woken (it passes the chain on as it unwinds)."""
    topic = client.topic("t", partitions=1)
    with topic.producer() as producer:
        producer.send(b"warm", partition=0)
        real_pass_on = sync_producer.group_commit.pass_on
        hit = threading.Event()

        def interrupting_pass_on(entry: Any) -> None:
            if not hit.is_set() and entry.then is not None:
                hit.set()
                real_pass_on(entry)  # (the chain goes on: the interrupt is this caller's)
                raise KeyboardInterrupt
            real_pass_on(entry)

        sync_producer.group_commit.pass_on = interrupting_pass_on  # type: ignore[assignment]
        interrupted: list[int] = []
        answered: list[int] = []
        lock = threading.Lock()
        go = threading.Barrier(6)

        def worker(i: int) -> None:
            go.wait()
            for n in range(40):
                try:
                    producer.send(b"w%d-%d" % (i, n), partition=0)
                except KeyboardInterrupt:
                    with lock:
                        interrupted.append(i)
                    continue
                with lock:
                    answered.append(i)

        try:
            workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(6)]
            _run_all(workers, "a chained caller was never woken")
        finally:
            sync_producer.group_commit.pass_on = real_pass_on  # type: ignore[assignment]
    assert hit.is_set(), "no chain formed: the test did not exercise it"
    assert len(interrupted) == 1 and len(answered) == 6 * 40 - 1
    # The interrupted send landed (it was answered before the interrupt): 240 records.
    _, end = topic.offsets(0)
    assert end == 1 + 6 * 40


def test_a_lone_caller_does_not_wait_for_a_chain(client: fencing.Client) -> None:
    # One thread: nobody else is answered, no chain, no wait: the sends are one call each.
    topic = client.topic("t", partitions=1)
    with topic.producer() as producer:
        for i in range(20):
            assert producer.send(b"%d" % i, partition=0).offset == i
        assert producer._standing[0].to_wake is None


def test_send_async_lingers_until_batch_size_is_queued(client: fencing.Client) -> None:
    topic = client.topic("t", partitions=1)
    with topic.producer(linger_ms=60_000, batch_size=1000) as producer:
        small = [producer.send_async(b"x" * 100, partition=0) for _ in range(5)]
        time.sleep(0.05)  # (not a synchronisation: nothing may be sent in this time)
        assert not any(f.done() for f in small)  # lingering: 500 bytes < batch_size
        rest = [producer.send_async(b"y" * 100, partition=0) for _ in range(5)]  # 1000
        wait_for(lambda: all(f.done() for f in small + rest), 10)
        assert [f.result().offset for f in small + rest] == list(range(10))

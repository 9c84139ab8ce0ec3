"""Review of issue 16's group-commit performance work: the holes it found, each now fixed.

Each test says what a user does, what is expected, what happened before the fix, and
where the fix went. Queued callers' own re-check is set to a minute where a lost wake-up
is looked for, so a caller left asleep shows as a thread that does not return by its
deadline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import signal
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

import fencing
import fencing.aio
from fencing import AccessMode
from fencing import _group_commit as group_commit
from fencing._async import producer as aproducer
from fencing._runtime.tasks import primitives as tasks
from fencing._runtime.threads import primitives as threads
from fencing._sync import producer as sync_producer

from .conftest import ServerInfo
from .test_fork import fork, wait_child


@pytest.fixture
def no_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued caller never looks again on its own within a test: only wake-ups count."""
    monkeypatch.setattr(sync_producer, "_RECHECK_SECONDS", 60.0)


class Gate:
    """Holds a producer's append calls in flight until the test lets each one go (a slow
    Redis, so which sends are in which call is known, not a lucky interleaving)."""

    def __init__(self, producer: fencing.Producer) -> None:
        self.real = producer._execute
        self.arrived = threading.Semaphore(0)
        self.go = threading.Semaphore(0)
        self.active = True
        producer._execute = self._execute  # type: ignore[method-assign]

    def _execute(self, call: Any, durability: Any = None) -> Any:
        if self.active and call.script.name == "append":
            self.arrived.release()
            assert self.go.acquire(timeout=20), "the gate was never opened"
        return self.real(call, durability)

    def wait_arrival(self) -> None:
        assert self.arrived.acquire(timeout=10), "no append call reached the gate"

    def let_go(self) -> None:
        self.go.release()


def _wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.001)


def _sender(producer: fencing.Producer, value: bytes, out: dict[bytes, Any]) -> threading.Thread:
    def run() -> None:
        try:
            out[value] = producer.send(value, partition=0)
        except BaseException as exc:  # pragma: no cover - reported by the test
            out[value] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.usefixtures("no_recheck")
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="SIGINT")
def test_callers_chained_after_an_interrupted_caller_are_still_woken(
    client: fencing.Client,
) -> None:
    """A user presses Ctrl-C while the main thread's send() waits queued, after its record
    was taken into a call in flight made by another thread (the record then lands).

    Expected: the main thread gets KeyboardInterrupt; the other callers answered by the
    same call return as soon as it is answered.
    Got: group_commit.settle() links the interrupted (abandoned) entry into the wake-up chain;
    its caller is gone and never passes the chain on, so every caller chained after it
    sleeps until its own re-check (0.5 s each by default; with the re-check at 60 s they
    hang).
    Fix: settle(chain=True) must not link an abandoned entry (and the check must not race
    the caller abandoning it: link and abandon under standing.guard, or have the
    abandoning caller pass on whatever was linked after it)."""
    topic = client.topic("t", partitions=1)
    with topic.producer() as producer:
        producer.send(b"warm", partition=0)
        standing = producer._standing[0]
        gate = Gate(producer)
        out: dict[bytes, Any] = {}
        interrupted = threading.Event()
        a_in_flight = threading.Event()
        others: list[threading.Thread] = []
        failures: list[str] = []

        def controller() -> None:
            try:
                first = _sender(producer, b"a", out)  # call 1, held in flight
                others.append(first)
                gate.wait_arrival()
                a_in_flight.set()  # (only now may the main thread send: it queues behind)
                _wait_for(lambda: len(standing.queue) == 1)  # the main thread's send
                others.extend(_sender(producer, v, out) for v in (b"b", b"c"))
                _wait_for(lambda: len(standing.queue) == 3)
                gate.let_go()  # call 1 answered: its sender goes on with [main, b, c]
                gate.wait_arrival()  # call 2 in flight, carrying the main thread's record
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
                assert interrupted.wait(10)
                gate.active = False
                gate.let_go()
            except BaseException as exc:  # pragma: no cover - reported by the test
                failures.append(repr(exc))
                gate.active = False
                gate.go.release(5)

        control = threading.Thread(target=controller, daemon=True)
        control.start()
        assert a_in_flight.wait(10)
        with pytest.raises(KeyboardInterrupt):
            producer.send(b"main", partition=0)
        interrupted.set()
        control.join(10)
        assert not failures, failures
        deadline = time.monotonic() + 5
        for t in others:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = sorted(v for v in (b"a", b"b", b"c") if v not in out)
        assert not stuck, f"callers never woken after the interrupted one: {stuck}"
    records = topic.reader(0, start_offset="earliest").read(max_records=10)
    assert [r.value for r in records] == [b"warm", b"a", b"main", b"b", b"c"]
    assert [out[v].offset for v in (b"a", b"b", b"c")] == [1, 3, 4]


def test_send_async_records_requeued_after_an_interrupted_flush_are_answered(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user queues records with send_async() and calls flush(); Ctrl-C lands in flush()
    after it took the records from the queue but before the call left (here: in
    merge_batches). The records are put back at the head of the queue (never sent), and
    the user calls flush() again.

    Expected: the second flush() sends them; every future gets its metadata.
    Got: take_group() claims each future again: set_running_or_notify_cancel() on a
    future that is already RUNNING raises RuntimeError ("Future in unexpected state") out
    of flush(), after popping the entry: that future is never answered (and the sender
    thread would only log the error).
    Fix: a future put back by Producer._interrupted must stay claimable: claim_future
    (fencing/_runtime/threads/primitives.py) should treat RUNNING as claimed (return True),
    or take_group should not claim an entry twice (a flag on the Entry)."""
    topic = client.topic("t", partitions=1)
    with topic.producer(linger_ms=60_000, batch_size=10**9) as producer:
        futures = [producer.send_async(b"r%d" % i, partition=0) for i in range(3)]
        real = group_commit.merge_batches
        calls = 0

        def interrupting(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        monkeypatch.setattr(group_commit, "merge_batches", interrupting)
        with pytest.raises(KeyboardInterrupt):
            producer.flush()
        assert not any(f.done() for f in futures)
        try:
            producer.flush()
        finally:
            monkeypatch.setattr(group_commit, "merge_batches", real)
        done, _ = concurrent.futures.wait(futures, timeout=5)
        assert len(done) == 3
        assert [f.result().offset for f in futures] == [0, 1, 2]


def test_wait_returns_for_a_cancelled_send_async_future_once_the_producer_is_fenced(
    client: fencing.Client,
) -> None:
    """A user queues send_async() records, cancels one of them, and the producer is then
    fenced mid-stream (another producer takes over with EXCLUSIVE_WITH_FENCING); the user
    waits for all of them with concurrent.futures.wait().

    Expected: wait() returns with every future done (the cancelled one cancelled, the
    others failed with ProducerFenced).
    Got: the cancelled future stays CANCELLED without its waiters being notified: the
    fence fails the queue (Producer._fail_queue -> runtime.fail), which drops a cancelled
    future silently, and concurrent.futures.wait / as_completed only count a cancelled
    future once set_running_or_notify_cancel() ran on it. wait() runs out its timeout
    (without one it hangs), although future.done() is True.
    Fix: runtime.fail/settle (fencing/_runtime/threads/primitives.py): for a cancelled
    future call set_running_or_notify_cancel() (notifies the waiters) instead of dropping
    it; or have _fail_queue claim each future as take_group does."""
    topic = client.topic("t", partitions=2)
    producer = topic.producer(linger_ms=60_000, batch_size=10**9)
    try:
        futures = [producer.send_async(b"q%d" % i, partition=1) for i in range(3)]
        assert futures[1].cancel()
        with (
            topic.producer(AccessMode.EXCLUSIVE_WITH_FENCING),
            pytest.raises(fencing.ProducerFenced),
        ):
            producer.send(b"x", partition=0)  # learns it was fenced
        assert all(f.done() for f in futures)
        _, not_done = concurrent.futures.wait(futures, timeout=2)
        assert not not_done, f"wait() never saw {len(not_done)} future(s) done"
        assert isinstance(futures[0].exception(), fencing.ProducerFenced)
        assert futures[1].cancelled()
    finally:
        producer.close()


def test_a_send_async_racing_close_gets_an_answer(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread T calls send_async() while the main thread closes the producer; T passed
    send_async()'s closed check just before close() began (here: held in encode_one, as a
    preempted thread would be).

    Expected: T's future gets an answer (an error: the producer is closed).
    Got: close() flushes, fails the queue and the sender thread ends (no queue, closed);
    T then queues its entry and sets _to_send for a sender that is gone: the future is
    never answered (close() again does nothing; only a flush() would send it).
    Fix: send_async() (fencing/_async/producer.py) should re-check _closed / _fenced after
    appending the entry (and fail it, or withdraw it), or the sender should not end while
    a send_async() is between its check and its append (a counter of sends in progress)."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    first = producer.send_async(b"first", partition=0)  # the sender thread exists now
    assert first.result(timeout=5).offset == 0
    inside = threading.Event()
    resume = threading.Event()
    real = group_commit.encode_one

    def preempted(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            inside.set()
            assert resume.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(group_commit, "encode_one", preempted)
    got: list[Any] = []

    def racer() -> None:
        try:
            got.append(producer.send_async(b"late", partition=0))
        except BaseException as exc:
            got.append(exc)

    thread = threading.Thread(target=racer, daemon=True)
    thread.start()
    assert inside.wait(5)
    producer.close()
    sender = producer._sender
    if isinstance(sender, threading.Thread):
        sender.join(5)
    resume.set()
    thread.join(5)
    assert len(got) == 1
    if isinstance(got[0], BaseException):
        return  # refused at once: an answer
    future = got[0]
    done, _ = concurrent.futures.wait([future], timeout=3)
    assert done, "a send_async() racing close() was never answered"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_child_forked_while_a_future_is_being_answered_can_use_send_async(
    server: ServerInfo, namespace: str
) -> None:
    """A process streams with send_async() (its sender thread answers futures all the
    time) and forks a worker; the child makes its own client and producer and sends with
    send_async().

    Expected: the child works (fencing/_forks.py: "a child forked while a thread of the
    parent held one of the client's locks does not hang: the client works in the child
    for new handles").
    Got: _Future's settle path takes the module-wide lock _MAKING
    (fencing/_runtime/threads/primitives.py). Forked while another thread held it (here a
    thread holds it as one answering a future does), the child's copy stays locked for
    ever: every future of the child hangs in set_result / result. The test's child is
    killed after its deadline.
    Fix: reset _MAKING in the child: os.register_at_fork(before=_MAKING.acquire,
    after_in_parent=_MAKING.release, after_in_child=_MAKING._at_fork_reinit) (as
    concurrent.futures.thread does for its own global lock)."""
    held = threading.Event()
    release = threading.Event()

    def answering() -> None:
        with threads._MAKING:  # what a thread inside _Future.set_result holds
            held.set()
            release.wait(10)

    thread = threading.Thread(target=answering, daemon=True)
    thread.start()
    assert held.wait(5)

    def child() -> int:
        with fencing.Client.from_url(server.url, namespace=namespace) as c:
            p = c.topic("t", partitions=1).producer()
            try:
                future = p.send_async(b"from the child", partition=0)
                p.flush()
                return 0 if future.result(timeout=5).offset == 0 else 3
            finally:
                p.close()

    try:
        pid = fork(child)
    finally:
        release.set()
        thread.join(5)
    assert wait_child(pid, 10) == 0  # (a child hung on a future is killed and fails here)


def test_an_event_loop_is_not_kept_alive_by_its_signal_ticker() -> None:
    """A program runs asyncio.run() many times (a CLI per command, a test per loop), each
    time with a queued send (a Signal waited on with a timeout).

    Expected: each finished loop is freed (421c60b: "kept weakly: a closed loop's ticker
    goes with it").
    Got: _tickers is a WeakKeyDictionary whose value (_Ticker) holds the loop strongly
    (ticker.loop, and the TimerHandle of its tick): the key is never released, so every
    loop that ever waited on a Signal lives for ever (with its ticker, its selector and
    whatever the pending tick references).
    Fix: fencing/_runtime/tasks/primitives.py: don't keep the loop in _Ticker (use the
    running loop in _tick, or keep a weakref.ref(loop)); cancel the tick handle when the
    waiting set empties."""

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


@pytest.fixture(autouse=True)
def _restore_sigint() -> Iterator[None]:
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("no_recheck")
def test_a_send_queued_behind_a_lingering_send_async_record_is_woken(
    client: fencing.Client,
) -> None:
    """A producer with linger_ms (records of send_async() wait for more) is also used by
    threads calling send(). A leader serves its own call and then 8 more for the callers
    queued meanwhile (_SERVE_AFTER_OWN), and lets the lock go with more queued: at its head
    a send_async() record, behind it a send() caller.

    Expected: the send() caller takes the queue at once (a send never waits for the
    linger: it carries the lingering records with it).
    Got: Producer._wake_head wakes only the first queued entry; a send_async() record's
    wake-up goes to the sender, which is lingering and just waits on (only batch_size or
    the deadline end a linger). The send() caller behind it sleeps until its own re-check
    (0.5 s by default; here 60 s) or the end of the linger.
    Fix: _wake_head (fencing/_async/producer.py) should also wake the first send() caller
    queued (its call takes the send_async records before it), or a wake-up of the sender by
    _wake_head should end its linger."""
    topic = client.topic("t", partitions=1)
    with topic.producer(linger_ms=60_000, batch_size=10**9) as producer:
        first = producer.send_async(b"0", partition=0)
        producer.flush()
        assert first.result(timeout=5).offset == 0
        standing = producer._standing[0]
        gate = Gate(producer)
        out: dict[bytes, Any] = {}
        threads_ = [_sender(producer, b"lead", out)]
        gate.wait_arrival()  # the leader's own call
        for k in range(sync_producer._SERVE_AFTER_OWN):
            value = b"t%d" % k
            threads_.append(_sender(producer, value, out))
            _wait_for(lambda: len(standing.queue) == 1)
            gate.let_go()
            gate.wait_arrival()  # extra call k + 1, carrying t<k>
        lingering = producer.send_async(b"x", partition=0)
        _wait_for(lambda: producer._lingering)
        late = _sender(producer, b"s", out)
        _wait_for(lambda: len(standing.queue) == 2)
        gate.active = False
        gate.let_go()  # the 8th extra call is answered: the leader lets the lock go
        late.join(5)
        assert b"s" in out, "a send() queued behind a lingering record was never woken"
        assert lingering.result(timeout=5).offset == out[b"s"].offset - 1


def test_flush_sends_records_queued_before_a_cancelled_last_one(client: fencing.Client) -> None:
    """A user queues two records with send_async() (the producer lingers), cancels the
    second future, and calls flush().

    Expected: flush() sends every record queued before it (the first lands; the cancelled
    one never does) and returns once each is answered.
    Got: flush() takes the last queued entry as its mark and stops once the mark is
    settled; a cancelled future (or an abandoned send() entry) is settled already, so
    flush() returns at once and the first record is still unsent (its future pending until
    the linger ends).
    Fix: Producer.flush (fencing/_async/producer.py): mark the last entry that is not
    settled, or wait until every entry queued before the flush is settled."""
    topic = client.topic("t", partitions=1)
    with topic.producer(linger_ms=60_000, batch_size=10**9) as producer:
        first = producer.send_async(b"first", partition=0)
        second = producer.send_async(b"second", partition=0)
        assert second.cancel()
        producer.flush()
        assert first.done(), "flush() returned with a record queued before it unsent"
        assert first.result().offset == 0


def test_close_sends_records_queued_before_a_cancelled_last_one(client: fencing.Client) -> None:
    """As above with close() (which flushes first): the user queues two records, cancels
    the second, and closes the producer.

    Expected: the first record is sent (close() flushes what was queued before it).
    Got: the flush stops at the cancelled mark, then close() fails the queue: the first
    future gets InvalidArgument("the producer was closed before this record was sent")
    and nothing is written.
    Fix: as for flush() (the mark in Producer.flush)."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer(linger_ms=60_000, batch_size=10**9)
    first = producer.send_async(b"first", partition=0)
    second = producer.send_async(b"second", partition=0)
    assert second.cancel()
    producer.close()
    assert first.result(timeout=5).offset == 0
    _, end = topic.offsets(0)
    assert end == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_task_send_queued_behind_a_lingering_record_is_woken(
    server: ServerInfo, namespace: str, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    """asyncio twin of test_a_send_queued_behind_a_lingering_send_async_record_is_woken: a
    holder of the partition's lock (a flush(), resolve(), or a leader past its extra calls;
    here the test) lets it go with a lingering send_async() record at the queue's head and
    a send() task behind it.

    Expected: the send() task takes the queue at once.
    Got: _wake_head wakes the lingering sender only; the task sleeps until its re-check
    (0.5 s by default; here 60 s: not done within 3 s).
    Fix: as for the threads (Producer._wake_head / _linger)."""
    monkeypatch.setattr(aproducer, "_RECHECK_SECONDS", 60.0)
    client = fencing.aio.Client.from_url(server.url, namespace=namespace)
    try:
        topic = client.topic("t", partitions=1)
        producer = await topic.producer(linger_ms=60_000, batch_size=10**9)
        first = await producer.send_async(b"0", partition=0)
        await producer.flush()
        assert first.result().offset == 0
        standing = producer._standing[0]
        await standing.lock.acquire()  # a holder that does not serve the queue
        lingering = await producer.send_async(b"x", partition=0)
        late = asyncio.ensure_future(producer.send(b"s", partition=0))
        while len(standing.queue) < 2:
            await asyncio.sleep(0)
        standing.lock.release()
        producer._wake_head(standing)  # what _holding() does as it lets go
        done, _ = await asyncio.wait([late], timeout=3)
        late.cancel()
        assert done, "a send() task queued behind a lingering record was never woken"
        assert (await late).offset == 2 and lingering.result().offset == 1
        await producer.close()
    finally:
        await client.close()

"""KeyboardInterrupt (Ctrl-C, or any asynchronous exception) in a thread that group-commits:
in the leader before, during or after its call, in a queued caller, while futures are
answered, while a future's Condition is made, in a signal handler. The interrupted caller
gets the interrupt; every other caller is still answered and woken, the partition's lock
is never kept, and the log holds each record once."""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import fencing
import fencing._group_commit
import fencing.aio
from fencing import _group_commit as group_commit
from fencing._runtime.threads import primitives as threads
from fencing._sync import group_send
from fencing._sync import producer as sync_producer
from fencing._sync.metadata import TopicMetadata
from fencing._sync.outcomes import Outcomes
from fencing.faults import Proxy

from ..support.group_commit import (
    Answers,
    Gate,
    QueuedGroup,
    interrupt,
    run_threads,
    sender,
    sending_thread,
    stacks,
    start_all,
)
from ..support.logs import log_of, read_values, records_of, values_of
from ..support.polling import wait_until


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
            start_all(workers, "a chained caller was never woken")
        finally:
            sync_producer.group_commit.pass_on = real_pass_on  # type: ignore[assignment]
    assert hit.is_set(), "no chain formed: the test did not exercise it"
    assert len(interrupted) == 1
    assert len(answered) == 6 * 40 - 1
    # The interrupted send landed (it was answered before the interrupt): 240 records.
    _, end = topic.offsets(0)
    assert end == 1 + 6 * 40


@pytest.mark.usefixtures("no_recheck")
def test_an_interrupt_in_the_leader_waiting_for_its_chain_leaves_no_caller_behind(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt raised in a leader while it waits for the callers it answered to
    run (_let_answered_run's wait on the chain's end): the leader's record landed, every
    other caller is woken and answered once, and the producer goes on."""
    topic = client.topic("t", partitions=1)
    real_end = group_commit.ChainEnd
    hits: list[str] = []
    hits_lock = threading.Lock()

    class InterruptingSignal:
        def __init__(self, signal: Any) -> None:
            self.signal = signal

        def set(self) -> None:
            self.signal.set()

        def wait(self, timeout: float) -> bool:
            with hits_lock:
                first = len(hits) < 3
                if first:
                    hits.append(threading.current_thread().name)
            if first:
                raise KeyboardInterrupt
            return bool(self.signal.wait(timeout))

    def chain_end(event: Any) -> Any:
        return real_end(InterruptingSignal(event))

    monkeypatch.setattr(group_commit, "ChainEnd", chain_end)
    ledger = Answers()
    interrupted: list[bytes] = []
    with topic.producer() as producer:

        def sender(i: int) -> Callable[[], None]:
            def run() -> None:
                for n in range(60):
                    value = b"s%d-%d" % (i, n)
                    try:
                        ledger.put(value, 0, producer.send(value, partition=0))
                    except KeyboardInterrupt:
                        with hits_lock:
                            interrupted.append(value)

            return run

        run_threads([sender(i) for i in range(8)])
        monkeypatch.setattr(group_commit, "ChainEnd", real_end)
        assert producer.send(b"after", partition=0).offset == 8 * 60
    assert len(hits) == 3
    assert len(interrupted) == 3
    assert len(ledger.answers) == 8 * 60 - 3
    log = log_of(topic, 0)
    assert sorted(log.values()) == sorted(
        [b"s%d-%d" % (i, n) for i in range(8) for n in range(60)] + [b"after"]
    )
    ledger.check_against(topic, 1)


@pytest.mark.usefixtures("restore_sigint")
@pytest.mark.usefixtures("no_recheck")
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="SIGINT")
def test_callers_chained_after_an_interrupted_caller_are_still_woken(
    client: fencing.Client,
) -> None:
    """A user presses Ctrl-C while the main thread's send() waits queued, after its record was
    taken into a call in flight made by another thread (the record then lands).

    The main thread gets KeyboardInterrupt; the other callers answered by the same call return
    as soon as it is answered."""
    topic = client.topic("t", partitions=1)
    with topic.producer() as producer:
        producer.send(b"warm", partition=0)
        standing = producer._queues[0]
        gate = Gate(producer)
        out: dict[bytes, Any] = {}
        interrupted = threading.Event()
        a_in_flight = threading.Event()
        others: list[threading.Thread] = []
        failures: list[str] = []

        def controller() -> None:
            try:
                first = sender(producer, b"a", out)  # call 1, held in flight
                others.append(first)
                gate.wait_arrival()
                a_in_flight.set()  # (only now may the main thread send: it queues behind)
                wait_until(
                    lambda: len(standing.queue) == 1, interval=0.001
                )  # the main thread's send
                others.extend(sender(producer, v, out) for v in (b"b", b"c"))
                wait_until(lambda: len(standing.queue) == 3, interval=0.001)
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


@pytest.mark.usefixtures("restore_sigint")
def test_send_async_records_requeued_after_an_interrupted_flush_are_answered(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user queues records with send_async() and calls flush(); Ctrl-C lands in flush() after it
    took the records from the queue but before the call left (here: in merge_batches). The
    records are put back at the head of the queue (never sent), and the user calls flush()
    again.

    The second flush() sends them; every future gets its metadata."""
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


def test_an_interrupt_as_the_leader_lets_go_never_keeps_the_partition_lock(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread's send() leads (it holds the partition's lock and sends); its record lands; Ctrl-C
    (or any async exception) arrives as it lets go, at the first instruction of the
    ``self.sending.wake_answered()`` call before ``lock.release()`` in PartitionQueue.submit's
    finally.

    The caller gets KeyboardInterrupt (its record landed) and the producer goes on: the next
    send() on the partition is answered, close() returns."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    standing = producer._queues[0]
    real = type(standing.sending).wake_answered
    hit: list[str] = []

    def interrupted_on_letting_go(s: Any) -> None:
        if not hit and sys._getframe(1).f_code.co_name == "submit":
            hit.append("x")
            raise KeyboardInterrupt  # (what a SIGINT at this call's first instruction does)
        real(s)

    monkeypatch.setattr(type(standing.sending), "wake_answered", interrupted_on_letting_go)
    try:
        with pytest.raises(KeyboardInterrupt):
            producer.send(b"landed", partition=0)
        assert hit
        out: list[Any] = []
        later = threading.Thread(
            target=lambda: out.append(producer.send(b"later", partition=0)), daemon=True
        )
        later.start()
        later.join(5)
        assert out, "the partition's lock was kept by an interrupted leader: send() hangs"
        assert out[0].offset == 1
    finally:
        if standing.lock.locked():
            standing.lock.release()  # (so that close() does not hang the suite)
        producer.close()
    assert values_of(topic) == [b"landed", b"later"]


def test_an_interrupt_while_futures_are_answered_leaves_none_unanswered(
    client: fencing.Client,
) -> None:
    """A user queues three records with send_async() (the producer lingers) and calls flush() in
    the main thread; the first future has a done callback, and Ctrl-C lands while it runs
    (here the callback raises KeyboardInterrupt, as the default SIGINT handler does in
    whatever code runs). The user catches it and calls flush() again.

    Every record landed (offsets 0, 1, 2): every future gets its metadata, at the latest from
    the second flush() (flush: "wait until each is answered")."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer(linger_ms=60_000, batch_size=10**9)
    try:
        futures = [producer.send_async(b"r%d" % i, partition=0) for i in range(3)]
        calls: list[int] = []

        def callback(_: Any) -> None:
            calls.append(1)
            if len(calls) == 1:
                raise KeyboardInterrupt

        futures[0].add_done_callback(callback)
        with pytest.raises(KeyboardInterrupt):
            producer.flush()
        producer.flush()
        _, not_done = concurrent.futures.wait(futures, timeout=3)
        assert values_of(topic) == [b"r0", b"r1", b"r2"]  # every record landed
        assert not not_done, f"{len(not_done)} future(s) of landed records never answered"
        assert [f.result().offset for f in futures] == [0, 1, 2]
    finally:
        producer.close()


def test_an_interrupt_as_the_condition_is_made_loses_no_wake_up() -> None:
    """A thread waits for a send_async() future (result()); an interrupt (Ctrl-C in the main
    thread, any async exception) arrives in _Future.__getattr__ just after the Condition was
    stored in its slot and before ``self._made = True`` (CPython checks for signals after
    the ``object.__setattr__`` call). The caller catches it and waits again; the sender then
    answers the future.

    The second wait returns the result as soon as the future is answered."""
    future = threads.new_future()
    target = line_of(threads._Future.__getattr__, 'if name == "_condition":')
    code = threads._Future.__getattr__.__code__
    took: list[float] = []
    interrupted: list[bool] = []

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is not code:
            return None

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line" and frame.f_lineno == target:
                sys.settrace(None)
                raise KeyboardInterrupt  # (a signal handled right after the store)
            return local

        return local

    def waiter() -> None:
        sys.settrace(tracer)
        try:
            future.result(timeout=5)
        except KeyboardInterrupt:
            interrupted.append(True)
        finally:
            sys.settrace(None)
        began = time.monotonic()
        with contextlib.suppress(concurrent.futures.TimeoutError):
            future.result(timeout=30)
        took.append(time.monotonic() - began)

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    wait_until(lambda: bool(interrupted), 5, interval=0.001)
    wait_until(lambda: "_condition" in dir(future) and waiting_on(future), 5, interval=0.001)
    threads.settle(future, 42)
    thread.join(10)
    assert future.result(timeout=0) == 42
    # Woken by the result, not by its 30 s timeout (with room for a busy machine).
    assert took and took[0] < 10.0, f"the waiter was never woken: it slept {took[0]:.2f}s"


def test_a_signal_handler_that_cancels_futures_never_deadlocks() -> None:
    """A program installs a signal handler that cancels its pending send_async() futures (a
    graceful shutdown on SIGTERM/SIGINT). The signal arrives while the main thread makes a
    future's Condition (concurrent.futures.wait() over many futures, add_done_callback,
    result(): each makes one under the module lock _MAKING; the handler runs inside, at the
    first instruction of threading.Condition.__init__).

    The handler cancels the futures and the program goes on."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _REENTRANT_CHILD],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    try:
        out, err = proc.communicate(timeout=8)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the main thread deadlocked on _MAKING inside its own signal handler")
    assert proc.returncode == 0, err
    assert out.strip() == "cancelled 3"


@pytest.mark.usefixtures("no_recheck")
def test_an_interrupt_after_the_wake_up_and_before_passing_it_on_strands_no_caller(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three send() callers M, B, C queue behind a call in flight; the leader sends them as one
    call and wakes them as a chain (M wakes B, B wakes C: group_commit.settle with
    chain=True). M's caller is interrupted (Ctrl-C) just after its wait returned with its
    answer, before it passed the chain on (here: at the first instruction of pass_on).

    M's caller gets KeyboardInterrupt (its record landed); B and C return as soon as their call
    is answered."""
    topic = client.topic("t", partitions=1)
    real_pass_on = group_commit.pass_on
    hit: list[Any] = []

    def interrupted(entry: Any) -> None:
        if not hit and entry.parts[0] == b"m" and entry.done and not entry.abandoned:
            hit.append(entry.then)  # (kept to wake the stranded callers after the test)
            raise KeyboardInterrupt
        real_pass_on(entry)

    monkeypatch.setattr(group_commit, "pass_on", interrupted)
    with topic.producer() as producer:
        standing = producer._queues[0]
        gate = Gate(producer)
        out: dict[bytes, Any] = {}
        workers = [sender(producer, b"a", out)]
        gate.wait_arrival()  # A leads; its call is in flight
        for n, value in enumerate((b"m", b"b", b"c"), 1):
            workers.append(sender(producer, value, out))
            wait_until(lambda n=n: len(standing.queue) == n, interval=0.001)
        gate.active = False
        gate.let_go()  # A's call answered: A sends [m, b, c] as one call, then the chain
        try:
            deadline = time.monotonic() + 5
            for w in workers:
                w.join(max(0.0, deadline - time.monotonic()))
            assert len(hit) == 1
            assert isinstance(out.get(b"m"), KeyboardInterrupt)
            stuck = sorted(v for v in (b"a", b"b", b"c") if v not in out)
            assert not stuck, f"callers chained after the interrupted one never woken: {stuck}"
            assert [out[v].offset for v in (b"a", b"b", b"c")] == [0, 2, 3]
        finally:
            monkeypatch.setattr(group_commit, "pass_on", real_pass_on)
            stranded = hit[0] if hit else None
            while stranded is not None:  # (stranded ones: wake them, not in a minute)
                stranded.event.set()
                stranded = getattr(stranded, "then", None)
    assert values_of(topic) == [b"a", b"m", b"b", b"c"]


@pytest.mark.parametrize("window", ["merge_batches", "settle"])
def test_an_interrupt_of_the_leader_outside_the_call_leaves_no_caller_hanging(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch, window: str
) -> None:
    """Five threads queue sends behind a held lock; the one that leads is interrupted with a real
    asynchronous KeyboardInterrupt (PyThreadState_SetAsyncExc) while it runs
    ``group_commit.merge_batches`` (after ``take_group`` took the group, before the script
    call) or ``group_commit.settle`` (after the call returned).

    The leader gets KeyboardInterrupt; each of the other four gets exactly one answer within
    seconds, its metadata (the interrupt stays with the leader); a later send works."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    producer.send(b"first")
    standing = producer._queues[0]
    taken: list[list[Any]] = []
    entered = threading.Event()
    release = threading.Event()
    original_take = fencing._group_commit.take_group
    original = getattr(fencing._group_commit, window)

    def take(*args: Any, **kwargs: Any) -> Any:
        group = original_take(*args, **kwargs)
        taken.append(group)
        return group

    def slow(*args: Any, **kwargs: Any) -> Any:
        if not entered.is_set():
            entered.set()
            deadline = time.monotonic() + 5
            while not release.is_set() and time.monotonic() < deadline:
                pass  # pure Python: the asynchronous exception lands here
        return original(*args, **kwargs)

    monkeypatch.setattr(fencing._group_commit, "take_group", take)
    monkeypatch.setattr(fencing._group_commit, window, slow)
    answers: dict[int, list[object]] = {i: [] for i in range(5)}
    leader: list[threading.Thread] = []

    def send(i: int) -> None:
        try:
            answers[i].append(producer.send(b"v%d" % i))
        except BaseException as exc:  # KeyboardInterrupt included
            answers[i].append(exc)

    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(5)]
    assert standing.lock.acquire(timeout=5)
    for t in threads:
        t.start()
    wait_until(lambda: len(standing.queue) == 5, interval=0.002, detail=stacks)
    standing.lock.release()
    standing.wake_head()
    try:
        assert entered.wait(5)
        (leader_thread,) = [t for t in threads if t.ident == sending_thread(threads)]
        leader.append(leader_thread)
        interrupt(leader_thread)
        release.set()
        deadline = time.monotonic() + 2.0  # an answer takes milliseconds; 0.5 s rechecks
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        hung = [i for i, t in enumerate(threads) if t.is_alive()]
        assert not hung, f"callers {hung} hang; stacks:\n{stacks()}"
        assert all(len(a) == 1 for a in answers.values()), answers
        (hit,) = [i for i, t in enumerate(threads) if t is leader_thread]
        assert isinstance(answers[hit][0], KeyboardInterrupt), answers
        others = {i: a[0] for i, a in answers.items() if i != hit}
        assert all(isinstance(a, fencing.RecordMetadata) for a in others.values()), answers
        md = producer.send(b"after")
        # Interrupted before the call left, its record was never sent; after it returned,
        # its record had landed with the others'.
        landed = len(others) + (window == "settle")
        assert md.offset == 1 + landed
        offsets = sorted(a.offset for a in others.values())  # type: ignore[union-attr]
        assert set(offsets) <= set(range(1, 1 + landed)) and len(offsets) == len(others)
    finally:
        release.set()
        # Unstick whatever a failure left behind, so no thread spins for the rest of the run.
        for group in taken:
            for entry in group:
                if not entry.done:
                    entry.error = RuntimeError("unstuck by the test")
                    entry.event.set()
        for t in threads:
            t.join(5)
        producer.close()


def test_an_interrupt_of_a_queued_thread_or_of_the_leader_in_its_call_stays_with_that_thread(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt (raised for real with PyThreadState_SetAsyncExc) into a thread
    queued behind a call in flight: it gets the interrupt and its record is never sent.
    Then one into the leader while it is inside its script call: it gets the interrupt,
    and the interrupt stays with it: the batch is resolved by the next call (here it never
    left: ``last_resolution == (0, None)``), and each caller it carried gets its own
    offsets from a send of their own, in the order they queued."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    producer.send(b"first")
    standing = producer._queues[0]
    original = producer._calls.execute
    entered = threading.Event()
    release = threading.Event()

    def spinning(call: Any, durability: Any = None) -> Any:
        if call.script.name == "append" and not entered.is_set():
            entered.set()
            deadline = time.monotonic() + 5
            while not release.is_set() and time.monotonic() < deadline:
                pass  # the asynchronous exception lands here, inside the call
        return original(call, durability)

    monkeypatch.setattr(producer._calls, "execute", spinning)
    answers: dict[int, list[object]] = {i: [] for i in range(6)}

    def send(i: int) -> None:
        try:
            answers[i].append(producer.send(b"v%d" % i))
        except BaseException as exc:  # KeyboardInterrupt included
            answers[i].append(exc)

    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(6)]
    try:
        assert standing.lock.acquire(timeout=5)
        for t in threads:
            t.start()
        wait_until(lambda: len(standing.queue) == 6, interval=0.002, detail=stacks)
        interrupt(threads[2])  # queued: lands when its wait wakes up (<= 0.5 s)
        threads[2].join(5)
        assert isinstance(answers[2][0], KeyboardInterrupt), answers[2]
        standing.lock.release()
        standing.wake_head()
        assert entered.wait(5)
        leader_ident = sending_thread(threads)
        (leader,) = [t for t in threads if t.ident == leader_ident]
        interrupt(leader)
        release.set()
        for t in threads:
            t.join(5)
        assert not [t for t in threads if t.is_alive()], stacks()
        assert all(len(a) == 1 for a in answers.values()), answers
        others = [i for i, t in enumerate(threads) if t is not leader and i != 2]
        assert isinstance(answers[threads.index(leader)][0], KeyboardInterrupt)
        mds = {i: answers[i][0] for i in others}
        assert all(isinstance(md, fencing.RecordMetadata) for md in mds.values()), answers
        assert sorted(md.offset for md in mds.values()) == [1, 2, 3, 4]  # type: ignore[union-attr]
        assert producer.last_resolution == (0, None)
        assert standing.standing.pending is None
        md = producer.send(b"after")
        assert md.offset == 5
    finally:
        release.set()
        producer.close()
    log = [r.value for r in topic.reader(0).read(max_records=100)]
    assert log == [
        b"first",
        *[b"v%d" % i for i in sorted(mds, key=lambda i: mds[i].offset)],
        b"after",
    ]  # type: ignore[union-attr]


def line_of(function: Any, text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    for i, line in enumerate(lines):
        if text in line:
            return first + i
    raise AssertionError(f"{text!r} not in {function.__qualname__}")


def waiting_on(future: Any) -> bool:
    try:
        condition = object.__getattribute__(future, "_condition")
    except AttributeError:
        return False
    return bool(condition._waiters)


_REENTRANT_CHILD = textwrap.dedent(
    """
    import signal, sys
    from fencing._runtime.threads import primitives as p

    pending = [p.new_future() for _ in range(3)]

    def on_signal(signum, frame):
        # A program's graceful shutdown: cancel what was not sent yet.
        for f in pending:
            f.cancel()

    signal.signal(signal.SIGUSR1, on_signal)
    real = p._LAZY["_condition"]

    raised = []

    def making():
        # The signal arrives while a Condition is being made (CPython runs the handler at
        # the first instruction of threading.Condition.__init__, under _MAKING). Once: the
        # handler makes Conditions too.
        if not raised:
            raised.append(True)
            signal.raise_signal(signal.SIGUSR1)
        return real()

    p._LAZY["_condition"] = making
    waited = p.new_future()
    waited.add_done_callback(lambda f: None)
    print("cancelled", sum(f.cancelled() for f in pending), flush=True)
    """
)


# -- an interrupted caller's call: the callers it carried -------------------------------------


def interrupt_once_landed(
    producer: Any, monkeypatch: pytest.MonkeyPatch, then: Callable[[], None] | None = None
) -> None:
    """The first append carrying more than one record lands, then its sender is
    interrupted as it reads the reply (``then()`` runs first): the batch stays pending."""
    calls = producer._calls
    original = calls.execute
    hit: list[int] = []

    def execute(call: Any, durability: Any = None) -> Any:
        result = original(call, durability)
        if call.script.name == "append" and not hit and len(call.args) > 7:
            hit.append(1)
            if then is not None:
                then()
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(calls, "execute", execute)


def test_an_interrupt_as_a_carried_batch_is_resolved_never_sends_its_records_again(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's call lands and it is interrupted; the next caller resolves the batch
    (it landed) and is interrupted just after the resolution came back, before it answered
    the third caller. The third caller is told the offset its record landed at, and the
    record is in the log once (it is never sent again as a new record)."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    producer.send(b"warm", partition=0)
    interrupt_once_landed(producer, monkeypatch)
    original = Outcomes.resolve
    resolved: list[Any] = []

    def resolve(self: Any, standing: Any) -> Any:
        result = original(self, standing)
        if not resolved:
            resolved.append(result)
            raise KeyboardInterrupt  # Ctrl-C right after the resolution came back
        return result

    monkeypatch.setattr(Outcomes, "resolve", resolve)
    group = QueuedGroup(producer, [b"a", b"b", b"c"])
    group.let_go()
    group.join()
    producer.close()
    assert resolved and [md.offset for md in resolved[0]] == [1, 2, 3]
    assert len(group.told(KeyboardInterrupt)) == 2, group.answers
    (third,) = group.told(fencing.RecordMetadata)
    assert [r.value for r in records_of(topic)] == [b"warm", b"a", b"b", b"c"]
    assert group.answers[third].offset == 1 + group.values.index(third)


def test_callers_carried_by_an_interrupted_call_are_never_told_a_refusal_when_it_cannot_be_resolved(
    server: Any, namespace: str, proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's call lands and it is interrupted as the network goes away; the next
    caller's resolution of the batch cannot reach the server. The callers it carried are
    told OutcomeUnknown (their records may have landed: here they did), never a refusal
    (which would say nothing was written, and invite a resend that duplicates them)."""
    with fencing.Client.from_url(proxy.url_for(server.url), namespace=namespace) as client:
        topic = client.topic("t", partitions=1)
        producer = topic.producer()
        producer.send(b"warm", partition=0)

        def network_gone() -> None:
            proxy.refuse_connections(None)
            proxy.sever()

        interrupt_once_landed(producer, monkeypatch, then=network_gone)
        group = QueuedGroup(producer, [b"a", b"b", b"c"])
        group.let_go()
        group.join(60)
        proxy.clear()
        assert len(group.told(KeyboardInterrupt)) == 1, group.answers
        assert len(group.told(fencing.OutcomeUnknown)) == 2, group.answers
        producer.send(b"after", partition=0)
        assert producer.last_resolution is not None
        assert [md.offset for md in producer.last_resolution[1] or []] == [1, 2, 3]
        producer.close()
    with fencing.Client.from_url(server.url, namespace=namespace) as reader:
        assert read_values(reader, "t", 0) == [b"warm", b"a", b"b", b"c", b"after"]


def test_an_interrupt_after_the_group_was_taken_sends_the_others_records(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader is interrupted after it took the group off the queue, before the call
    left (as its progress record is made, the first Python call there). Nothing was sent:
    the others' records go back to the head of the queue and are sent, each caller gets
    its offset."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    producer.send(b"warm", partition=0)
    real = group_send.Progress
    hit: list[int] = []

    def progress() -> Any:
        if not hit:
            hit.append(1)
            raise KeyboardInterrupt
        return real()

    monkeypatch.setattr(group_send, "Progress", progress)
    group = QueuedGroup(producer, [b"a", b"b", b"c"])
    group.let_go()
    group.join()
    producer.close()
    (interrupted,) = group.told(KeyboardInterrupt)
    others = [v for v in group.values if v != interrupted]
    assert group.told(fencing.RecordMetadata) == others, group.answers
    assert [group.answers[v].offset for v in others] == [1, 2]
    assert [r.value for r in records_of(topic)] == [b"warm", *others]


def test_an_interrupt_as_a_landed_call_is_booked_counts_its_sequences_once(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send's call lands; its thread is interrupted as the producer books it (after the
    sequences moved on, before the rest: at ``saw_next``). The record is in the log once,
    and the producer goes on at the next sequence: later sends land."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    producer.send(b"warm", partition=0)
    original = TopicMetadata.saw_next
    hit: list[int] = []

    def saw_next(self: Any, p: int, end: int) -> Any:
        if not hit and sys._getframe(1).f_code.co_name == "_book":
            hit.append(1)
            raise KeyboardInterrupt
        return original(self, p, end)

    monkeypatch.setattr(TopicMetadata, "saw_next", saw_next)
    with pytest.raises(KeyboardInterrupt):
        producer.send(b"interrupted", partition=0)
    assert [producer.send(b"later%d" % i, partition=0).offset for i in range(3)] == [2, 3, 4]
    producer.close()
    assert [r.value for r in records_of(topic)] == [
        b"warm",
        b"interrupted",
        b"later0",
        b"later1",
        b"later2",
    ]


@pytest.mark.usefixtures("no_recheck")
def test_an_interrupt_as_the_carried_callers_are_answered_leaves_none_unanswered(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's call lands and it is interrupted; the next caller resolves the batch
    (it landed) and is interrupted in turn as it answers the callers the batch carried.
    The one left is answered with its offset at once (by whoever holds the partition
    next), never told OutcomeUnknown, and nothing is sent twice."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    producer.send(b"warm", partition=0)
    interrupt_once_landed(producer, monkeypatch)
    real = group_send.group_commit.settle
    hit: list[int] = []

    def settle(*args: Any, **kwargs: Any) -> Any:
        if not hit and kwargs.get("chain") is False:  # answering the carried callers
            hit.append(1)
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(group_send.group_commit, "settle", settle)
    group = QueuedGroup(producer, [b"a", b"b", b"c"])
    group.let_go()
    group.join()  # (no caller waits for a re-check: they are off)
    producer.close()
    assert hit
    assert len(group.told(KeyboardInterrupt)) == 2, group.answers
    (third,) = group.told(fencing.RecordMetadata)
    assert group.answers[third].offset == 1 + group.values.index(third)
    assert [r.value for r in records_of(topic)] == [b"warm", b"a", b"b", b"c"]

"""Review s9 of the group-commit session (a99aed4..9282cd9): holes and probes.

Each test says what a user does, what is expected, and what happened. Tests marked HOLE
failed on 9282cd9 (each reproduced a defect, fixed since: the "Fix" each names is what was
done, or close to it); tests marked PROBE attacked something that held and are kept as
regressions. Queued callers' own re-check is set to a minute where a
lost wake-up is looked for, so a caller left asleep shows as a thread that does not return
by its deadline. A test that would hang the runner (a deadlock) runs its attack in a child
interpreter with a deadline instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import dataclasses
import gc
import inspect
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from typing import Any

import pytest

import fencing
from fencing import _group_commit as group_commit
from fencing._record import RecordMetadata, placed
from fencing._runtime.tasks import primitives as tasks
from fencing._runtime.threads import primitives as threads
from fencing._sync import producer as sync_producer

from .test_fork import fork, wait_child
from .test_review_16_holes import Gate


@pytest.fixture
def no_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued caller never looks again on its own within a test: only wake-ups count."""
    monkeypatch.setattr(sync_producer, "_RECHECK_SECONDS", 60.0)


def _wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.001)


def _values(topic: fencing.Topic, partition: int = 0) -> list[bytes]:
    return [r.value for r in topic.reader(partition, start_offset="earliest").read(1000)]


# -- the threads flavour: an interrupt in send()'s own finally ------------------------------


def test_an_interrupt_as_the_leader_lets_go_never_keeps_the_partition_lock(
    client: fencing.Client,
) -> None:
    """HOLE. A thread's send() leads (it holds the partition's lock and sends); its record
    lands; Ctrl-C (or any async exception) arrives as it lets go, at the first instruction
    of the new ``self._wake_answered(standing)`` call that cad83aa/8d632e5 put before
    ``lock.release()`` in Producer._send's finally.

    Expected: the caller gets KeyboardInterrupt (its record landed) and the producer goes
    on: the next send() on the partition is answered, close() returns.
    Got: the exception leaves the finally before ``lock.release()``: the partition's lock
    is held for ever by nobody. Every later send() on the partition loops on its re-check
    (try_lock fails for ever), flush() and close() block for ever on the lock (_holding).
    Where: fencing/_async/producer.py Producer._send, the finally after _lead:
    ``entry.leading = False; self._wake_answered(standing); lock.release(); ...``.
    Fix: release the lock whatever _wake_answered does (``try: self._wake_answered(...)
    finally: lock.release(); self._wake_head(...)``), or wake after releasing."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    standing = producer._standing[0]
    real = producer._wake_answered
    hit: list[str] = []

    def interrupted_on_letting_go(s: Any) -> None:
        if not hit and sys._getframe(1).f_code.co_name == "_send":
            hit.append("x")
            raise KeyboardInterrupt  # (what a SIGINT at this call's first instruction does)
        real(s)

    producer._wake_answered = interrupted_on_letting_go  # type: ignore[method-assign]
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
    assert _values(topic) == [b"landed", b"later"]


# -- the threads flavour: answers of send_async() lost with an interrupted delivery ----------


def test_an_interrupt_while_futures_are_answered_leaves_none_unanswered(
    client: fencing.Client,
) -> None:
    """HOLE. A user queues three records with send_async() (the producer lingers) and
    calls flush() in the main thread; the first future has a done callback, and Ctrl-C
    lands while it runs (here the callback raises KeyboardInterrupt, as the default SIGINT
    handler does in whatever code runs). The user catches it and calls flush() again.

    Expected: every record landed (offsets 0, 1, 2): every future gets its metadata, at
    the latest from the second flush() (flush: "wait until each is answered").
    Got: Producer._deliver takes the whole list of kept answers (``kept, self._answers =
    self._answers, []``) and settles them one by one; the interrupt leaves the loop and
    the answers not given yet are dropped with the local list. Futures 1 and 2 stay
    pending for ever (concurrent.futures.wait() without a timeout hangs), though their
    records are in the log. A callback raising SystemExit in the sender thread does the
    same (and ends the sender: no later send_async() record is ever sent).
    Where: fencing/_async/producer.py Producer._deliver.
    Fix: put back what was not delivered when the loop is left by an exception
    (try/finally: ``self._answers[:0] = rest``), or settle every future first and run the
    callbacks after (they are what runs user code)."""
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
        assert _values(topic) == [b"r0", b"r1", b"r2"]  # every record landed
        assert not not_done, f"{len(not_done)} future(s) of landed records never answered"
        assert [f.result().offset for f in futures] == [0, 1, 2]
    finally:
        producer.close()


# -- the lazy future ------------------------------------------------------------------------


def _line_of(function: Any, text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    for i, line in enumerate(lines):
        if text in line:
            return first + i
    raise AssertionError(f"{text!r} not in {function.__qualname__}")


def test_an_interrupt_as_the_condition_is_made_loses_no_wake_up() -> None:
    """HOLE. A thread waits for a send_async() future (result()); an interrupt (Ctrl-C in
    the main thread, any async exception) arrives in _Future.__getattr__ just after the
    Condition was stored in its slot and before ``self._made = True`` (CPython checks for
    signals after the ``object.__setattr__`` call). The caller catches it and waits again;
    the sender then answers the future.

    Expected: the second wait returns the result as soon as the future is answered.
    Got: the slot holds a Condition (so __getattr__ never runs again) but ``_made`` stays
    False for ever: set_result() takes the plain-store path, which notifies nobody. The
    waiter sleeps out its whole timeout (result(timeout=None) and concurrent.futures.wait
    hang for ever; wait() reports the done future as not done).
    Where: fencing/_runtime/threads/primitives.py _Future.__getattr__ (the flag is set
    after the store).
    Fix: set ``self._made = True`` before storing the Condition (the standard path then
    makes it if need be), or tell "made" by the slot itself (no separate flag)."""
    future = threads.new_future()
    target = _line_of(threads._Future.__getattr__, 'if name == "_condition":')
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
            future.result(timeout=3)
        took.append(time.monotonic() - began)

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    _wait_for(lambda: bool(interrupted), 5)
    _wait_for(lambda: "_condition" in dir(future) and _waiting_on(future), 5)
    threads.settle(future, 42)
    thread.join(10)
    assert future.result(timeout=0) == 42
    assert took and took[0] < 1.0, f"the waiter was never woken: it slept {took[0]:.2f}s"


def _waiting_on(future: Any) -> bool:
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


def test_a_signal_handler_that_cancels_futures_never_deadlocks() -> None:
    """HOLE. A program installs a signal handler that cancels its pending send_async()
    futures (a graceful shutdown on SIGTERM/SIGINT). The signal arrives while the main
    thread makes a future's Condition (concurrent.futures.wait() over many futures,
    add_done_callback, result(): each makes one under the module lock _MAKING; the
    handler runs inside, at the first instruction of threading.Condition.__init__).

    Expected: the handler cancels the futures and the program goes on.
    Got: cancel() on a future without a Condition goes through __getattr__, which takes
    _MAKING again in the same thread: it is a plain lock, not reentrant, so the main
    thread deadlocks on itself for ever (and every other thread that makes a Condition or
    settles a future after it, and every os.fork(), whose before-hook takes _MAKING). A
    finalizer (__del__, weakref.finalize) run by a garbage collection under _MAKING - the
    Condition's allocations can start one - that touches a future deadlocks the same way.
    Where: fencing/_runtime/threads/primitives.py _Future.__getattr__ (``make()`` runs
    Python code under _MAKING), with _MAKING = _thread.allocate_lock().
    Fix: make the Condition outside the lock and only store it under the lock when the
    slot is still empty (no Python code under _MAKING), and/or make _MAKING an RLock."""
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


# -- asyncio: the signal ticker --------------------------------------------------------------


def test_a_loop_closed_with_a_wait_pending_is_freed() -> None:
    """HOLE. A program runs an event loop with loop.run_until_complete() and leaves a task
    waiting on a queued send (a Signal wait with a timeout: its ticker holds the wait),
    then closes the loop and drops it (a Ctrl-C out of run_until_complete, a test whose
    loop is torn down with tasks left, a worker thread's loop).

    Expected: the loop, its tasks and everything they reference are freed (421c60b: "a
    loop that ends goes with its ticker").
    Got: _tickers is a WeakKeyDictionary keyed by the loop whose value, the _Ticker,
    holds the waiting Signals (``waiting``), each holding its waiter future, which holds
    the loop (future._loop): the value keeps its own key alive, from a module global. The
    loop, its selector and the whole task graph are kept for ever, one per such loop.
    Where: fencing/_runtime/tasks/primitives.py Signal.wait / _Ticker (``waiting``).
    Fix: keep the waiting signals weakly (a WeakSet), or have the ticker drop the whole
    set when its loop closes (the tick is only ever run by that loop)."""

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


# -- the threads flavour: the chain of wake-ups --------------------------------------------


def _sender(producer: fencing.Producer, value: bytes, out: dict[bytes, Any]) -> threading.Thread:
    def run() -> None:
        try:
            out[value] = producer.send(value, partition=0)
        except BaseException as exc:  # (KeyboardInterrupt included: reported by the test)
            out[value] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.usefixtures("no_recheck")
def test_an_interrupt_after_the_wake_up_and_before_passing_it_on_strands_no_caller(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HOLE. Three send() callers M, B, C queue behind a call in flight; the leader sends
    them as one call and wakes them as a chain (M wakes B, B wakes C: group_commit.settle with
    chain=True). M's caller is interrupted (Ctrl-C) just after its wait returned with its
    answer, before it passed the chain on (here: at the first instruction of pass_on).

    Expected: M's caller gets KeyboardInterrupt (its record landed); B and C return as
    soon as their call is answered.
    Got: Producer._send passes the chain on after the loop, outside the try whose except
    passes it on for an interrupted caller; an interrupt between the end of the wait and
    ``pass_on`` leaves with B's wake-up. B and C sleep until their own re-check (0.5 s each
    by default; here a minute: they are not answered within 5 s), and the leader waits its
    _CHAIN_WAIT for nothing.
    Where: fencing/_async/producer.py Producer._send (``with standing.guard:
    group_commit.pass_on(entry)`` after the while loop, not in a finally).
    Fix: pass the chain on in a ``finally`` that covers the wait loop and the code after
    it (pass_on is idempotent: it clears ``then``)."""
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
        standing = producer._standing[0]
        gate = Gate(producer)
        out: dict[bytes, Any] = {}
        workers = [_sender(producer, b"a", out)]
        gate.wait_arrival()  # A leads; its call is in flight
        for n, value in enumerate((b"m", b"b", b"c"), 1):
            workers.append(_sender(producer, value, out))
            _wait_for(lambda n=n: len(standing.queue) == n)
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
            while stranded is not None:  # (with the hole: wake them, not in a minute)
                stranded.event.set()
                stranded = getattr(stranded, "then", None)
    assert _values(topic) == [b"a", b"m", b"b", b"c"]


# -- probes ---------------------------------------------------------------------------------


def test_placed_metadata_behaves_as_the_dataclass_in_every_way_users_touch_it() -> None:
    """PROBE. RecordMetadata built by placed() (a class swap, not the dataclass __init__):
    equal, hash-equal, pickled, copied, deep-copied, replaced, asdict'ed, repr'ed and
    frozen exactly as one built by RecordMetadata(...); placed(n=0) is empty."""
    built = [RecordMetadata("t", 3, 41 + i, 7) for i in range(3)]
    made = placed("t", 3, 41, 7, 3)
    assert made == built and [hash(m) for m in made] == [hash(b) for b in built]
    assert all(type(m) is RecordMetadata for m in made)
    for m, b in zip(made, built, strict=True):
        assert pickle.loads(pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL)) == b
        assert pickle.loads(pickle.dumps(m, protocol=0)) == b
        assert copy.copy(m) == b and copy.deepcopy(m) == b
        assert dataclasses.replace(m, offset=0) == dataclasses.replace(b, offset=0)
        assert dataclasses.asdict(m) == dataclasses.asdict(b)
        assert repr(m) == repr(b)
        with pytest.raises(dataclasses.FrozenInstanceError):
            m.offset = 0  # type: ignore[misc]
        assert not hasattr(m, "__dict__")
    assert placed("t", 0, 5, 1, 0) == []
    assert {made[0]: 1}[built[0]] == 1


def test_lazy_futures_raced_by_cancel_wait_as_completed_and_callbacks_from_many_threads() -> None:
    """PROBE. 2000 lazy futures; per future, threads race: the sender's claim_future then
    settle (or fail), a user's cancel(), add_done_callback(), concurrent.futures.wait() and
    as_completed() over slices. Every future ends exactly one of cancelled or answered (a
    cancelled one was never claimed), every callback runs exactly once, and every wait()
    and as_completed() sees every future done."""
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
    """PROBE. asyncio.wrap_future() of a send_async()-style future: its answer reaches the
    asyncio future; cancelling the asyncio one cancels the lazy one if not yet claimed
    (claim_future then refuses it), and is ignored once it was claimed."""

    async def main() -> None:
        a, b, c = threads.new_future(), threads.new_future(), threads.new_future()
        wa, wb, wc = asyncio.wrap_future(a), asyncio.wrap_future(b), asyncio.wrap_future(c)
        threading.Thread(target=threads.settle, args=(a, "ok"), daemon=True).start()
        assert await asyncio.wait_for(wa, 5) == "ok"
        wb.cancel()
        await asyncio.sleep(0)
        assert b.cancelled() and threads.claim_future(b) is False
        assert threads.claim_future(c) is True
        wc.cancel()
        await asyncio.sleep(0)
        assert not c.cancelled()
        threads.settle(c, 1)
        assert c.result(timeout=1) == 1

    asyncio.run(main())


def test_signal_waits_time_out_on_many_loops_in_many_threads() -> None:
    """PROBE. Twelve threads each run ten short event loops one after the other, each loop
    with waits that time out, waits that are set from the loop, and waits cancelled; every
    timeout ends within two ticks, and no ticker outlives its loop (once collected)."""
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


def test_flushall_mid_stream_fails_every_queued_record_and_writes_nothing(
    own: tuple[fencing.Client, Any],
) -> None:
    """PROBE (G9). A producer streams with send_async() and send(); the server is
    FLUSHALLed mid-stream (a failover to an empty replica). Records queued after it fail
    with StateLost (the append's fast path declines, the general path answers), none is
    answered with metadata, and nothing is written back into the flushed server."""
    client, raw = own
    topic = client.topic("t", partitions=1)
    producer = topic.producer(linger_ms=60_000, batch_size=10**9)
    try:
        before = [producer.send_async(b"b%d" % i, partition=0) for i in range(5)]
        producer.flush()
        assert [f.result(timeout=5).offset for f in before] == list(range(5))
        raw.flushall()
        after = [producer.send_async(b"a%d" % i, partition=0) for i in range(5)]
        producer.flush()
        for f in after:
            assert isinstance(f.exception(timeout=5), fencing.StateLost), f.exception()
        with pytest.raises(fencing.StateLost):
            producer.send(b"s", partition=0)
        assert raw.dbsize() == 0 or not [k for k in raw.keys("*") if k.endswith(b":log")]
    finally:
        producer.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_child_forked_with_futures_pending_refuses_the_parents_producer(
    client: fencing.Client,
) -> None:
    """PROBE. A parent has send_async() records queued (its sender lingers) when it forks.
    The child cannot use the parent's producer (ProcessBoundError), its close() does
    nothing, and it can still make and settle futures of its own; the parent's records are
    then all sent once and every future answered."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer(linger_ms=60_000, batch_size=10**9)
    try:
        futures = [producer.send_async(b"p%d" % i, partition=0) for i in range(3)]

        def child() -> int:
            try:
                producer.send_async(b"child", partition=0)
                return 3
            except fencing.ProcessBoundError:
                pass
            producer.close()  # does nothing in a child
            own = threads.new_future()
            threading.Thread(target=threads.settle, args=(own, 7), daemon=True).start()
            return 0 if own.result(timeout=5) == 7 else 4

        pid = fork(child)
        assert wait_child(pid, 10) == 0
        producer.flush()
        assert [f.result(timeout=5).offset for f in futures] == [0, 1, 2]
    finally:
        producer.close()
    assert _values(topic) == [b"p0", b"p1", b"p2"]

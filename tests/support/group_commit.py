"""Helpers of the group-commit tests (``tests/group_commit``): callers queued on a partition
while a call is in flight, and what each of them was told.

- :func:`no_recheck`: a fixture; a queued caller never looks again on its own, so only
  wake-ups count and a lost one shows as a caller that does not return by its deadline.
- :class:`Held` holds a partition's lock as a call in flight does; :class:`Gate` holds the
  append calls themselves until the test lets each go (a slow Redis).
- :class:`Ledger` (tests written for both flavours) and :class:`Answers` (threads) record
  each caller's one answer; :func:`check_ledger`, :meth:`Answers.check_against` and
  :func:`check_answers` hold it against the log read back from Redis.
- :func:`run_threads`, :func:`start_all`, :func:`threads_sending`, :func:`sender`: threads
  under one deadline; :func:`bounded` and :func:`stacks`: a hang fails with every stack.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import os
import random
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import fencing
from fencing._async import partition_queue as aio_queue
from fencing._sync import partition_queue as sync_queue
from fencing.verify import Attempt

from .flavours import unwrap
from .logs import log_of, records_of_async

__all__ = [
    "SEED",
    "Answers",
    "FinalizerInterrupts",
    "Gate",
    "Held",
    "Ledger",
    "QueuedGroup",
    "bounded",
    "check_answers",
    "check_ledger",
    "check_records",
    "interrupt",
    "interrupts_in_finalizers",
    "no_recheck",
    "restore_sigint",
    "result_of",
    "run_threads",
    "script_calls",
    "sender",
    "sending_thread",
    "stacks",
    "start_all",
    "threads_sending",
]

#: The random choices of a run (which tasks are cancelled, when): set FENCING_TEST_SEED to
#: replay a failure, whose message names the one it ran with.
SEED = int(os.environ.get("FENCING_TEST_SEED", "0")) or random.randrange(1 << 30)


@pytest.fixture
def no_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued caller (thread or task) never looks again on its own within a test: only
    wake-ups count."""
    monkeypatch.setattr(sync_queue, "RECHECK_SECONDS", 60.0)
    monkeypatch.setattr(aio_queue, "RECHECK_SECONDS", 60.0)


@pytest.fixture
def restore_sigint() -> Iterator[None]:
    """The SIGINT handler as it was before the test (which may install its own)."""
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)


class FinalizerInterrupts:
    """How many KeyboardInterrupts Python swallowed: a signal whose handler ran inside a
    finalizer (a ``__del__`` the garbage collector called) raises there, and Python prints
    "Exception ignored" instead of raising it in the code the thread was running."""

    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def interrupts_in_finalizers() -> Iterator[FinalizerInterrupts]:
    """Counts the KeyboardInterrupts that landed in a finalizer during the test (passing
    every other unraisable exception on to the hook that was there before)."""
    swallowed = FinalizerInterrupts()
    before = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            swallowed.count += 1
        else:
            before(unraisable)

    sys.unraisablehook = hook
    try:
        yield swallowed
    finally:
        sys.unraisablehook = before


# -- futures and the calls themselves --------------------------------------------------------


async def result_of(future: Any) -> Any:
    """The result of a send_async() future of either flavour."""
    if isinstance(future, concurrent.futures.Future):
        return await asyncio.wrap_future(future)
    return await future


def script_calls(url: str) -> int:
    """How many EVALSHA calls the server ran so far."""
    with redis.Redis.from_url(url) as r:
        stats = r.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


class Held:
    """The lock of a producer's partition, held by the test as a call in flight holds it
    (so sends are queued for sure, not by a lucky interleaving)."""

    def __init__(self, producer: Any, partition: int = 0) -> None:
        self.producer = unwrap(producer)
        self.standing = self.producer._queues[partition]

    async def __aenter__(self) -> Held:
        lock = self.standing.lock
        if isinstance(lock, asyncio.Lock):
            await lock.acquire()
        else:
            assert lock.acquire(timeout=5)
        return self

    def queued(self) -> int:
        return len(self.standing.queue)

    async def __aexit__(self, *exc: object) -> None:
        self.standing.lock.release()
        self.standing.wake_head()


class Gate:
    """Holds a producer's append calls in flight until the test lets each one go (a slow
    Redis, so which sends are in which call is known, not a lucky interleaving)."""

    def __init__(self, producer: fencing.Producer) -> None:
        self.real = producer._calls.execute
        self.arrived = threading.Semaphore(0)
        self.go = threading.Semaphore(0)
        self.active = True
        producer._calls.execute = self._execute  # type: ignore[method-assign]

    def _execute(self, call: Any, durability: Any = None) -> Any:
        if self.active and call.script.name == "append":
            self.arrived.release()
            assert self.go.acquire(timeout=20), "the gate was never opened"
        return self.real(call, durability)

    def wait_arrival(self) -> None:
        assert self.arrived.acquire(timeout=10), "no append call reached the gate"

    def let_go(self) -> None:
        self.go.release()


# -- hangs -------------------------------------------------------------------------------------


def interrupt(thread: threading.Thread) -> bool:
    """Raise KeyboardInterrupt in ``thread`` (as a signal handler would in the main one),
    for real, with PyThreadState_SetAsyncExc: it lands at the thread's next bytecode.
    False if the thread had ended."""
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident or 0), ctypes.py_object(KeyboardInterrupt)
    )
    assert n in (0, 1), n
    return n == 1


def sending_thread(threads: list[threading.Thread]) -> int | None:
    """The ident of the thread in ``threads`` sending a partition's queue now (its stack is
    inside ``send_next``), or None."""
    frames = sys._current_frames()
    for t in threads:
        frame = frames.get(t.ident or 0)
        while frame is not None:
            if frame.f_code.co_name == "send_next":
                return t.ident
            frame = frame.f_back
    return None


def stacks() -> str:
    """Every thread's stack, for a hang report."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        out.append(
            f"--- thread {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame))
        )
    return "\n".join(out)


async def bounded(awaitable: Any, timeout: float = 20.0) -> Any:
    """``awaitable`` within ``timeout`` seconds, or a failure carrying every thread's stack."""
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except TimeoutError:
        pytest.fail(f"hung for {timeout}s (seed {SEED}); stacks:\n{stacks()}")


# -- threads -----------------------------------------------------------------------------------


def run_threads(targets: list[Callable[[], None]], timeout: float = 20.0) -> None:
    """Start ``targets`` together on daemon threads and join them under one deadline."""
    go = threading.Barrier(len(targets))
    errors: list[BaseException] = []

    def wrapped(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            go.wait(10)
            try:
                fn()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        return run

    workers = [threading.Thread(target=wrapped(t), daemon=True) for t in targets]
    for w in workers:
        w.start()
    deadline = time.monotonic() + timeout
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
    stuck = [w.name for w in workers if w.is_alive()]
    assert not stuck, f"{len(stuck)} caller(s) never returned: a lost wake-up"
    assert not errors, errors


class QueuedGroup:
    """Threads each sending one record, queued behind a held partition (a call in flight),
    then let go together: one of them leads a call carrying every record.

    >>> group = QueuedGroup(producer, [b"a", b"b", b"c"])    # doctest: +SKIP
    >>> group.let_go(); group.join()
    >>> group.answers[b"a"]          # its RecordMetadata, or what it raised
    """

    def __init__(self, producer: Any, values: list[bytes]) -> None:
        self.values = values
        self.answers: dict[bytes, Any] = {}
        self._queue = producer._queues[0]

        def send(value: bytes) -> None:
            try:
                self.answers[value] = producer.send(value, partition=0)
            except BaseException as exc:  # an interrupt included
                self.answers[value] = exc

        self.threads = [threading.Thread(target=send, args=(v,), daemon=True) for v in values]
        assert self._queue.lock.acquire(timeout=5)
        for thread in self.threads:
            thread.start()
        deadline = time.monotonic() + 5
        while len(self._queue.queue) < len(values):
            assert time.monotonic() < deadline, stacks()
            time.sleep(0.001)

    def let_go(self) -> None:
        """The call in flight ends: the first queued caller leads."""
        self._queue.lock.release()
        self._queue.wake_head()

    def join(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not [t for t in self.threads if t.is_alive()], stacks()

    def told(self, kind: type[BaseException] | type[fencing.RecordMetadata]) -> list[bytes]:
        """The values whose caller got an answer of ``kind``."""
        return [v for v in self.values if isinstance(self.answers.get(v), kind)]


def start_all(workers: list[threading.Thread], hung: str) -> None:
    """Start the threads and join them within 30 s in all; a thread still alive fails."""
    for w in workers:
        w.start()
    deadline = time.monotonic() + 30
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
    assert not any(w.is_alive() for w in workers), hung


def threads_sending(
    producer: fencing.Producer, threads: int, each: int
) -> tuple[list[list[fencing.RecordMetadata]], list[BaseException]]:
    """``threads`` threads each sending ``each`` records to partition 0 at once: what each
    one got, and what was raised."""
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
    start_all(workers, "a send waited for a wake-up that never came")
    return results, errors


def sender(producer: fencing.Producer, value: bytes, out: dict[bytes, Any]) -> threading.Thread:
    """A started thread sending ``value`` to partition 0; ``out[value]`` gets what the send
    returned or raised (a KeyboardInterrupt too)."""

    def run() -> None:
        try:
            out[value] = producer.send(value, partition=0)
        except BaseException as exc:  # reported by the test
            out[value] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# -- what each caller was told ----------------------------------------------------------------


class Ledger:
    """What every caller was told: exactly one answer per value, and the Attempts."""

    def __init__(self) -> None:
        self.answers: dict[bytes, list[str]] = {}
        self.attempts: list[Attempt] = []

    def acked(self, value: bytes, md: Any, partition: int = 0) -> None:
        assert md.partition == partition
        self.answers.setdefault(value, []).append("acked")
        self.attempts.append(Attempt(value, partition, "acked", md.offset, md.epoch))

    def failed(self, value: bytes, exc: BaseException, partition: int = 0) -> str:
        if isinstance(exc, fencing.ProducerFenced):
            outcome = "fenced"
        elif isinstance(exc, fencing.OutcomeUnknown) or not isinstance(exc, fencing.FencingError):
            outcome = "unknown"  # OutcomeUnknown, a cancellation, an interrupt
        else:
            outcome = type(exc).__name__  # a refusal: nothing written
        self.answers.setdefault(value, []).append(outcome)
        self.attempts.append(
            Attempt(value, partition, outcome if outcome in ("fenced", "unknown") else "fenced")
        )
        return outcome

    def outcome(self, value: bytes) -> str:
        (only,) = self.answers[value]
        return only

    def check_one_answer_each(self, values: list[bytes]) -> None:
        missing = [v for v in values if v not in self.answers]
        twice = {v: a for v, a in self.answers.items() if len(a) != 1}
        assert not missing, f"no answer for {missing[:5]}"
        assert not twice, f"more than one answer: {list(twice.items())[:5]}"

    def acked_offsets(self) -> dict[bytes, int]:
        return {
            a.value: a.offset
            for a in self.attempts
            if a.outcome == "acked" and a.offset is not None
        }


async def check_ledger(topic: Any, ledger: Ledger, partitions: int = 1) -> list[fencing.Record]:
    """Exact offsets: every acked value at its acked offset once; no value twice;
    nothing fenced or refused in the log."""
    records: list[fencing.Record] = []
    for p in range(partitions):
        records += await records_of_async(topic, p)
    return check_records(records, ledger)


def check_records(records: list[fencing.Record], ledger: Ledger) -> list[fencing.Record]:
    """:func:`check_ledger` over records already read (from a sync test, say)."""
    values = [r.value for r in records]
    assert len(values) == len(set(values)), "a value landed twice"
    where = {r.value: (r.partition, r.offset) for r in records}
    for a in ledger.attempts:
        if a.outcome == "acked":
            assert where.get(a.value) == (a.partition, a.offset), a
        elif a.outcome == "fenced":
            assert a.value not in where, a
    return records


class Answers:
    """What each caller (a thread) was told, once per value (a second answer is an error)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answers: dict[bytes, tuple[int, Any]] = {}
        self.twice: list[bytes] = []

    def put(self, value: bytes, partition: int, answer: Any) -> None:
        with self.lock:
            if value in self.answers:
                self.twice.append(value)
            self.answers[value] = (partition, answer)

    def attempts(self) -> list[Attempt]:
        out = []
        for value, (p, answer) in self.answers.items():
            if isinstance(answer, fencing.RecordMetadata):
                out.append(Attempt(value, p, "acked", answer.offset, answer.epoch))
            elif isinstance(answer, fencing.ProducerFenced):
                out.append(Attempt(value, p, "fenced"))
            else:
                out.append(Attempt(value, p, "unknown"))
        return out

    def check_against(self, topic: fencing.Topic, partitions: int) -> None:
        """Each acked value is at its offset; nothing else but unknown values in the log,
        each value at most once."""
        assert not self.twice, f"answered twice: {self.twice[:5]}"
        logs = {p: log_of(topic, p) for p in range(partitions)}
        for value, (p, answer) in self.answers.items():
            if isinstance(answer, fencing.RecordMetadata):
                assert answer.partition == p and answer.topic == topic.name
                assert logs[p].get(answer.offset) == value, (value, answer)
        for p, log in logs.items():
            assert sorted(log) == list(range(len(log))), f"gap in partition {p}"
            values = list(log.values())
            assert len(values) == len(set(values)), "a value landed twice"
            for value in values:
                if value in self.answers:
                    outcome = self.answers[value][1]
                    assert not isinstance(outcome, fencing.ProducerFenced), value


def check_answers(
    log: dict[int, bytes], answers: dict[bytes, Any], *, may_land: set[bytes]
) -> None:
    """Acked values at their offsets; nothing fenced, each value at most once; a value
    not acked is in ``may_land`` (cancelled or unknown)."""
    assert sorted(log) == list(range(len(log))), "a gap in the log"
    values = list(log.values())
    assert len(values) == len(set(values)), "a value landed twice"
    for value, answer in answers.items():
        if isinstance(answer, fencing.RecordMetadata):
            assert log.get(answer.offset) == value, (value, answer)
    acked = {v for v, a in answers.items() if isinstance(a, fencing.RecordMetadata)}
    assert set(values) - acked <= may_land

"""A caller's cancellation or interrupt affects that caller alone.

Group commit carries many callers' records in one call. Whoever's time the call runs in,
cancelling that task (asyncio) or interrupting that thread (KeyboardInterrupt, an
asynchronous exception) must never turn the *other* callers' answers into
``OutcomeUnknown``: each of them gets its own metadata. Rounds of concurrent sends on one
EXCLUSIVE producer, with about 30% of the callers cancelled or interrupted at random
points, several seeds, both flavours; then the same with replies lost on the wire, where a
caller may be told ``OutcomeUnknown`` only when a call carrying its record lost its reply.
Every acknowledged record is in the log once, at the offset it was given, and the whole
log verifies.
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading
import time
from typing import Any

import pytest

import fencing
from fencing import AccessMode
from fencing.faults import Proxy

from ..support.flavours import Api, unwrap
from ..support.group_commit import (
    SEED,
    FinalizerInterrupts,
    Ledger,
    bounded,
    check_ledger,
    check_records,
    interrupt,
    stacks,
)
from ..support.logs import records_of, verified
from ..support.wire import APPEND

ROUNDS = 25
CALLERS = 20
VICTIMS = 6  # 30% of each round's callers
#: Cancels and interrupts land at a random point within this many seconds of the round's
#: start: queued, leading a call, waiting for the call in flight, being answered.
SPREAD = 0.003
#: ... or after up to this many turns of the event loop.
LOOP_TURNS = 40

SEEDS = [1, 2, 3]


class Calls:
    """The append calls a producer made and which of them raised OutcomeUnknown (what a
    caller told ``OutcomeUnknown`` must have had its record in)."""

    def __init__(self) -> None:
        self.unknown: list[tuple[Any, ...]] = []
        #: The thread inside an append call now (threads), if any: the one whose interrupt
        #: could reach other callers. (Not sys._current_frames(): polled in a loop, it can
        #: deadlock CPython 3.11 against the collector.)
        self.in_call: int | None = None

    def record(self, call: Any, error: BaseException) -> None:
        if call.script.name == "append" and isinstance(error, fencing.OutcomeUnknown):
            self.unknown.append(tuple(call.args) + tuple(call.resent_args or ()))

    def carried(self, value: bytes) -> bool:
        return any(value in args for args in self.unknown)

    def watch_async(self, producer: Any) -> None:
        calls = unwrap(producer)._calls
        original = calls.execute

        async def execute(call: Any, durability: Any = None) -> Any:
            try:
                return await original(call, durability)
            except BaseException as exc:
                self.record(call, exc)
                raise

        calls.execute = execute

    def watch_threads(self, producer: fencing.Producer) -> None:
        calls = producer._calls  # type: ignore[attr-defined]
        original = calls.execute

        def execute(call: Any, durability: Any = None) -> Any:
            self.in_call = threading.get_ident()
            try:
                return original(call, durability)
            except BaseException as exc:
                self.record(call, exc)
                raise
            finally:
                self.in_call = None

        calls.execute = execute


def judge(
    ledger: Ledger, calls: Calls, told: dict[bytes, object], victims: set[bytes], seed: str
) -> None:
    """Put each caller's one answer in the ledger; fail on an ``OutcomeUnknown`` told to a
    caller that was not interrupted and whose record rode in no call that lost its reply,
    and on any other error."""
    for value, answer in told.items():
        if isinstance(answer, fencing.RecordMetadata):
            ledger.acked(value, answer)
        elif (
            value in victims and isinstance(answer, (asyncio.CancelledError, KeyboardInterrupt))
        ) or (isinstance(answer, fencing.OutcomeUnknown) and calls.carried(value)):
            ledger.failed(value, answer)
        else:
            raise AssertionError(f"seed {seed}: {value!r} was told {answer!r}")


# -- asyncio: tasks cancelled --------------------------------------------------------------


async def cancelled_rounds(producer: Any, rng: random.Random, ledger: Ledger, calls: Calls) -> int:
    """The rounds under asyncio: at least ``ROUNDS``, and more (up to four times as many)
    until ``ROUNDS`` sends were cancelled before they completed (on a fast server a
    cancellation often comes too late); returns how many were."""
    cancelled = 0
    for r in range(4 * ROUNDS):
        if r >= ROUNDS and cancelled >= ROUNDS:
            break
        values = [b"r%d-%d" % (r, i) for i in range(CALLERS)]
        tasks = {v: asyncio.ensure_future(producer.send(v)) for v in values}
        victims = set(rng.sample(values, VICTIMS))

        async def cancel_later(task: asyncio.Future[Any]) -> None:
            # A random point, not a wait: after some turns of the loop (queued, leading,
            # in the call), or some time (being answered, or done).
            if rng.random() < 0.75:
                for _ in range(rng.randrange(LOOP_TURNS)):
                    await asyncio.sleep(0)
            else:
                await asyncio.sleep(rng.uniform(0, SPREAD))
            task.cancel()

        await asyncio.gather(*(cancel_later(tasks[v]) for v in victims))
        results = await bounded(asyncio.gather(*tasks.values(), return_exceptions=True))
        told = dict(zip(values, results, strict=True))
        cancelled += sum(isinstance(a, asyncio.CancelledError) for a in results)
        judge(ledger, calls, told, victims, f"{SEED}")
    return cancelled


@pytest.mark.parametrize("seed", SEEDS)
async def test_cancelled_tasks_never_fail_the_sends_of_others(aio_api: Api, seed: int) -> None:
    """No fault but cancellation: every caller not cancelled gets its metadata, and a
    cancellation never leaves a batch pending (a call under way completes for everyone,
    so the fate of a cancelled caller's records is known)."""
    rng = random.Random(f"{SEED}-{seed}")
    client = aio_api.client()
    topic = client.topic("t", partitions=1)
    ledger, calls = Ledger(), Calls()
    async with await topic.producer(AccessMode.EXCLUSIVE) as producer:
        calls.watch_async(producer)
        cancelled = await cancelled_rounds(producer, rng, ledger, calls)
        assert unwrap(producer)._queues[0].standing.pending is None
        ledger.acked(b"last", await producer.send(b"last"))
    assert cancelled >= ROUNDS, "the cancellations came too late to test anything"
    assert calls.unknown == []
    await check_ledger(topic, ledger)
    verified(aio_api.url, aio_api.namespace, "t", ledger.attempts, note=f"seed {SEED}-{seed}")


@pytest.mark.parametrize("seed", SEEDS)
async def test_cancelled_tasks_and_lost_replies_fail_only_the_calls_that_lost_them(
    aio_api: Api, proxy: Proxy, seed: int
) -> None:
    """The same with append replies lost on the wire (the connection closed on each): a
    caller is told OutcomeUnknown only if a call carrying its record lost its reply, and
    the next send settles it exactly (the log verifies against every answer)."""
    rng = random.Random(f"{SEED}-{seed}")
    client = aio_api.client(proxy.url_for(aio_api.url))
    topic = client.topic("t", partitions=1)
    ledger, calls = Ledger(), Calls()
    async with await topic.producer(AccessMode.EXCLUSIVE) as producer:
        ledger.acked(b"first", await producer.send(b"first"))
        calls.watch_async(producer)
        rule = proxy.drop_replies(APPEND, count=8)
        await cancelled_rounds(producer, rng, ledger, calls)
        assert rule.hits == 8
        rule.remove()
        ledger.acked(b"last", await producer.send(b"last"))
        assert unwrap(producer)._queues[0].standing.pending is None
    await check_ledger(topic, ledger)
    verified(aio_api.url, aio_api.namespace, "t", ledger.attempts, note=f"seed {SEED}-{seed}")


# -- threads: KeyboardInterrupt raised into sending threads ---------------------------------


INTERRUPTED = KeyboardInterrupt()
#: Worker threads beside a main thread hit by Ctrl-C (few: the main thread must often be
#: the one sending the queue).
WORKERS = 3
#: Sends each thread makes one after the other (a victim stops at its interrupt).
SENDS_PER_THREAD = 10
#: Interrupts land within this many seconds of a round's start (a round takes longer).
THREAD_SPREAD = 0.02


class Round:
    """One round of sending threads: what each caller was told."""

    def __init__(self, producer: fencing.Producer, r: int) -> None:
        self.producer = producer
        self.values = {
            t: [b"r%d-%d-%d" % (r, t, n) for n in range(SENDS_PER_THREAD)] for t in range(CALLERS)
        }
        self.told: dict[bytes, object] = {}
        self.started = threading.Barrier(CALLERS + 1)
        self.over = threading.Event()
        self.finished: set[int] = set()

    def sender(self, t: int) -> None:
        current = None
        try:
            self.started.wait(10)
            for value in self.values[t]:
                current = value
                try:
                    self.told[value] = self.producer.send(value)
                except fencing.FencingError as exc:
                    self.told[value] = exc
            self.finished.add(t)
            self.over.wait(30)
        except KeyboardInterrupt:  # in a send, or between two (then the answer stands)
            if current is not None:
                self.told.setdefault(current, INTERRUPTED)
            self.finished.add(t)
            self.over.wait(30)


def interrupted_rounds(
    producer: fencing.Producer,
    rng: random.Random,
    ledger: Ledger,
    calls: Calls,
    rounds: int = 3,
    *,
    until: int = 0,
) -> int:
    """Rounds of threads sending one record after the other, 30% of them interrupted once
    at a random point; returns how many sends were interrupted. With ``until``, rounds go on
    (up to 20) until that many sends were interrupted inside a send: how many interrupts
    land before their thread is done depends on the machine's load."""
    interrupted = 0
    r = -1
    while r + 1 < rounds or (interrupted < until and r + 1 < 20):
        r += 1
        round_ = Round(producer, r)
        threads = [
            threading.Thread(target=round_.sender, args=(t,), daemon=True) for t in range(CALLERS)
        ]
        for thread in threads:
            thread.start()
        round_.started.wait(10)
        victims: list[int] = []
        for _ in range(VICTIMS):
            time.sleep(rng.uniform(0, THREAD_SPREAD / VICTIMS))  # a random point, not a wait
            # Half the time the thread sending the queue now (its interrupt is the one that
            # could reach the others), else any thread still sending.
            ident = {th.ident: t for t, th in enumerate(threads)}
            left = [t for t in range(CALLERS) if t not in victims and t not in round_.finished]
            if not left:
                break
            leading = ident.get(calls.in_call)
            t = leading if leading in left and rng.random() < 0.5 else rng.choice(left)
            victims.append(t)
            interrupt(threads[t])
        deadline = time.monotonic() + 30
        while len(round_.finished) < CALLERS and time.monotonic() < deadline:
            time.sleep(0.002)
        assert len(round_.finished) == CALLERS, stacks()
        round_.over.set()
        for thread in threads:
            thread.join(10)
        interrupted += sum(answer is INTERRUPTED for answer in round_.told.values())
        victim_values = {v for t in victims for v in round_.values[t]}
        judge(ledger, calls, round_.told, victim_values, f"{SEED}")
    return interrupted


@pytest.mark.parametrize("seed", SEEDS)
def test_interrupted_threads_never_fail_the_sends_of_others(
    client: fencing.Client, server: Any, namespace: str, seed: int
) -> None:
    """KeyboardInterrupt raised into 30% of the sending threads at random points (queued,
    leading a call, inside the call, being answered): every other caller gets its
    metadata. An interrupted leader's batch is resolved by the next call on the partition,
    and the callers it carried are answered from that."""
    rng = random.Random(f"{SEED}-{seed}")
    topic = client.topic("t", partitions=1)
    ledger, calls = Ledger(), Calls()
    with topic.producer(AccessMode.EXCLUSIVE) as producer:
        calls.watch_threads(producer)
        interrupted = interrupted_rounds(producer, rng, ledger, calls, until=6)
        ledger.acked(b"last", producer.send(b"last"))
        assert producer._queues[0].standing.pending is None  # type: ignore[attr-defined]
    assert interrupted >= 6, "the interrupts came too late to test anything"
    assert calls.unknown == []
    check_records(records_of(topic), ledger)
    verified(server.url, namespace, "t", ledger.attempts, note=f"seed {SEED}-{seed}")


@pytest.mark.parametrize("seed", SEEDS)
def test_interrupted_threads_and_lost_replies_fail_only_the_calls_that_lost_them(
    server: Any, namespace: str, proxy: Proxy, seed: int
) -> None:
    """The same with append replies lost on the wire: a caller is told OutcomeUnknown only
    if a call carrying its record lost its reply, and the next send settles it exactly."""
    rng = random.Random(f"{SEED}-{seed}")
    ledger, calls = Ledger(), Calls()
    with fencing.Client.from_url(proxy.url_for(server.url), namespace=namespace) as client:
        topic = client.topic("t", partitions=1)
        with topic.producer(AccessMode.EXCLUSIVE) as producer:
            ledger.acked(b"first", producer.send(b"first"))
            calls.watch_threads(producer)
            rule = proxy.drop_replies(APPEND, count=8)
            interrupted_rounds(producer, rng, ledger, calls)
            assert rule.hits == 8
            rule.remove()
            ledger.acked(b"last", producer.send(b"last"))
            assert producer._queues[0].standing.pending is None  # type: ignore[attr-defined]
        check_records(records_of(topic), ledger)
    verified(server.url, namespace, "t", ledger.attempts, note=f"seed {SEED}-{seed}")


@pytest.mark.usefixtures("restore_sigint")
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="SIGINT")
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.one_server
def test_ctrl_c_in_the_main_thread_never_fails_the_sends_of_worker_threads(
    client: fencing.Client,
    server: Any,
    namespace: str,
    seed: int,
    interrupts_in_finalizers: FinalizerInterrupts,
) -> None:
    """Ctrl-C for real: SIGINT delivered to the process while its main thread sends beside
    worker threads (Python's default handler raises KeyboardInterrupt in the main
    thread, wherever it is: queued, sending the queue, being answered). The main thread's
    sends are the only ones interrupted; every worker send gets its metadata."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rng = random.Random(f"{SEED}-{seed}")
    topic = client.topic("t", partitions=1)
    ledger, calls = Ledger(), Calls()
    told: dict[bytes, object] = {}
    stop = threading.Event()
    main = threading.main_thread()

    def ctrl_c(delay: float, while_sending: bool) -> None:
        """SIGINT after ``delay`` seconds, or (``while_sending``) as soon as the main thread
        is inside a call (when its interrupt could reach the others), within 50 ms."""
        deadline = time.monotonic() + (0.05 if while_sending else delay)
        while time.monotonic() < deadline:
            if while_sending and calls.in_call == main.ident:
                break
            time.sleep(0.0001)  # (lets the main thread run: a poll, not a wait)
        signal.pthread_kill(main.ident or 0, signal.SIGINT)

    with topic.producer(AccessMode.EXCLUSIVE) as producer:
        calls.watch_threads(producer)

        def worker(w: int) -> None:
            n = 0
            while not stop.is_set():
                value = b"w%d-%d" % (w, n)
                try:
                    told[value] = producer.send(value)
                except fencing.FencingError as exc:
                    told[value] = exc
                n += 1
                time.sleep(0.0005)  # pacing, so the main thread often finds the partition free

        workers = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(WORKERS)]
        for thread in workers:
            thread.start()
        main_values: set[bytes] = set()
        interrupted = 0
        for n in range(300):
            value = b"main-%d" % n
            main_values.add(value)
            timer = None
            try:
                try:
                    if n % 10 == 5:  # Ctrl-C lands somewhere in this send, or just after it
                        timer = threading.Thread(
                            target=ctrl_c, args=(rng.uniform(0, 0.002), rng.random() < 0.7)
                        )
                        timer.start()
                    told[value] = producer.send(value)
                except KeyboardInterrupt:
                    told.setdefault(value, INTERRUPTED)
                    interrupted += 1
                    timer = None
                if timer is not None:
                    timer.join(10)  # its signal lands here at the latest
                    for _ in range(1000):
                        pass  # (the handler runs between two bytecodes)
            except KeyboardInterrupt:  # landed after the answer: the answer stands
                interrupted += 1
        stop.set()
        for thread in workers:
            thread.join(20)
        assert not [t for t in workers if t.is_alive()], stacks()
        judge(ledger, calls, told, main_values, f"{SEED}")
        ledger.acked(b"last", producer.send(b"last"))
        assert producer._queues[0].standing.pending is None  # type: ignore[attr-defined]
    # Every Ctrl-C landed once: in the main thread's code, or (its handler running inside a
    # finalizer the garbage collector called there) swallowed by Python, as it is anywhere.
    assert interrupted + interrupts_in_finalizers.count == 30
    assert calls.unknown == []
    check_records(records_of(topic), ledger)
    verified(server.url, namespace, "t", ledger.attempts, note=f"seed {SEED}-{seed}")

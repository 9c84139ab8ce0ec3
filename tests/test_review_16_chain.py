"""Review of issue 16 (group commit on threads): regression tests of what held.

Callers woken in a chain, the sender waiting for the chain, the lazily made future, the
linger counter, and answers given per group, attacked with real threads under deadlines.
Queued callers' own re-check is a minute here, so a lost wake-up shows as a thread that
does not return by its deadline. Every test checks that each caller got exactly one
answer, and the log read back from Redis (offsets, values, verify_log).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import fencing
from fencing import AccessMode
from fencing import _group_commit as group_commit
from fencing._lua_loader import script
from fencing._runtime.threads.primitives import claim_future, new_future, settle
from fencing._sync import producer as sync_producer
from fencing.faults import Proxy
from fencing.verify import Attempt, verify_log

APPEND = script("append").sha1.encode()


@pytest.fixture(autouse=True)
def no_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued caller never looks again on its own within a test: only wake-ups count."""
    monkeypatch.setattr(sync_producer, "_RECHECK_SECONDS", 60.0)


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


def read_log(topic: fencing.Topic, partition: int) -> dict[int, bytes]:
    """Every record of a partition read back: offset -> value."""
    reader = topic.reader(partition, start_offset="earliest")
    out: dict[int, bytes] = {}
    while True:
        page = reader.read(max_records=10_000)
        if not page:
            return out
        out.update((r.offset, r.value) for r in page if r.offset is not None)


class Ledger:
    """What each caller was told, once per value (a second answer is an error)."""

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
        logs = {p: read_log(topic, p) for p in range(partitions)}
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


def test_mixed_send_send_batch_and_send_async_threads_each_get_their_own_offsets(
    client: fencing.Client,
) -> None:
    """Threads on two partitions, some with send(), some send_batch() of 1-4 records, some
    send_async() with a linger: every wake-up comes, each caller its own metadata, the
    log holds each value once at the offset its caller was told."""
    topic = client.topic("t", partitions=2)
    ledger = Ledger()
    with topic.producer(linger_ms=1, batch_size=256) as producer:

        def sender(i: int) -> Callable[[], None]:
            def run() -> None:
                rng = random.Random(i)
                for n in range(40):
                    p = rng.randrange(2)
                    if i % 3 == 0:
                        value = b"s%d-%d" % (i, n)
                        ledger.put(value, p, producer.send(value, partition=p))
                    elif i % 3 == 1:
                        values = [b"b%d-%d-%d" % (i, n, k) for k in range(rng.randint(1, 4))]
                        mds = producer.send_batch(values, partition=p)
                        assert [md.offset for md in mds] == list(
                            range(mds[0].offset, mds[0].offset + len(values))
                        )
                        for value, md in zip(values, mds, strict=True):
                            ledger.put(value, p, md)
                    else:
                        value = b"a%d-%d" % (i, n)
                        future = producer.send_async(value, partition=p)

                        def record(f: Any, v: bytes = value, p: int = p) -> None:
                            ledger.put(v, p, f.result())

                        future.add_done_callback(record)

            return run

        run_threads([sender(i) for i in range(9)])
        producer.flush()
    singles = {v for v in ledger.answers if not v.startswith(b"b")}
    assert singles == {
        b"%s%d-%d" % (b"s" if i % 3 == 0 else b"a", i, n)
        for i in range(9)
        if i % 3 != 1
        for n in range(40)
    }
    batches = {v.rsplit(b"-", 1)[0] for v in ledger.answers if v.startswith(b"b")}
    assert batches == {b"b%d-%d" % (i, n) for i in range(9) if i % 3 == 1 for n in range(40)}
    ledger.check_against(topic, 2)
    assert all(isinstance(a, fencing.RecordMetadata) for _, a in ledger.answers.values())
    report = verify_log(client, "t", attempts=ledger.attempts(), exclusive=False)
    assert report.ok, report.summary()


def test_a_fence_mid_stream_answers_every_queued_caller_once(client: fencing.Client) -> None:
    """Threads stream send() and send_async() until they see ProducerFenced; a producer
    with EXCLUSIVE_WITH_FENCING takes over mid-stream. Every caller and future is
    answered once (metadata if it landed before, ProducerFenced after), none hangs, and
    no fenced record is in the log."""
    topic = client.topic("t", partitions=1)
    ledger = Ledger()
    futures: list[tuple[bytes, concurrent.futures.Future[Any]]] = []
    flock = threading.Lock()
    started = threading.Event()
    producer = topic.producer(linger_ms=2, batch_size=512)
    try:

        def sync_sender(i: int) -> Callable[[], None]:
            def run() -> None:
                for n in range(10_000):
                    value = b"s%d-%d" % (i, n)
                    try:
                        ledger.put(value, 0, producer.send(value, partition=0))
                    except fencing.ProducerFenced as exc:
                        ledger.put(value, 0, exc)
                        return
                    if n == 20:
                        started.set()

            return run

        def async_sender(i: int) -> Callable[[], None]:
            def run() -> None:
                for n in range(100_000):
                    value = b"a%d-%d" % (i, n)
                    try:
                        future = producer.send_async(value, partition=0)
                    except fencing.ProducerFenced:
                        return
                    with flock:
                        futures.append((value, future))
                    if n % 50 == 49:  # (bounded: not an unbounded queue)
                        concurrent.futures.wait([future], timeout=10)
                        assert future.done()

            return run

        def fencer() -> None:
            assert started.wait(10)
            with topic.producer(AccessMode.EXCLUSIVE_WITH_FENCING) as taker:
                taker.send(b"taker", partition=0)

        run_threads(
            [sync_sender(i) for i in range(6)] + [async_sender(i) for i in range(2)] + [fencer]
        )
        _, not_done = concurrent.futures.wait([f for _, f in futures], timeout=10)
        assert not not_done, f"{len(not_done)} send_async() future(s) never answered"
        for value, future in futures:
            exc = future.exception()
            ledger.put(value, 0, exc if exc is not None else future.result())
    finally:
        producer.close()
    fenced = [v for v, (_, a) in ledger.answers.items() if isinstance(a, fencing.ProducerFenced)]
    assert fenced, "the fence was never seen"
    assert all(
        isinstance(a, (fencing.RecordMetadata, fencing.ProducerFenced))
        for _, a in ledger.answers.values()
    )
    ledger.check_against(topic, 1)
    report = verify_log(client, "t", attempts=ledger.attempts(), exclusive=False)
    assert report.ok, report.summary()


def test_lost_replies_under_chained_callers_answer_each_once_and_never_duplicate(
    pclient: fencing.Client, proxy: Proxy, client: fencing.Client
) -> None:
    """Replies of appends are lost (the connection closes) while threads group-commit:
    each caller gets its metadata or OutcomeUnknown, once; nobody hangs; after resolve()
    the log holds every acked value at its offset and no value twice."""
    topic = pclient.topic("t", partitions=1)
    ledger = Ledger()
    with topic.producer(lease_ttl=4.0) as producer:
        producer.send(b"warm", partition=0)

        def sender(i: int) -> Callable[[], None]:
            def run() -> None:
                for n in range(30):
                    value = b"s%d-%d" % (i, n)
                    try:
                        ledger.put(value, 0, producer.send(value, partition=0))
                    except fencing.FencingError as exc:
                        ledger.put(value, 0, exc)

            return run

        with proxy.drop_replies(APPEND, count=4) as lost, proxy.observe(APPEND) as seen:
            run_threads([sender(i) for i in range(6)], timeout=40)
        assert lost.hits == 4 and seen.hits < 6 * 30  # (groups were formed)
        producer.resolve(0)
        producer.send(b"after", partition=0)
    # (a resend after a lost reply is answered from the dedup window: most are acked)
    unknown = [a for _, a in ledger.answers.values() if not isinstance(a, fencing.RecordMetadata)]
    assert all(isinstance(a, fencing.OutcomeUnknown) for a in unknown)
    assert len(ledger.answers) == 6 * 30
    ledger.check_against(client.topic("t"), 1)
    report = verify_log(client, "t", attempts=ledger.attempts(), exclusive=False)
    assert report.ok, report.summary()


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
    ledger = Ledger()
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
    assert len(hits) == 3 and len(interrupted) == 3
    assert len(ledger.answers) == 8 * 60 - 3
    log = read_log(topic, 0)
    assert sorted(log.values()) == sorted(
        [b"s%d-%d" % (i, n) for i in range(8) for n in range(60)] + [b"after"]
    )
    ledger.check_against(topic, 1)


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
    log = read_log(topic, 0)
    landed = {v: o for o, v in log.items()}
    for i, f in enumerate(futures):
        if f.cancelled():
            assert b"v%d" % i not in landed
        else:
            assert landed[b"v%d" % i] == f.result().offset
    assert len(landed) == len(log) == sum(1 for f in futures if not f.cancelled())


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

"""Review of issue 16 (group commit, ``send_async()``), as a hostile user would use it.

Many threads (sync flavour) or tasks (asyncio) send single records and batches to the same
partitions while the holder is fenced, replies are lost, the producer is closed, tasks are
cancelled, threads are interrupted, the process forks, bad input is mixed in, conditional
appends interleave and the store is flushed. After each scenario the whole log is read back
from Redis: G1/G2/G5/G6 hold (``fencing.verify``), every acknowledged record is at its
offset exactly once, nothing lands twice, and every caller got exactly one answer (never a
hang: everything runs under deadlines, and a hang fails with the stacks of every thread).

The four holes it reproduced (an interrupted leader leaving callers hanging, flush() and
close() starved by a streamer, an expected_offset past 2**53 sent, a send() from a future's
callback deadlocking the sender) are fixed; their tests, like the rest, are regressions.
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
from collections.abc import Callable
from typing import Any

import pytest
import redis

import fencing
import fencing._group_commit
from fencing import AccessMode
from fencing._lua_loader import script
from fencing.faults import Proxy
from fencing.verify import Attempt, verify_log

from ..conftest import ServerInfo
from .coalescing import Held, read_all, result_of, script_calls
from .flavors import Api, unwrap

APPEND = script("append").sha1.encode()
SEED = int(os.environ.get("REVIEW16_SEED", "0")) or random.randrange(1 << 30)


# -- helpers -------------------------------------------------------------------------------


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


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"condition not met in time; stacks:\n{stacks()}"
        await asyncio.sleep(0.002)


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"condition not met in time; stacks:\n{stacks()}"
        time.sleep(0.002)


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


def verified(url: str, namespace: str, topic: str, ledger: Ledger, *, exclusive: bool) -> None:
    with fencing.Client.from_url(url, namespace=namespace) as checker:
        report = verify_log(checker, topic, attempts=ledger.attempts, exclusive=exclusive)
    assert report.ok, f"seed {SEED}: {report.summary()}"


async def check_log(topic: Any, ledger: Ledger, partitions: int = 1) -> list[fencing.Record]:
    """Exact offsets: every acked value at its acked offset once; no value twice;
    nothing fenced or refused in the log."""
    records: list[fencing.Record] = []
    for p in range(partitions):
        records += await read_all(topic, p)
    values = [r.value for r in records]
    assert len(values) == len(set(values)), "a value landed twice"
    where = {r.value: (r.partition, r.offset) for r in records}
    for a in ledger.attempts:
        if a.outcome == "acked":
            assert where.get(a.value) == (a.partition, a.offset), a
        elif a.outcome == "fenced":
            assert a.value not in where, a
    return records


# -- (a) fenced mid-stream -----------------------------------------------------------------


async def test_fenced_mid_stream_singles_batches_and_futures(api: Api) -> None:
    """Six senders of single records, two of 3-record batches and a send_async streamer
    share an EXCLUSIVE producer; EXCLUSIVE_WITH_FENCING takes over mid-stream. Every caller
    and future gets one answer; nothing of the old holder follows the usurper's record."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    await topic.open()
    holder = await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=5.0)
    ledger = Ledger()
    sent: list[bytes] = []
    go = asyncio.Event()
    futures: list[tuple[bytes, Any]] = []

    async def single(w: int) -> None:
        for i in range(1000):
            value = b"s%d-%d" % (w, i)
            sent.append(value)
            try:
                md = await holder.send(value)
            except fencing.FencingError as exc:
                if ledger.failed(value, exc) == "fenced":
                    return
            else:
                ledger.acked(value, md)
                if len(ledger.answers) >= 120:
                    go.set()

    async def batcher(w: int) -> None:
        for i in range(1000):
            values = [b"b%d-%d-%d" % (w, i, j) for j in range(3)]
            sent.extend(values)
            try:
                mds = await holder.send_batch(values)
            except fencing.FencingError as exc:
                outcomes = {ledger.failed(v, exc) for v in values}
                if outcomes == {"fenced"}:
                    return
            else:
                assert [md.offset for md in mds] == list(range(mds[0].offset, mds[0].offset + 3))
                for v, md in zip(values, mds, strict=True):
                    ledger.acked(v, md)

    async def streamer() -> None:
        for i in range(1000):
            value = b"f%d" % i
            try:
                futures.append((value, await holder.send_async(value)))
            except fencing.ProducerFenced:
                return  # refused at once once fenced: never queued
            await asyncio.sleep(0)

    async def usurper() -> int:
        await go.wait()
        async with await topic.producer(AccessMode.EXCLUSIVE_WITH_FENCING) as p:
            md = await p.send(b"usurper")
        ledger.acked(b"usurper", md)
        return int(md.offset)

    senders = [single(w) for w in range(6)] + [batcher(w) for w in range(2)]
    *_, usurper_offset = await bounded(asyncio.gather(*senders, streamer(), usurper()))
    for value, future in futures:
        try:
            md = await bounded(result_of(future), 10)
        except fencing.FencingError as exc:
            ledger.failed(value, exc)
        else:
            ledger.acked(value, md)
    await holder.close()
    ledger.check_one_answer_each(sent + [v for v, _ in futures])
    assert all(
        a.offset is not None and a.offset < usurper_offset
        for a in ledger.attempts
        if a.outcome == "acked" and a.value != b"usurper"
    )
    assert {ledger.outcome(v) for v in sent} <= {"acked", "fenced"}
    records = await check_log(topic, ledger)
    assert records[-1].value == b"usurper"
    verified(api.url, api.namespace, "t", ledger, exclusive=True)


async def test_fenced_by_a_new_incarnation_of_its_name(api: Api) -> None:
    """A named producer's group commit while the same name is opened again (a re-leased
    name: a new incarnation, PID generation + 1): the old incarnation's callers are fenced,
    none of their records lands after the new incarnation's first one."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    old = await topic.producer(name="ctl", lease_ttl=5.0)
    ledger = Ledger()
    sent: list[bytes] = []
    go = asyncio.Event()

    async def single(w: int) -> None:
        for i in range(1000):
            value = b"s%d-%d" % (w, i)
            sent.append(value)
            try:
                md = await old.send(value)
            except fencing.FencingError as exc:
                if ledger.failed(value, exc) == "fenced":
                    return
            else:
                ledger.acked(value, md)
                if len(ledger.answers) >= 100:
                    go.set()

    async def successor() -> int:
        await go.wait()
        async with await topic.producer(name="ctl") as new:
            md = await new.send(b"new")
        ledger.acked(b"new", md)
        return int(md.offset)

    *_, new_offset = await bounded(asyncio.gather(*(single(w) for w in range(8)), successor()))
    await old.close()
    ledger.check_one_answer_each(sent)
    assert sum(1 for v in sent if ledger.outcome(v) == "fenced") == 8
    records = await check_log(topic, ledger)
    assert records[-1].value == b"new" and records[-1].offset == new_offset
    verified(api.url, api.namespace, "t", ledger, exclusive=False)


# -- (b) lost replies ----------------------------------------------------------------------


async def test_replies_lost_for_good_then_restored_settle_the_pending_batch(
    api: Api, proxy: Proxy
) -> None:
    """Every append reply is lost (count=None) while eight senders queue: each caller of
    the lost call gets OutcomeUnknown (once); the rule is removed, and the next send
    settles the pending batch (it landed: the request ran, only the reply was lost), at
    the offsets the resolution reports."""
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1)
    ledger = Ledger()
    async with await topic.producer(lease_ttl=1.0) as producer:
        await producer.send(b"first")
        async with Held(producer) as held:
            rule = proxy.drop_replies(APPEND, count=None)
            sends = [asyncio.ensure_future(producer.send(b"v%d" % i)) for i in range(8)]
            await until(lambda: held.queued() == 8)
        done = await bounded(asyncio.gather(*sends, return_exceptions=True))
        assert all(isinstance(d, fencing.OutcomeUnknown) for d in done), done
        for i, d in enumerate(done):
            ledger.failed(b"v%d" % i, d)
        assert unwrap(producer)._standing[0].pending is not None
        rule.remove()
        md = await bounded(producer.send(b"after"))
        ledger.acked(b"after", md)
        partition, resolved = producer.last_resolution
        assert partition == 0 and resolved is not None
        assert [m.offset for m in resolved] == list(range(1, 9))
        assert md.offset == 9
    records = await check_log(topic, ledger)
    assert [r.value for r in records] == [b"first"] + [b"v%d" % i for i in range(8)] + [b"after"]
    verified(api.url, api.namespace, "t", ledger, exclusive=False)


async def test_some_replies_lost_under_send_async_and_threads(api: Api, proxy: Proxy) -> None:
    """send_async futures and send() callers share calls while 5 replies are lost: the
    resends carry the same merged batches; everything lands once at the acked offset."""
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=2)
    ledger = Ledger()
    sent: list[bytes] = []
    futures: list[tuple[bytes, int, Any]] = []
    async with await topic.producer(lease_ttl=3.0) as producer:
        await producer.send(b"first", partition=0)
        rule = proxy.drop_replies(APPEND, count=5)

        async def sender(w: int) -> None:
            for i in range(25):
                value, p = b"w%d-%d" % (w, i), (w + i) % 2
                sent.append(value)
                try:
                    md = await producer.send(value, partition=p)
                except fencing.FencingError as exc:
                    ledger.failed(value, exc, p)
                else:
                    ledger.acked(value, md, p)

        async def streamer() -> None:
            for i in range(100):
                value, p = b"f%d" % i, i % 2
                futures.append((value, p, await producer.send_async(value, partition=p)))
                if i % 10 == 0:
                    await asyncio.sleep(0.001)

        await bounded(asyncio.gather(*(sender(w) for w in range(6)), streamer()))
        await bounded(producer.flush())
        rule.remove()
        for value, p, future in futures:
            try:
                md = await bounded(result_of(future), 10)
            except fencing.FencingError as exc:
                ledger.failed(value, exc, p)
            else:
                ledger.acked(value, md, p)
        for p in (0, 1):  # settle whatever is still pending
            md = await producer.send(b"last%d" % p, partition=p)
            ledger.acked(b"last%d" % p, md, p)
        assert rule.hits == 5
    ledger.check_one_answer_each(sent + [v for v, _, _ in futures])
    assert {o for a in ledger.answers.values() for o in a} <= {"acked", "unknown"}
    await check_log(topic, ledger, partitions=2)
    verified(api.url, api.namespace, "t", ledger, exclusive=False)


# -- (c) close with sends queued -----------------------------------------------------------


async def test_close_with_send_callers_and_futures_queued(api: Api) -> None:
    """close() while send() callers and send_async() futures wait behind a call in flight:
    close flushes, so every one of them lands and is answered with its metadata; sends
    after close are refused without I/O."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    producer = await topic.producer(linger_ms=60_000)
    async with Held(producer) as held:
        sends = [asyncio.ensure_future(producer.send(b"s%d" % i)) for i in range(10)]
        await until(lambda: held.queued() == 10)
        futures = [await producer.send_async(b"f%d" % i) for i in range(10)]
        closing = asyncio.ensure_future(producer.close())
        await asyncio.sleep(0.05)
        assert not closing.done()  # close waits for the call in flight
    await bounded(closing)
    mds = await bounded(asyncio.gather(*sends))
    fmds = [await bounded(result_of(f), 5) for f in futures]
    assert sorted(md.offset for md in mds + fmds) == list(range(20))
    with pytest.raises(fencing.InvalidArgument):
        await producer.send_async(b"late")
    with pytest.raises(fencing.InvalidArgument):
        await producer.send(b"late")
    await producer.flush()  # nothing queued: returns
    records = await read_all(topic)
    assert len(records) == 20
    assert {r.value for r in records} == {b"s%d" % i for i in range(10)} | {
        b"f%d" % i for i in range(10)
    }


async def test_close_while_senders_hammer_nothing_lands_after_close(api: Api) -> None:
    """Eight senders and a send_async streamer keep going while close() runs: every call
    gets exactly one answer (metadata, or the closed producer's refusal), every acked record
    is in the log, and nothing lands after close() returned."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    producer = await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=5.0)
    ledger = Ledger()
    sent: list[bytes] = []
    futures: list[tuple[bytes, Any]] = []
    closed = asyncio.Event()

    async def single(w: int) -> None:
        for i in range(1000):
            value = b"s%d-%d" % (w, i)
            sent.append(value)
            try:
                md = await producer.send(value)
            except fencing.FencingError as exc:
                ledger.failed(value, exc)
                assert isinstance(exc, (fencing.InvalidArgument, fencing.ProducerFenced)), exc
                return
            ledger.acked(value, md)

    async def streamer() -> None:
        for i in range(100_000):
            value = b"f%d" % i
            try:
                futures.append((value, await producer.send_async(value)))
            except fencing.InvalidArgument:
                return
            # Not flat out (test_flush_and_close_are_not_starved_by_a_streamer covers that).
            await asyncio.sleep(0.001)

    async def closer() -> int:
        await until(lambda: len(ledger.answers) >= 100)
        await producer.close()
        closed.set()
        return len(await read_all(topic))

    *_, at_close = await bounded(
        asyncio.gather(*(single(w) for w in range(8)), streamer(), closer())
    )
    for value, future in futures:
        try:
            md = await bounded(result_of(future), 10)
        except fencing.FencingError as exc:
            ledger.failed(value, exc)
        else:
            ledger.acked(value, md)
    ledger.check_one_answer_each(sent + [v for v, _ in futures])
    records = await check_log(topic, ledger)
    assert len(records) == at_close, "records landed after close() returned"
    assert len(ledger.acked_offsets()) == len(records)
    verified(api.url, api.namespace, "t", ledger, exclusive=True)


# -- (d) asyncio cancellation --------------------------------------------------------------


async def test_random_cancellation_of_queued_and_leading_tasks(aio_api: Api) -> None:
    """40 tasks send to 2 partitions while random tasks are cancelled at random await
    points (queued, leading a call, serving others): cancelled sends land once or never,
    every other caller gets one answer, and the next send settles what is pending."""
    rng = random.Random(SEED)
    client = aio_api.client()
    topic = client.topic("t", partitions=2)
    ledger = Ledger()
    sent: list[tuple[bytes, int]] = []
    async with await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=3.0) as producer:

        async def one(value: bytes, p: int) -> None:
            sent.append((value, p))
            try:
                md = await producer.send(value, partition=p)
            except (fencing.FencingError, asyncio.CancelledError) as exc:
                ledger.failed(value, exc, p)
            else:
                ledger.acked(value, md, p)

        for round_ in range(10):
            tasks = [asyncio.ensure_future(one(b"r%d-%d" % (round_, i), i % 2)) for i in range(40)]
            victims = rng.sample(tasks, 12)
            for victim in victims:
                for _ in range(rng.randint(0, 6)):
                    await asyncio.sleep(0)
                victim.cancel()
            results = await bounded(asyncio.gather(*tasks, return_exceptions=True))
            for task, res in zip(tasks, results, strict=True):
                if isinstance(res, asyncio.CancelledError):  # cancelled before it began
                    idx = tasks.index(task)
                    value = b"r%d-%d" % (round_, idx)
                    if value not in ledger.answers:
                        sent.append((value, idx % 2))
                        ledger.failed(value, res, idx % 2)
        for p in (0, 1):
            md = await producer.send(b"last%d" % p, partition=p)
            ledger.acked(b"last%d" % p, md, p)
            assert unwrap(producer)._standing[p].pending is None
    ledger.check_one_answer_each([v for v, _ in sent])
    assert sum(1 for v, _ in sent if ledger.outcome(v) == "unknown") >= 20
    await check_log(topic, ledger, partitions=2)
    verified(aio_api.url, aio_api.namespace, "t", ledger, exclusive=True)


async def test_a_task_cancelled_while_serving_others(aio_api: Api) -> None:
    """Task A's own record is answered, and A goes on to send B's and C's records (queued
    meanwhile); A is cancelled during that call. B and C get one answer each (documented:
    OutcomeUnknown), A gets CancelledError, A's record is in the log once, and the next
    send settles B+C (here: never sent, so never lands)."""
    client = aio_api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer() as producer:
        await producer.send(b"first")
        original = producer._execute
        gates: list[asyncio.Event] = []
        entered: list[int] = []

        async def gated(call: Any, durability: Any = None) -> Any:
            if call.script.name == "append":
                gate = asyncio.Event()
                gates.append(gate)
                entered.append(len(gates))
                await gate.wait()
            return await original(call, durability)

        producer._execute = gated
        a = asyncio.ensure_future(producer.send(b"a"))
        await until(lambda: len(gates) == 1)
        b = asyncio.ensure_future(producer.send(b"b"))
        c = asyncio.ensure_future(producer.send(b"c"))
        await until(lambda: len(producer._standing[0].queue) == 2)
        gates[0].set()  # A's own call goes through
        await until(lambda: len(gates) == 2)  # A now carries B and C
        a.cancel()
        results = await bounded(asyncio.gather(a, b, c, return_exceptions=True))
        producer._execute = original
        assert isinstance(results[0], asyncio.CancelledError)
        assert isinstance(results[1], fencing.OutcomeUnknown), results
        assert isinstance(results[2], fencing.OutcomeUnknown), results
        md = await bounded(producer.send(b"after"))
        assert producer.last_resolution == (0, None)
    assert [r.value for r in await read_all(topic)] == [b"first", b"a", b"after"]
    assert md.offset == 2


async def test_cancelled_send_async_futures_are_never_sent(aio_api: Api) -> None:
    """Futures cancelled before the sender took them are dropped; the others land in
    order at consecutive offsets."""
    client = aio_api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer(linger_ms=60_000) as producer:
        futures = [await producer.send_async(b"f%d" % i) for i in range(30)]
        for i in range(0, 30, 3):
            futures[i].cancel()
        await bounded(producer.flush())
        kept = [f for i, f in enumerate(futures) if i % 3]
        assert [(await f).offset for f in kept] == list(range(20))
    assert [r.value for r in await read_all(topic)] == [b"f%d" % i for i in range(30) if i % 3]


# -- flush() and close() against a streamer ---------------------------------------------------


async def test_flush_and_close_are_not_starved_by_a_streamer(api: Api) -> None:
    """One thread (task) streams send_async() flat out for up to 20 s; another calls
    flush() and then close().

    Expected (Kafka's contract): flush() returns once the records queued *before* it
    began are answered, and close() stops taking records at once, sends what was queued,
    and returns; the streamer then gets InvalidArgument. Got: flush() keeps draining
    `while standing.queue` and returns only when the streamer stops on its own (2 s), and
    close() flushes before it sets `_closed`, so it is starved the same way.

    Fix (fencing/_async/producer.py): flush() drains up to a mark taken when it starts
    (the last entry of each queue, or a per-standing counter), not until the queue is
    empty; close() sets `_closed` (refusing new sends) before its flush."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    producer = await topic.producer(linger_ms=5)
    raw = unwrap(producer)
    stop_at = time.monotonic() + 20.0  # far beyond what flush() and close() may take
    count = 0

    def stream_sync() -> str:
        nonlocal count
        while time.monotonic() < stop_at:
            try:
                raw.send_async(b"x")
            except fencing.InvalidArgument:
                return "closed"
            count += 1
        return "deadline"

    async def stream_async() -> str:
        nonlocal count
        while time.monotonic() < stop_at:
            try:
                await raw.send_async(b"x")
            except fencing.InvalidArgument:
                return "closed"
            count += 1
            if count % 50 == 0:
                await asyncio.sleep(0)
        return "deadline"

    streaming = asyncio.ensure_future(
        stream_async() if api.is_async else asyncio.to_thread(stream_sync)
    )
    await until(lambda: count > 500)
    started = time.monotonic()
    await bounded(producer.flush())
    flushed_in = time.monotonic() - started
    await bounded(producer.close())
    closed_in = time.monotonic() - started
    how = await bounded(streaming)
    # Not a timing threshold: both returned while the streamer was still going (it stops
    # on its own only after 20 s), and close() is what stopped it.
    assert how == "closed" and time.monotonic() < stop_at, (how, flushed_in, closed_in)


# -- (e) KeyboardInterrupt in a thread -------------------------------------------------------


def interrupt(thread: threading.Thread) -> None:
    """Raise KeyboardInterrupt in ``thread`` (as a signal handler would in the main one)."""
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident or 0), ctypes.py_object(KeyboardInterrupt)
    )
    assert n == 1


@pytest.mark.parametrize("window", ["merge_batches", "settle"])
def test_an_interrupt_of_the_leader_outside_the_call_leaves_no_caller_hanging(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch, window: str
) -> None:
    """Five threads queue sends behind a held lock; the one that leads is interrupted with a
    real asynchronous KeyboardInterrupt (PyThreadState_SetAsyncExc) while it runs
    ``coalesce.merge_batches`` (after ``take_group`` popped the group, before the ``try``
    around the script call) or ``coalesce.settle`` (after the call returned).

    Expected: the leader gets KeyboardInterrupt; each of the other four gets exactly one
    answer within seconds (metadata, or OutcomeUnknown settled by the next send, as the
    README promises for "a thread interrupted while it carried others' records"); a
    later send works and the log verifies.

    Got: the four entries were popped off the queue and are never answered. Their callers
    wait, wake every 0.5 s, and one of them takes the lock and spins in ``_lead`` for ever
    (``_send_next`` finds an empty queue, its entry is never done): a hang, a core burnt,
    and the partition's lock never let go (every later send on it hangs too).
    With the ``settle`` window the records landed, ``pending`` is not set and nobody learns.

    Fix (fencing/_async/producer.py ``_send_next``): one ``try`` from ``take_group`` to the
    end of ``settle``; on any BaseException answer every entry of the group that is not
    done (OutcomeUnknown, and set ``pending`` if the request may have left), then re-raise.
    ``_lead`` should also stop when the queue is empty and its entry is not in it."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    producer.send(b"first")
    standing = producer._standing[0]
    taken: list[list[Any]] = []
    entered = threading.Event()
    release = threading.Event()
    original_take = fencing._group_commit.take_group
    original = getattr(fencing._group_commit, window)

    def take(*args: Any) -> Any:
        group = original_take(*args)
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
    wait_for(lambda: len(standing.queue) == 5)
    standing.lock.release()
    producer._wake_head(standing)
    try:
        assert entered.wait(5)
        (leader_thread,) = [t for t in threads if t.ident == _holder_of(standing, threads)]
        leader.append(leader_thread)
        interrupt(leader_thread)
        release.set()
        deadline = time.monotonic() + 2.0  # an answer takes milliseconds; 0.5 s rechecks
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        hung = [i for i, t in enumerate(threads) if t.is_alive()]
        assert not hung, f"callers {hung} hang; stacks:\n{stacks()}"
        assert all(len(a) == 1 for a in answers.values()), answers
        md = producer.send(b"after")
        assert md.offset >= 1
    finally:
        release.set()
        # Unstick what the hole left behind, so no thread spins for the rest of the run.
        for group in taken:
            for entry in group:
                if not entry.done:
                    entry.error = RuntimeError("unstuck by the test")
                    entry.event.set()
        for t in threads:
            t.join(5)
        producer.close()


def _holder_of(standing: Any, threads: list[threading.Thread]) -> int | None:
    """The ident of the thread in ``threads`` whose stack is inside the producer's
    ``_send_next`` (the leader)."""
    frames = sys._current_frames()
    for t in threads:
        frame = frames.get(t.ident or 0)
        while frame is not None:
            if frame.f_code.co_name == "_send_next":
                return t.ident
            frame = frame.f_back
    return None


def test_an_interrupt_of_a_queued_thread_and_of_the_leader_during_its_call(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt (raised for real with PyThreadState_SetAsyncExc) into a thread
    queued behind a call in flight: it gets the interrupt and its record is never sent.
    Then one into the leader while it is inside its script call: it gets the interrupt,
    each caller it carried gets exactly one OutcomeUnknown, and the next send settles the
    batch (here it never left: ``last_resolution == (0, None)``)."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    producer.send(b"first")
    standing = producer._standing[0]
    original = producer._execute
    entered = threading.Event()
    release = threading.Event()

    def spinning(call: Any, durability: Any = None) -> Any:
        if call.script.name == "append" and not entered.is_set():
            entered.set()
            deadline = time.monotonic() + 5
            while not release.is_set() and time.monotonic() < deadline:
                pass  # the asynchronous exception lands here, inside the call
        return original(call, durability)

    monkeypatch.setattr(producer, "_execute", spinning)
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
        wait_for(lambda: len(standing.queue) == 6)
        interrupt(threads[2])  # queued: lands when its wait wakes up (<= 0.5 s)
        threads[2].join(5)
        assert isinstance(answers[2][0], KeyboardInterrupt), answers[2]
        standing.lock.release()
        producer._wake_head(standing)
        assert entered.wait(5)
        leader_ident = _holder_of(standing, threads)
        (leader,) = [t for t in threads if t.ident == leader_ident]
        interrupt(leader)
        release.set()
        for t in threads:
            t.join(5)
        assert not [t for t in threads if t.is_alive()], stacks()
        assert all(len(a) == 1 for a in answers.values()), answers
        others = [i for i, t in enumerate(threads) if t is not leader and i != 2]
        assert isinstance(answers[threads.index(leader)][0], KeyboardInterrupt)
        assert all(isinstance(answers[i][0], fencing.OutcomeUnknown) for i in others), answers
        assert standing.pending is not None
        md = producer.send(b"after")
        assert producer.last_resolution == (0, None)
        assert md.offset == 1
    finally:
        release.set()
        producer.close()
    assert [r.value for r in topic.reader(0).read(max_records=100)] == [b"first", b"after"]


# -- (f) fork ----------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_child_forked_with_send_async_records_queued_sends_none_of_them(
    client: fencing.Client, server: ServerInfo, namespace: str
) -> None:
    """A producer with 50 send_async() records queued (linger_ms=60000) forks. In the
    child the parent's producer refuses send(), send_async() and flush() (ProcessBoundError)
    and close() does nothing; a new producer of the child works. The parent's flush() then
    sends the 50 once: the log holds them exactly once plus the child's own record."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer(linger_ms=60_000)
    producer.send(b"first")
    futures = [producer.send_async(b"q%d" % i) for i in range(50)]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            signal.alarm(20)
            refused = 0
            for attempt in (
                lambda: producer.send(b"c"),
                lambda: producer.send_async(b"c"),
                producer.flush,
            ):
                try:
                    attempt()
                except fencing.ProcessBoundError:
                    refused += 1
            producer.close()  # nothing: the lease is the parent's
            with topic.producer() as mine:
                mine.send(b"child")
            code = 0 if refused == 3 else 2
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 15
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not any(f.done() for f in futures)  # the child sent none of them
    producer.flush()
    offsets = [f.result(timeout=5).offset for f in futures]
    producer.close()
    values = [r.value for r in topic.reader(0).read(max_records=1000)]
    assert sorted(values) == sorted([b"first", b"child"] + [b"q%d" % i for i in range(50)])
    assert [values[o] for o in offsets] == [b"q%d" % i for i in range(50)]
    assert offsets == sorted(offsets) and offsets[-1] - offsets[0] == 49


# -- (g) bad input mixed into good sends -----------------------------------------------------


BAD_SENDS: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"value": None}, fencing.InvalidArgumentType),
    ({"value": 12}, fencing.InvalidArgumentType),
    ({"value": b"x", "key": 1}, fencing.InvalidArgumentType),
    ({"value": b"x", "headers": {1: b"x"}}, fencing.InvalidArgumentType),
    ({"value": b"x", "headers": {"h": 1}}, fencing.InvalidArgumentType),
    ({"value": b"x", "headers": [("h", b"x")]}, fencing.InvalidArgumentType),
    ({"value": b"x" * 101}, fencing.RecordTooLarge),
    ({"value": b"x", "partition": 2}, fencing.InvalidArgument),
    ({"value": b"x", "partition": -1}, fencing.InvalidArgument),
    ({"value": b"x", "partition": True}, fencing.InvalidArgumentType),
    ({"value": b"x", "partition": "0"}, fencing.InvalidArgumentType),
    ({"value": b"x", "expected_offset": 0}, fencing.InvalidArgument),  # no partition
    ({"value": b"x", "partition": 0, "expected_offset": -1}, fencing.InvalidArgument),
    ({"value": b"x", "partition": 0, "expected_offset": 1.0}, fencing.InvalidArgumentType),
    ({"value": b"x", "partition": 0, "expected_offset": True}, fencing.InvalidArgumentType),
]
BAD_BATCHES: list[tuple[Any, dict[str, Any], type[Exception]]] = [
    ([], {"partition": 0}, fencing.InvalidArgument),
    ([b"a", 1], {"partition": 0}, fencing.InvalidArgumentType),
    (b"ab", {"partition": 0}, fencing.InvalidArgumentType),
    ([b"a"] * 6, {"partition": 0}, fencing.RecordTooLarge),  # max_batch_records=5
    ([b"a", b"b"], {}, fencing.InvalidArgument),  # no key, two partitions
    ([b"a"], {"partition": 0, "expected_offset": -3}, fencing.InvalidArgument),
]


async def test_bad_input_is_refused_before_queueing_while_a_call_is_in_flight(api: Api) -> None:
    """With the partition's lock held (a call in flight), good sends queue up and every bad
    send/send_batch/send_async raises its typed error at once: it never queued (a queued
    one would wait for the lock). The good ones all land, at consecutive offsets."""
    client = api.client()
    topic = client.topic("t", partitions=2, max_record_bytes=100, max_batch_records=5)
    async with await topic.producer(AccessMode.EXCLUSIVE) as producer:
        for p in (0, 1):
            await producer.send(b"first", partition=p)
        async with Held(producer) as held:
            good = [asyncio.ensure_future(producer.send(b"g%d" % i, partition=0)) for i in range(5)]
            await until(lambda: held.queued() == 5)
            for kwargs, error in BAD_SENDS:
                with pytest.raises(error):
                    await bounded(producer.send(**kwargs), 2)
                if "expected_offset" not in kwargs:
                    with pytest.raises(error):
                        await bounded(producer.send_async(**kwargs), 2)
                good.append(asyncio.ensure_future(producer.send(b"g%d" % len(good), partition=0)))
                await until(lambda: held.queued() == len(good))
            for records, kwargs, error in BAD_BATCHES:
                with pytest.raises(error):
                    await bounded(producer.send_batch(records, **kwargs), 2)
            assert held.queued() == len(good)
        mds = await bounded(asyncio.gather(*good))
    assert [md.offset for md in mds] == list(range(1, len(good) + 1))
    assert [r.value for r in await read_all(topic, 0)] == [b"first"] + [
        b"g%d" % i for i in range(len(good))
    ]
    assert [r.value for r in await read_all(topic, 1)] == [b"first"]


async def test_an_expected_offset_too_large_is_refused_before_any_io(api: Api) -> None:
    """``send(..., partition=0, expected_offset=2**63)`` (or 2**53 + 1).

    Expected: InvalidArgument raised before the send is queued, no script call (like a
    negative expected_offset). Got: the send is queued, goes to Redis alone, and the script
    answers BAD_ARGUMENT, which reaches the caller as a plain ``FencingError`` ("unexpected
    reply from a redis-fencing script") - not even an InvalidArgument.

    Fix: bound it where it is checked (``check_int("expected_offset", ...)`` in
    ``Producer._send``, fencing/_async/producer.py): at most 2**53 - 1, the largest offset
    the append script compares exactly."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer() as producer:
        await producer.send(b"first")
        for too_large in (2**53 + 1, 2**63):
            before = script_calls(api.url)
            with pytest.raises(fencing.InvalidArgument):
                await producer.send(b"x", partition=0, expected_offset=too_large)
            assert script_calls(api.url) == before


# -- (h) expected_offset interleaved with plain sends ----------------------------------------


async def test_conditional_appends_interleaved_with_coalesced_sends(api: Api) -> None:
    """Six plain senders and two conditional senders (each guessing the next offset from
    the last one it saw) on one partition: a conditional send lands exactly at its
    expected offset or not at all (OffsetMismatch naming another offset); plain sends
    around it keep their acked offsets; the log verifies."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    ledger = Ledger()
    sent: list[bytes] = []
    seen = [0]
    landed = mismatched = 0
    async with await topic.producer(AccessMode.EXCLUSIVE) as producer:

        async def plain(w: int) -> None:
            for i in range(40):
                value = b"p%d-%d" % (w, i)
                sent.append(value)
                md = await producer.send(value)
                ledger.acked(value, md)
                seen[0] = max(seen[0], md.offset + 1)

        async def conditional(w: int) -> None:
            nonlocal landed, mismatched
            for i in range(25):
                value, expected = b"c%d-%d" % (w, i), seen[0]
                sent.append(value)
                try:
                    md = await producer.send(value, partition=0, expected_offset=expected)
                except fencing.OffsetMismatch as exc:
                    assert exc.expected == expected and exc.actual != expected
                    ledger.failed(value, exc)
                    seen[0] = max(seen[0], exc.actual)
                    mismatched += 1
                else:
                    assert md.offset == expected
                    ledger.acked(value, md)
                    seen[0] = max(seen[0], md.offset + 1)
                    landed += 1

        await bounded(
            asyncio.gather(*(plain(w) for w in range(6)), *(conditional(w) for w in range(2)))
        )
        assert landed + mismatched == 50
        # Then for sure: a conditional send at the head, three plain ones behind it, and a
        # conditional one behind those expecting the offset after them: both land.
        base = seen[0]
        async with Held(producer) as held:
            head = asyncio.ensure_future(
                producer.send(b"c-head", partition=0, expected_offset=base)
            )
            await until(lambda: held.queued() == 1)
            middle = []
            for i in range(3):
                middle.append(asyncio.ensure_future(producer.send(b"m%d" % i)))
                await until(lambda n=2 + i: held.queued() == n)
            tail = asyncio.ensure_future(
                producer.send(b"c-tail", partition=0, expected_offset=base + 4)
            )
            await until(lambda: held.queued() == 5)
        mds = await bounded(asyncio.gather(head, *middle, tail))
        assert [md.offset for md in mds] == list(range(base, base + 5))
        for value, md in zip([b"c-head", b"m0", b"m1", b"m2", b"c-tail"], mds, strict=True):
            sent.append(value)
            ledger.acked(value, md)
    ledger.check_one_answer_each(sent)
    records = await check_log(topic, ledger)
    assert len(records) == 240 + landed + 5
    verified(api.url, api.namespace, "t", ledger, exclusive=True)


# -- (i) FLUSHALL mid-stream -----------------------------------------------------------------


async def test_flushall_mid_stream_is_state_lost_for_every_caller(
    api: Api, fresh_server: ServerInfo
) -> None:
    """Eight senders and a send_async streamer; the store is flushed mid-stream. Every
    send answered after that is StateLost (each caller exactly once, each future too), and
    nothing at all is written after the flush (the server stays empty, even after close)."""
    client = api.client(fresh_server.url)
    topic = client.topic("t", partitions=2)
    raw = redis.Redis.from_url(fresh_server.url)
    ledger = Ledger()
    sent: list[bytes] = []
    futures: list[tuple[bytes, Any]] = []
    producer = await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=5.0)

    async def single(w: int) -> None:
        for i in range(1000):
            value = b"s%d-%d" % (w, i)
            sent.append(value)
            try:
                md = await producer.send(value, partition=w % 2)
            except fencing.FencingError as exc:
                assert isinstance(exc, fencing.StateLost), exc
                ledger.answers.setdefault(value, []).append("lost")
                return
            ledger.answers.setdefault(value, []).append("acked")
            assert md.partition == w % 2

    async def streamer() -> None:
        for i in range(10_000):
            value = b"f%d" % i
            try:
                futures.append((value, await producer.send_async(value, partition=i % 2)))
            except fencing.StateLost:
                return
            await asyncio.sleep(0.001)

    async def flusher() -> None:
        await until(lambda: len(ledger.answers) >= 100)
        raw.flushall()

    try:
        await bounded(asyncio.gather(*(single(w) for w in range(8)), streamer(), flusher()))
        lost = 0
        for value, future in futures:
            try:
                await bounded(result_of(future), 10)
            except fencing.StateLost:
                lost += 1
                ledger.answers.setdefault(value, []).append("lost")
            else:
                ledger.answers.setdefault(value, []).append("acked")
        ledger.check_one_answer_each(sent + [v for v, _ in futures])
        assert sum(1 for v in sent if ledger.outcome(v) == "lost") == 8
        with pytest.raises(fencing.StateLost):
            await producer.send(b"after", partition=0)
        await producer.close()
        assert raw.dbsize() == 0, raw.keys()
    finally:
        raw.close()


# -- (j) linger_ms / batch_size edges, flush from several callers ----------------------------


async def test_linger_and_batch_size_edges(api: Api) -> None:
    """linger_ms=60000 with batch_size=1: the first record already fills a batch, so it is
    sent at once. linger_ms=0: at once. linger_ms=60000 with a huge batch_size: nothing is
    sent until flush(). Out-of-range values are refused when the producer is made."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer(linger_ms=60_000, batch_size=1) as eager:
        md = await bounded(result_of(await eager.send_async(b"a")), 5)
        assert md.offset == 0
    async with await topic.producer(linger_ms=0) as plain:
        md = await bounded(result_of(await plain.send_async(b"b")), 5)
        assert md.offset == 1
    async with await topic.producer(linger_ms=60_000, batch_size=10**9) as lazy:
        futures = [await lazy.send_async(b"c%d" % i) for i in range(20)]
        await asyncio.sleep(0.2)
        assert not any(f.done() for f in futures)
        await bounded(lazy.flush())
        assert [(await result_of(f)).offset for f in futures] == list(range(2, 22))
    for bad, error in [
        ({"linger_ms": 60_000.5}, fencing.InvalidArgument),
        ({"linger_ms": float("nan")}, fencing.InvalidArgument),
        ({"linger_ms": float("inf")}, fencing.InvalidArgument),
        ({"linger_ms": True}, fencing.InvalidArgumentType),
        ({"linger_ms": "5"}, fencing.InvalidArgumentType),
        ({"batch_size": 0}, fencing.InvalidArgument),
        ({"batch_size": True}, fencing.InvalidArgumentType),
    ]:
        with pytest.raises(error):
            await topic.producer(**bad)


async def test_flush_from_several_callers_while_others_stream(api: Api) -> None:
    """Four callers flush() at once, repeatedly, while two stream send_async() to two
    partitions: when a flush returns, every future made before it began is done; at the
    end every record is in its partition once, in send order, at its future's offset."""
    client = api.client()
    topic = client.topic("t", partitions=2)
    made: list[tuple[bytes, int, Any]] = []
    async with await topic.producer(linger_ms=60_000, batch_size=10**9) as producer:

        async def streamer(w: int) -> None:
            for i in range(150):
                value = b"w%d-%d" % (w, i)
                made.append((value, i % 2, await producer.send_async(value, partition=i % 2)))
                if i % 10 == 0:
                    await asyncio.sleep(0.001)

        async def flusher() -> None:
            for _ in range(15):
                before = list(made)
                await producer.flush()
                assert all(f.done() for _, _, f in before)
                await asyncio.sleep(0.002)

        await bounded(asyncio.gather(streamer(0), streamer(1), *(flusher() for _ in range(4))))
        await bounded(producer.flush())
        answers = [(v, p, await result_of(f)) for v, p, f in made]
    for p in (0, 1):
        values = [r.value for r in await read_all(topic, p)]
        mine = sorted((md.offset, v) for v, q, md in answers if q == p)
        assert [v for _, v in mine] == values
        assert [o for o, _ in mine] == list(range(len(values)))
        for w in (0, 1):  # one streamer's records keep their order
            assert [v for v in values if v.startswith(b"w%d-" % w)] == [
                b"w%d-%d" % (w, i) for i in range(p, 150, 2)
            ]


# -- a send from a future's callback -----------------------------------------------------------


def test_a_blocking_send_from_a_future_callback_does_not_deadlock_the_sender(
    client: fencing.Client,
) -> None:
    """``fut.add_done_callback(lambda f: producer.send(b"next"))`` on a send_async()
    future (chaining a record after another one is acked, a common pattern).

    Expected: the callback's send() lands (or is refused at once with a clear error), the
    other queued futures are answered, flush() returns. Got: concurrent.futures runs the
    callback inside ``coalesce.settle`` on the sender thread, which holds the partition's
    lock; the callback's send() queues behind that lock and waits for the lock's holder -
    itself - for ever (waking every 0.5 s). Every later send_async() future on the
    producer stays pending and flush()/close() hang. (flush() from a callback deadlocks the
    same way, on the non-reentrant lock.)

    Fix (fencing/_async/producer.py ``_send_next`` / fencing/_group_commit.py ``settle``/``fail``):
    set futures' results after the partition's lock is let go (collect them, settle
    outside), or have a send() made by the lock's holder thread refuse at once."""
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
        wait_for(first.done, 5)
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
        standing = producer._standing[0]
        producer._fail_queue(standing, fencing.InvalidArgument("unstuck by the test"))
        wait_for(lambda: bool(got), 5)
        producer.close()

"""Group commit when the producer is fenced (another takes over, a new incarnation of its
name) or the store loses its state (FLUSHALL) mid-stream: every queued caller, task and
future gets exactly one answer, nothing lands after the fence, and the log read back
verifies (G1/G2/G5/G6)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

import fencing
import fencing._group_commit
import fencing.aio
from fencing import AccessMode
from fencing.verify import Attempt, verify_log

from ..conftest import ServerInfo
from ..support.flavours import Api
from ..support.group_commit import (
    Answers,
    Ledger,
    QueuedGroup,
    bounded,
    check_answers,
    check_ledger,
    result_of,
    run_threads,
)
from ..support.logs import log_of_async, records_of, records_of_async, verified
from ..support.polling import wait_until_async


async def test_many_senders_fenced_mid_stream(api: Api) -> None:
    """Eight senders on one EXCLUSIVE producer; another takes over mid-stream. Every
    caller gets exactly one answer, and G1/G2/G5/G6 hold over the whole log."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    await topic.open()
    holder = await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=5.0)
    attempts: list[Attempt] = []
    answers: dict[bytes, int] = {}
    fenced_at = asyncio.Event()

    async def sender(w: int) -> None:
        for i in range(400):
            value = b"w%d-%d" % (w, i)
            try:
                md = await holder.send(value)
            except fencing.ProducerFenced:
                attempts.append(Attempt(value, 0, "fenced"))
                answers[value] = answers.get(value, 0) + 1
                return
            except fencing.FencingError:
                attempts.append(Attempt(value, 0, "unknown"))
            else:
                attempts.append(Attempt(value, 0, "acked", md.offset, md.epoch))
            answers[value] = answers.get(value, 0) + 1
            if len(answers) == 150:
                fenced_at.set()

    async def usurper() -> int:
        await fenced_at.wait()
        async with await topic.producer(AccessMode.EXCLUSIVE_WITH_FENCING) as p:
            md = await p.send(b"usurper")
            attempts.append(Attempt(b"usurper", 0, "acked", md.offset, md.epoch))
            return int(md.offset)

    results = await asyncio.wait_for(asyncio.gather(*(sender(w) for w in range(8)), usurper()), 60)
    await holder.close()
    assert all(count == 1 for count in answers.values())
    assert sum(1 for a in attempts if a.outcome == "fenced") == 8  # each sender, once
    acked = [a for a in attempts if a.outcome == "acked" and a.value != b"usurper"]
    assert len(acked) >= 150
    assert all(a.offset is not None and a.offset < results[-1] for a in acked)
    verified(api.url, api.namespace, "t", attempts, exclusive=True)
    # Nothing of the old holder after the usurper's record.
    records = await records_of_async(topic)
    assert records[-1].value == b"usurper"


async def test_a_fenced_producer_fails_every_queued_future(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1)
    holder = await topic.producer(AccessMode.EXCLUSIVE, linger_ms=60_000)
    await holder.send(b"before")
    futures = [await holder.send_async(b"q%d" % i) for i in range(40)]
    async with await topic.producer(AccessMode.EXCLUSIVE_WITH_FENCING) as usurper:
        await usurper.send(b"usurper")
        await holder.flush()
    for f in futures:
        with pytest.raises(fencing.ProducerFenced):
            await result_of(f)
    with pytest.raises(fencing.ProducerFenced):
        await holder.send_async(b"after")
    await holder.close()
    assert [r.value for r in await records_of_async(topic)] == [b"before", b"usurper"]


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
    records = await check_ledger(topic, ledger)
    assert records[-1].value == b"usurper"
    verified(api.url, api.namespace, "t", ledger.attempts, exclusive=True)


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
    records = await check_ledger(topic, ledger)
    assert records[-1].value == b"new" and records[-1].offset == new_offset
    verified(api.url, api.namespace, "t", ledger.attempts, exclusive=False)


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
        await wait_until_async(lambda: len(ledger.answers) >= 100)
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


@pytest.mark.usefixtures("no_recheck")
def test_a_fence_mid_stream_answers_every_queued_caller_once(client: fencing.Client) -> None:
    """Threads stream send() and send_async() until they see ProducerFenced; a producer
    with EXCLUSIVE_WITH_FENCING takes over mid-stream. Every caller and future is
    answered once (metadata if it landed before, ProducerFenced after), none hangs, and
    no fenced record is in the log."""
    topic = client.topic("t", partitions=1)
    ledger = Answers()
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


@pytest.mark.anyio
@pytest.mark.usefixtures("no_recheck")
async def test_a_fence_mid_stream_answers_every_task_and_future_once(
    aclient: fencing.aio.Client, client: fencing.Client
) -> None:
    """Tasks stream send() and send_async() (with a linger) until ProducerFenced; a
    producer with EXCLUSIVE_WITH_FENCING takes over mid-stream. Every task returns and
    every future is done (metadata, or ProducerFenced); no fenced record is in the log."""
    topic = aclient.topic("t", partitions=1)
    answers: dict[bytes, Any] = {}
    futures: list[tuple[bytes, asyncio.Future[Any]]] = []
    started = asyncio.Event()
    producer = await topic.producer(linger_ms=2, batch_size=512)
    try:

        async def sync_sender(i: int) -> None:
            for n in range(100_000):
                value = b"s%d-%d" % (i, n)
                try:
                    answers[value] = await producer.send(value, partition=0)
                except fencing.ProducerFenced as exc:
                    answers[value] = exc
                    return
                if n == 20:
                    started.set()

        async def async_sender(i: int) -> None:
            for n in range(100_000):
                value = b"a%d-%d" % (i, n)
                try:
                    future = await producer.send_async(value, partition=0)
                except fencing.ProducerFenced:
                    return
                futures.append((value, future))
                if n % 50 == 49:
                    await asyncio.wait([future])

        async def fencer() -> None:
            await started.wait()
            async with await topic.producer(AccessMode.EXCLUSIVE_WITH_FENCING) as taker:
                await taker.send(b"taker", partition=0)

        async with asyncio.timeout(20):
            await asyncio.gather(
                *[sync_sender(i) for i in range(8)],
                *[async_sender(i) for i in range(2)],
                fencer(),
            )
            await asyncio.wait([f for _, f in futures])
        for value, future in futures:
            exc = future.exception()
            answers[value] = exc if exc is not None else future.result()
    finally:
        await producer.close()
    assert any(isinstance(a, fencing.ProducerFenced) for a in answers.values())
    assert all(
        isinstance(a, (fencing.RecordMetadata, fencing.ProducerFenced)) for a in answers.values()
    )
    log = await log_of_async(topic, 0)
    check_answers(log, answers, may_land={b"taker"})
    attempts = [
        Attempt(v, 0, "acked", a.offset, a.epoch)
        if isinstance(a, fencing.RecordMetadata)
        else Attempt(v, 0, "fenced")
        for v, a in answers.items()
    ]
    report = verify_log(client, "t", attempts=attempts, exclusive=False)
    assert report.ok, report.summary()


@pytest.mark.usefixtures("restore_sigint")
def test_wait_returns_for_a_cancelled_send_async_future_once_the_producer_is_fenced(
    client: fencing.Client,
) -> None:
    """A user queues send_async() records, cancels one of them, and the producer is then fenced
    mid-stream (another producer takes over with EXCLUSIVE_WITH_FENCING); the user waits for
    all of them with concurrent.futures.wait().

    Wait() returns with every future done (the cancelled one cancelled, the others failed with
    ProducerFenced)."""
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


def test_flushall_mid_stream_fails_every_queued_record_and_writes_nothing(
    own: tuple[fencing.Client, Any],
) -> None:
    """A producer streams with send_async() and send(); the server is FLUSHALLed mid-stream (a
    failover to an empty replica). Records queued after it fail with StateLost (the append's
    fast path declines, the general path answers), none is answered with metadata, and
    nothing is written back into the flushed server."""
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


def test_callers_carried_by_an_interrupted_call_are_never_told_fenced_when_their_records_landed(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's call lands; meanwhile a successor takes the partition
    (EXCLUSIVE_WITH_FENCING) and the lease keeper's renewal finds this producer fenced;
    then the leader is interrupted (Ctrl-C) as it reads the reply. The callers it carried
    wrote before the successor: they are told OutcomeUnknown (their batch cannot be
    resolved by a fenced producer), never ProducerFenced, which says "not written"."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer(access_mode=AccessMode.EXCLUSIVE_WITH_FENCING)
    producer.send(b"warm", partition=0)
    calls = producer._calls  # type: ignore[attr-defined]
    original = calls.execute
    successors: list[fencing.Producer] = []

    def execute(call: Any, durability: Any = None) -> Any:
        result = original(call, durability)
        if call.script.name == "append" and not successors and len(call.args) > 7:
            successors.append(topic.producer(access_mode=AccessMode.EXCLUSIVE_WITH_FENCING))
            producer._renew_all()  # type: ignore[attr-defined]  # the keeper's turn: fenced
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(calls, "execute", execute)
    group = QueuedGroup(producer, [b"a", b"b", b"c"])
    group.let_go()
    group.join()
    assert successors and producer.fenced
    successors[0].send(b"successor", partition=0)
    successors[0].close()
    producer.close()
    assert [r.value for r in records_of(topic)] == [b"warm", b"a", b"b", b"c", b"successor"]
    assert len(group.told(KeyboardInterrupt)) == 1, group.answers
    assert len(group.told(fencing.OutcomeUnknown)) == 2, group.answers
    assert group.told(fencing.ProducerFenced) == []

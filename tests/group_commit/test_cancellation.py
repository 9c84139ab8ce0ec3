"""Cancellation under group commit (asyncio): a task cancelled while queued, while leading a
call, or while serving others, and ``send_async()`` futures cancelled before they were
sent. A cancelled send lands once or never; every other caller gets one answer and the
lead passes on at once."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

import fencing
import fencing._group_commit
import fencing.aio
from fencing import AccessMode
from fencing.faults import Proxy
from fencing.verify import Attempt, verify_log

from ..support.flavours import Api, unwrap
from ..support.group_commit import (
    SEED,
    Held,
    Ledger,
    bounded,
    check_answers,
    check_ledger,
)
from ..support.logs import log_of_async, records_of_async, verified
from ..support.polling import wait_until_async


async def test_a_cancelled_queued_send_is_never_sent(aio_api: Api) -> None:
    client = aio_api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer() as producer:
        async with Held(producer) as held:
            sends = [asyncio.ensure_future(producer.send(b"v%d" % i)) for i in range(6)]
            await wait_until_async(lambda: held.queued() == 6)
            sends[1].cancel()
            sends[4].cancel()
            await asyncio.sleep(0)
        done = await asyncio.gather(*sends, return_exceptions=True)
        futures = [await producer.send_async(b"f%d" % i) for i in range(3)]
        futures[1].cancel()
        await producer.flush()
    assert isinstance(done[1], asyncio.CancelledError)
    assert isinstance(done[4], asyncio.CancelledError)
    assert [md.offset for i, md in enumerate(done) if i not in (1, 4)] == [0, 1, 2, 3]
    assert [r.value for r in await records_of_async(topic)] == [
        b"v0",
        b"v2",
        b"v3",
        b"v5",
        b"f0",
        b"f2",
    ]


async def test_random_cancellation_of_queued_and_leading_tasks(aio_api: Api) -> None:
    """40 tasks a round send to 2 partitions while random tasks are cancelled at random await
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

        def unknown() -> int:
            return sum(1 for v, _ in sent if ledger.outcome(v) == "unknown")

        # Rounds until 20 cancellations landed inside a send (the ones worth testing; how
        # many a round gets depends on the machine's load), at least 10, at most 60.
        round_ = 0
        while round_ < 10 or (unknown() < 20 and round_ < 60):
            round_ += 1
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
            assert unwrap(producer)._queues[p].standing.pending is None
    ledger.check_one_answer_each([v for v, _ in sent])
    assert unknown() >= 20
    await check_ledger(topic, ledger, partitions=2)
    verified(aio_api.url, aio_api.namespace, "t", ledger.attempts, note=f"seed {SEED}")


async def test_a_task_cancelled_while_its_call_is_in_flight_stops_waiting_and_the_call_completes(
    aio_api: Api,
) -> None:
    """Task A's record is in a call in flight (held at a gate, as a slow Redis would) and B
    and C queue behind it; A is cancelled. A returns CancelledError at once, while its call
    is still out; the call completes for everyone: A's record lands once and nothing is
    left pending (its fate is known), and B and C each get their own offsets in the next
    call."""
    client = aio_api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer() as producer:
        await producer.send(b"first")
        original = producer._calls.execute
        gates: list[asyncio.Event] = []

        async def gated(call: Any, durability: Any = None) -> Any:
            if call.script.name == "append":
                gate = asyncio.Event()
                gates.append(gate)
                await gate.wait()
            return await original(call, durability)

        producer._calls.execute = gated
        a = asyncio.ensure_future(producer.send(b"a"))
        await wait_until_async(lambda: len(gates) == 1)
        b = asyncio.ensure_future(producer.send(b"b"))
        c = asyncio.ensure_future(producer.send(b"c"))
        await wait_until_async(lambda: len(producer._queues[0].queue) == 2)
        a.cancel()
        await asyncio.sleep(0)  # one turn of the loop
        assert a.cancelled()  # it returned at once, while its call is still out
        assert not gates[0].is_set()
        gates[0].set()
        await wait_until_async(lambda: len(gates) == 2)  # B and C go in the next call
        gates[1].set()
        mds = await bounded(asyncio.gather(b, c))
        producer._calls.execute = original
        assert [(md.offset, md.epoch) for md in mds] == [(2, 0), (3, 0)]
        assert unwrap(producer)._queues[0].standing.pending is None
        assert producer.last_resolution is None
        md = await bounded(producer.send(b"after"))
    assert [r.value for r in await records_of_async(topic)] == [
        b"first",
        b"a",
        b"b",
        b"c",
        b"after",
    ]
    assert md.offset == 4


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
    assert [r.value for r in await records_of_async(topic)] == [
        b"f%d" % i for i in range(30) if i % 3
    ]


@pytest.mark.anyio
@pytest.mark.usefixtures("no_recheck")
async def test_tasks_cancelled_while_queued_or_leading_never_strand_the_others(
    aclient: fencing.aio.Client, client: fencing.Client
) -> None:
    """40 tasks send one record after the other; another task cancels random senders
    (queued on the Signal, woken to lead, or leading a call in flight). Every other task
    finishes all its sends, each value lands at most once, acked ones at their offsets."""
    topic = aclient.topic("t", partitions=1)
    answers: dict[bytes, Any] = {}
    cancelled: set[bytes] = set()
    current: dict[int, bytes] = {}
    async with await topic.producer() as producer:

        async def sender(i: int) -> None:
            for n in range(25):
                value = current[i] = b"s%d-%d" % (i, n)
                try:
                    answers[value] = await producer.send(value, partition=0)
                except asyncio.CancelledError:
                    cancelled.add(value)
                    raise
                except fencing.OutcomeUnknown as exc:  # a cancelled leader's call
                    answers[value] = exc

        senders = [asyncio.ensure_future(sender(i)) for i in range(40)]
        rng = random.Random(16)
        for victim in rng.sample(range(40), 12):
            for _ in range(rng.randrange(1, 30)):
                await asyncio.sleep(0)
            senders[victim].cancel()
        async with asyncio.timeout(20):
            await asyncio.gather(*senders, return_exceptions=True)
        assert await producer.send(b"after", partition=0)
        finished = [t for t in senders if not t.cancelled()]
        assert all(t.exception() is None for t in finished)
        assert len(cancelled) == 40 - len(finished)
    log = await log_of_async(topic, 0)
    unknown = {v for v, a in answers.items() if not isinstance(a, fencing.RecordMetadata)}
    check_answers(log, answers, may_land=cancelled | unknown | {b"after"})
    attempts = [
        Attempt(v, 0, "acked", a.offset, a.epoch)
        for v, a in answers.items()
        if isinstance(a, fencing.RecordMetadata)
    ] + [Attempt(v, 0, "unknown") for v in cancelled | unknown]
    report = verify_log(client, "t", attempts=attempts, exclusive=False)
    assert report.ok, report.summary()


@pytest.mark.anyio
@pytest.mark.usefixtures("no_recheck")
async def test_a_drive_cancelled_before_it_ran_is_replaced_at_once(
    aclient: fencing.aio.Client,
) -> None:
    """Two tasks queue behind a call in flight; the task that would send their call is
    cancelled before its first step. The callers start another at once (not after their
    re-check, which this test turns off), and each is answered at its offset."""
    topic = aclient.topic("t", partitions=1)
    async with topic.producer() as producer:
        await producer.send(b"warm", partition=0)
        standing = producer._queues[0]
        await standing.lock.acquire()  # a call in flight
        first = asyncio.ensure_future(producer.send(b"first", partition=0))
        second = asyncio.ensure_future(producer.send(b"second", partition=0))
        while len(standing.queue) < 2:
            await asyncio.sleep(0)
        drive = standing._drive_task
        assert drive is not None
        drive.cancel()
        began = time.monotonic()
        standing.lock.release()
        standing.wake_head()
        async with asyncio.timeout(5):
            mds = await asyncio.gather(first, second)
        assert time.monotonic() - began < 1.0
        assert drive.cancelled()
        assert [md.offset for md in mds] == [1, 2]
        log = await log_of_async(topic, 0)
        assert list(log.values()) == [b"warm", b"first", b"second"]


async def test_a_drive_cancelled_before_it_ran_never_keeps_the_partition(aio_api: Api) -> None:
    """A service's shutdown cancels every task (as ``asyncio.run`` does at its end): here a
    send that had just started the partition's drive, and the drive itself before its
    first step. The send is cancelled, close() returns, the partition is free, and the
    cancelled record was never sent."""
    client = aio_api.client()
    topic = client.topic("t", partitions=1)
    producer = await topic.producer()
    await producer.send(b"warm", partition=0)
    queue = unwrap(producer)._queues[0]
    send = asyncio.ensure_future(producer.send(b"v", partition=0))
    await asyncio.sleep(0)  # the send runs: it starts the drive
    drive = queue._drive_task
    assert drive is not None
    send.cancel()
    drive.cancel()
    await asyncio.gather(send, return_exceptions=True)
    await bounded(producer.close(), 5)
    assert not queue.lock.locked()
    assert [r.value for r in await records_of_async(topic)] == [b"warm"]


async def test_a_cancelled_flush_never_turns_the_callers_it_carried_into_refusals(
    server: Any, namespace: str, proxy: Proxy
) -> None:
    """flush() sends in its caller's own task. Two send() callers queue behind a
    send_async() record; flush() takes all three in one call, which lands; the flush is
    cancelled (a timeout around it) as the reply comes back, and the network goes away, so
    the next call cannot resolve the batch. The send() callers are told OutcomeUnknown,
    never a refusal (their records are in the log); the next send settles the batch."""
    client = fencing.aio.Client.from_url(proxy.url_for(server.url), namespace=namespace)
    topic = client.topic("t", partitions=1)
    producer = await topic.producer(linger_ms=60_000, batch_size=10**9)
    await producer.send(b"warm", partition=0)
    queue = producer._queues[0]
    calls = producer._calls
    original = calls.execute
    flushing: list[asyncio.Task[Any]] = []

    async def execute(call: Any, durability: Any = None) -> Any:
        result = await original(call, durability)
        if call.script.name == "append" and len(call.args) > 7 and flushing:
            flushing[0].cancel()
            proxy.refuse_connections(None)
            proxy.sever()
            calls.execute = original
            await asyncio.sleep(0)  # the cancellation lands here, the batch in the log
        return result

    calls.execute = execute
    await queue.lock.acquire()
    future = await producer.send_async(b"f", partition=0)
    flushing.append(asyncio.ensure_future(producer.flush()))
    await asyncio.sleep(0)  # the flush waits for the partition first: it sends the call
    sends = {v: asyncio.ensure_future(producer.send(v, partition=0)) for v in (b"b", b"c")}
    await wait_until_async(lambda: len(queue.queue) == 3)
    queue.lock.release()
    queue.wake_head()
    await asyncio.gather(flushing[0], return_exceptions=True)
    told = await bounded(asyncio.gather(*sends.values(), return_exceptions=True), 60)
    assert all(isinstance(a, fencing.OutcomeUnknown) for a in told), told
    (future_told,) = await asyncio.gather(future, return_exceptions=True)
    assert isinstance(future_told, fencing.OutcomeUnknown), future_told
    await settled_once_back(proxy, producer, client, server.url, namespace, [b"f", b"b", b"c"])


async def test_a_drive_cancelled_in_its_call_never_turns_the_callers_it_carried_into_refusals(
    server: Any, namespace: str, proxy: Proxy
) -> None:
    """The task sending a partition's queue is cancelled (a shutdown cancelling every
    task) as the reply of a call carrying three callers comes back, and the network goes
    away, so the next call cannot resolve the batch. Each caller is told OutcomeUnknown,
    never a refusal (their records are in the log); the next send settles the batch."""
    client = fencing.aio.Client.from_url(proxy.url_for(server.url), namespace=namespace)
    topic = client.topic("t", partitions=1)
    producer = await topic.producer()
    await producer.send(b"warm", partition=0)
    queue = producer._queues[0]
    calls = producer._calls
    original = calls.execute

    async def execute(call: Any, durability: Any = None) -> Any:
        result = await original(call, durability)
        if call.script.name == "append" and len(call.args) > 7:
            calls.execute = original
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            proxy.refuse_connections(None)
            proxy.sever()
            await asyncio.sleep(0)  # the cancellation lands here, the batch in the log
        return result

    calls.execute = execute
    await queue.lock.acquire()
    sends = [asyncio.ensure_future(producer.send(v, partition=0)) for v in (b"a", b"b", b"c")]
    await wait_until_async(lambda: len(queue.queue) == 3)
    queue.lock.release()
    queue.wake_head()
    told = await bounded(asyncio.gather(*sends, return_exceptions=True), 60)
    assert all(isinstance(a, fencing.OutcomeUnknown) for a in told), told
    await settled_once_back(proxy, producer, client, server.url, namespace, [b"a", b"b", b"c"])


async def settled_once_back(
    proxy: Proxy, producer: Any, client: Any, url: str, namespace: str, carried: list[bytes]
) -> None:
    """The network back, the next send settles the batch that carried ``carried`` (it
    landed, at offsets 1 to 3), and the log holds each record once."""
    proxy.clear()
    await producer.send(b"after", partition=0)
    assert [md.offset for md in (producer.last_resolution or (0, []))[1] or []] == [1, 2, 3]
    await producer.close()
    await client.close()
    reader = fencing.aio.Client.from_url(url, namespace=namespace)
    values = [r.value for r in await records_of_async(reader.topic("t"))]
    assert values == [b"warm", *carried, b"after"]
    await reader.close()

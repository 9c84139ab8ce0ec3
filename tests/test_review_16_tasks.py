"""Review of issue 16 (group commit under asyncio): regression tests of what held.

Queued sends wait on the new ``Signal`` (a flag and a bare future, timeouts kept by one
ticker per loop). Attacked with real tasks: cancellations racing the wake-ups, a fence
mid-stream, ticker timeouts while waits come and go. Queued tasks' own re-check is a minute
here, so a lost wake-up shows as a task that does not finish by its deadline.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import fencing
import fencing.aio
from fencing import AccessMode
from fencing._async import producer as async_producer
from fencing._runtime.tasks import primitives as tasks
from fencing.verify import Attempt, verify_log

from .conftest import ServerInfo

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def no_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued send never looks again on its own within a test: only wake-ups count."""
    monkeypatch.setattr(async_producer, "_RECHECK_SECONDS", 60.0)


@pytest.fixture
async def aclient(server: ServerInfo, namespace: str) -> AsyncIterator[fencing.aio.Client]:
    c = fencing.aio.Client.from_url(server.url, namespace=namespace)
    yield c
    await c.close()


async def read_log(topic: Any, partition: int) -> dict[int, bytes]:
    reader = await topic.reader(partition, start_offset="earliest")
    out: dict[int, bytes] = {}
    while True:
        page = list(await reader.read(max_records=10_000))
        if not page:
            return out
        out.update((r.offset, r.value) for r in page)


def check_log(log: dict[int, bytes], answers: dict[bytes, Any], *, may_land: set[bytes]) -> None:
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
    log = await read_log(topic, 0)
    unknown = {v for v, a in answers.items() if not isinstance(a, fencing.RecordMetadata)}
    check_log(log, answers, may_land=cancelled | unknown | {b"after"})
    attempts = [
        Attempt(v, 0, "acked", a.offset, a.epoch)
        for v, a in answers.items()
        if isinstance(a, fencing.RecordMetadata)
    ] + [Attempt(v, 0, "unknown") for v in cancelled | unknown]
    report = verify_log(client, "t", attempts=attempts, exclusive=False)
    assert report.ok, report.summary()


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
    log = await read_log(topic, 0)
    check_log(log, answers, may_land={b"taker"})
    attempts = [
        Attempt(v, 0, "acked", a.offset, a.epoch)
        if isinstance(a, fencing.RecordMetadata)
        else Attempt(v, 0, "fenced")
        for v, a in answers.items()
    ]
    report = verify_log(client, "t", attempts=attempts, exclusive=False)
    assert report.ok, report.summary()


async def test_ticker_timeouts_end_while_other_waits_come_and_go() -> None:
    """Waits on many signals with timeouts, some set, some cancelled, some timing out,
    started at different times: each timed-out wait returns False no later than its
    timeout plus two ticks, each set one returns True, a cancel racing a set leaves the set
    for the next wait, and the ticker holds no wait once all are over."""
    loop = asyncio.get_running_loop()
    bound = 2 * tasks._TICK + 0.05
    results: list[tuple[str, float, float, bool]] = []

    async def timing_out(delay: float, timeout: float) -> None:
        await asyncio.sleep(delay)
        began = loop.time()
        got = await tasks.Signal().wait(timeout)
        results.append(("timeout", timeout, loop.time() - began, got))

    async def set_later(delay: float) -> None:
        signal = tasks.Signal()
        loop.call_later(delay, signal.set)
        began = loop.time()
        got = await signal.wait(10)
        results.append(("set", delay, loop.time() - began, got))

    async def cancel_racing_set() -> None:
        signal = tasks.Signal()
        waiting = asyncio.ensure_future(signal.wait(10))
        await asyncio.sleep(0.01)
        signal.set()
        waiting.cancel()
        try:
            await waiting
        except asyncio.CancelledError:
            assert await signal.wait(0.001) is True  # the set was kept
        results.append(("race", 0.0, 0.0, True))

    jobs = [timing_out(0.01 * i, 0.02 + 0.03 * (i % 4)) for i in range(20)]
    jobs += [set_later(0.005 * i) for i in range(20)]
    jobs += [cancel_racing_set() for _ in range(5)]
    async with asyncio.timeout(10):
        await asyncio.gather(*jobs)
    for kind, timeout, took, got in results:
        if kind == "timeout":
            assert not got and timeout - 0.005 <= took <= timeout + bound, (timeout, took)
        else:
            assert got
    ticker = getattr(loop, tasks._TICKER, None)
    assert ticker is None or not ticker.waiting
    await asyncio.sleep(2 * tasks._TICK)
    assert ticker is None or not ticker._armed  # (no tick left armed for nothing)


async def test_a_cancelled_task_whose_wake_up_came_passes_the_lead_on(
    aclient: fencing.aio.Client,
) -> None:
    """The first queued task is woken to send the queue (the lock was let go) and is
    cancelled before it runs: the task behind it is woken in its place at once (not after
    its re-check), and sends both its own and nobody else's record."""
    topic = aclient.topic("t", partitions=1)
    async with await topic.producer() as producer:
        await producer.send(b"warm", partition=0)
        standing = producer._standing[0]
        await standing.lock.acquire()  # a call in flight
        first = asyncio.ensure_future(producer.send(b"first", partition=0))
        second = asyncio.ensure_future(producer.send(b"second", partition=0))
        while len(standing.queue) < 2:
            await asyncio.sleep(0)
        began = time.monotonic()
        standing.lock.release()
        producer._wake_head(standing)  # the holder lets go: the first is woken ...
        first.cancel()  # ... and cancelled before it runs
        async with asyncio.timeout(5):
            md = await second
        assert time.monotonic() - began < 1.0
        assert first.cancelled()
        assert md.offset == 1
        log = await read_log(topic, 0)
        assert list(log.values()) == [b"warm", b"second"]

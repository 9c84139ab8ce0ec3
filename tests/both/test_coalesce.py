"""Group commit (issue 16), written once for threads and tasks: sends queued on a partition
while a call is in flight go together in the next call, and every caller still gets its own
answer. The guarantees are checked over the whole log read back from Redis.

Where a test needs sends to be queued for sure (not by a lucky interleaving), it holds the
partition's lock, as a call in flight does, until the queue holds them all.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import fencing
from fencing import AccessMode
from fencing._lua_loader import script
from fencing.faults import Proxy
from fencing.verify import Attempt, verify_log

from .coalescing import Held, read_all, result_of, script_calls
from .flavors import Api

APPEND = script("append").sha1.encode()


async def until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.002)


def verified(api: Api, topic: str, attempts: list[Attempt], *, exclusive: bool) -> None:
    with fencing.Client.from_url(api.url, namespace=api.namespace) as checker:
        report = verify_log(checker, topic, attempts=attempts, exclusive=exclusive)
    assert report.ok, report.summary()


async def test_sends_queued_behind_a_call_in_flight_go_in_one_call(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer() as producer:
        await producer.send(b"first")
        before = script_calls(api.url)
        async with Held(producer) as held:
            sends = [asyncio.ensure_future(producer.send(b"v%d" % i)) for i in range(12)]
            await until(lambda: held.queued() == 12)
        metadata = await asyncio.gather(*sends)
        calls = script_calls(api.url) - before
    # One call carried the twelve sends, and each caller got its own record's offset.
    assert calls == 1
    assert sorted(md.offset for md in metadata) == list(range(1, 13))
    records = await read_all(topic)
    by_offset = {r.offset: r.value for r in records}
    for i, md in enumerate(metadata):
        assert by_offset[md.offset] == b"v%d" % i
    assert len(records) == 13


async def test_a_merged_call_is_split_by_the_topic_limits_never_refused(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1, max_batch_records=5, max_batch_bytes=1000)
    async with await topic.producer() as producer:
        before = script_calls(api.url)
        async with Held(producer) as held:
            small = [asyncio.ensure_future(producer.send(b"s%d" % i)) for i in range(12)]
            await until(lambda: held.queued() == 12)
            big = [asyncio.ensure_future(producer.send(b"b" * 400)) for _ in range(3)]
            await until(lambda: held.queued() == 15)
        answers = await asyncio.gather(*small, *big)
        calls = script_calls(api.url) - before
    # 12 small records: 5 + 5, then 2 more with two 400-byte ones (4 records, 806 bytes),
    # then the last 400-byte one alone: 4 calls, every caller answered, none refused.
    assert calls == 4
    assert sorted(md.offset for md in answers[:12]) == list(range(12))
    assert sorted(md.offset for md in answers[12:]) == [12, 13, 14]


async def test_a_send_with_expected_offset_is_never_merged(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer(AccessMode.EXCLUSIVE) as producer:
        before = script_calls(api.url)
        async with Held(producer) as held:
            a = asyncio.ensure_future(producer.send(b"a"))
            await until(lambda: held.queued() == 1)
            b = asyncio.ensure_future(producer.send(b"b", partition=0, expected_offset=1))
            await until(lambda: held.queued() == 2)
            c = asyncio.ensure_future(producer.send(b"c"))
            await until(lambda: held.queued() == 3)
            d = asyncio.ensure_future(producer.send(b"d", partition=0, expected_offset=7))
            await until(lambda: held.queued() == 4)
        mda, mdb, mdc = await asyncio.gather(a, b, c)
        with pytest.raises(fencing.OffsetMismatch) as mismatch:
            await d
        calls = script_calls(api.url) - before
    assert (mda.offset, mdb.offset, mdc.offset) == (0, 1, 2)
    assert (mismatch.value.expected, mismatch.value.actual) == (7, 3)
    assert calls == 4  # a | b alone | c | d alone
    assert [r.value for r in await read_all(topic)] == [b"a", b"b", b"c"]


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
    verified(api, "t", attempts, exclusive=True)
    # Nothing of the old holder after the usurper's record.
    records = await read_all(topic)
    assert records[-1].value == b"usurper"


async def test_lost_replies_of_merged_calls_are_resent_and_land_once(
    api: Api, proxy: Proxy
) -> None:
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1)
    attempts: list[Attempt] = []
    async with await topic.producer(lease_ttl=3.0) as producer:
        await producer.send(b"first")
        rule = proxy.drop_replies(APPEND, count=4)

        async def sender(w: int) -> None:
            for i in range(30):
                value = b"w%d-%d" % (w, i)
                try:
                    md = await producer.send(value)
                except fencing.OutcomeUnknown:
                    attempts.append(Attempt(value, 0, "unknown"))
                else:
                    attempts.append(Attempt(value, 0, "acked", md.offset, md.epoch))

        await asyncio.wait_for(asyncio.gather(*(sender(w) for w in range(8))), 60)
        assert rule.hits == 4
    assert len(attempts) == 240
    acked = {a.value: a.offset for a in attempts if a.outcome == "acked"}
    assert len(acked) >= 200
    records = await read_all(topic)
    values = [r.value for r in records]
    assert len(values) == len(set(values))  # nothing landed twice
    assert {r.value: r.offset for r in records if r.value in acked} == acked
    verified(api, "t", attempts, exclusive=False)


async def test_send_async_and_flush(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=2)
    async with await topic.producer() as producer:
        futures = [await producer.send_async(b"v%d" % i, partition=i % 2) for i in range(500)]
        await producer.flush()
        assert all(f.done() for f in futures)
        metadata = [await result_of(f) for f in futures]
    for p in (0, 1):
        values = [r.value for r in await read_all(topic, p)]
        assert values == [b"v%d" % i for i in range(p, 500, 2)]
        assert [md.offset for md in metadata[p::2]] == list(range(250))


async def test_close_sends_what_send_async_queued(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1)
    producer = await topic.producer(linger_ms=60_000)  # the sender would wait a minute
    futures = [await producer.send_async(b"v%d" % i) for i in range(300)]
    await producer.close()
    offsets = [(await result_of(f)).offset for f in futures]
    assert offsets == list(range(300))
    assert [r.value for r in await read_all(topic)] == [b"v%d" % i for i in range(300)]


async def test_linger_sends_on_its_own_after_linger_ms(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer(linger_ms=20) as producer:
        futures = [await producer.send_async(b"v%d" % i) for i in range(50)]
        for f in futures:  # no flush(): the sender sends after 20 ms
            await asyncio.wait_for(result_of(f), 10)
    assert [r.value for r in await read_all(topic)] == [b"v%d" % i for i in range(50)]


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
    assert [r.value for r in await read_all(topic)] == [b"before", b"usurper"]


async def test_bad_input_to_send_async_is_refused_before_queueing(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=2, max_record_bytes=100)
    async with await topic.producer() as producer:
        with pytest.raises(fencing.InvalidArgumentType):
            await producer.send_async(123)  # type: ignore[arg-type]
        with pytest.raises(fencing.RecordTooLarge):
            await producer.send_async(b"x" * 101)
        with pytest.raises(fencing.InvalidArgument):
            await producer.send_async(b"x", partition=2)
        with pytest.raises(fencing.InvalidArgumentType):
            await producer.send_async(b"x", partition="0")  # type: ignore[arg-type]
        await producer.flush()
    for p in (0, 1):
        assert await read_all(topic, p) == []
    with pytest.raises(fencing.InvalidArgument):
        await topic.producer(linger_ms=-1)
    with pytest.raises(fencing.InvalidArgumentType):
        await topic.producer(batch_size=1.5)  # type: ignore[arg-type]


async def test_a_cancelled_queued_send_is_never_sent(aio_api: Api) -> None:
    client = aio_api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer() as producer:
        async with Held(producer) as held:
            sends = [asyncio.ensure_future(producer.send(b"v%d" % i)) for i in range(6)]
            await until(lambda: held.queued() == 6)
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
    assert [r.value for r in await read_all(topic)] == [b"v0", b"v2", b"v3", b"v5", b"f0", b"f2"]

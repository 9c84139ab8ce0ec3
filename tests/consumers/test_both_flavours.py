"""Readers and consumers, written once, run for sync and asyncio.

Also run on a cluster, as an ACL user and over TLS (``tests/cluster``, ``tests/secure``).
"""

from __future__ import annotations

import asyncio

import pytest

import fencing

from ..support.flavours import Api


async def test_reader_seeks_blocks_and_tails(api: Api) -> None:
    topic = api.client().topic("t", partitions=1)
    async with topic.producer() as producer:
        await producer.send_batch([b"a", b"b", b"c"], partition=0)
        reader = await topic.reader(0, 1)
        assert [(r.offset, r.value) for r in await reader.read()] == [(1, b"b"), (2, b"c")]
        assert reader.position == 3
        assert await reader.read(block_ms=50) == []

        async def later() -> None:
            await asyncio.sleep(0.2)
            await producer.send(b"d")

        task = asyncio.ensure_future(later())
        got = await reader.read(block_ms=5_000)
        await task
        assert [(r.offset, r.value) for r in got] == [(3, b"d")]
        await reader.seek(0)
        tailed = []
        async for record in reader:
            tailed.append(record.value)
            if len(tailed) == 4:
                break
        assert tailed == [b"a", b"b", b"c", b"d"]
        with pytest.raises(fencing.OffsetOutOfRange):
            await reader.seek(9)
        with pytest.raises(fencing.OffsetOutOfRange):
            await topic.reader(0, 5)
        assert await topic.trim(0, before_offset=2) == 2
        with pytest.raises(fencing.OffsetOutOfRange) as info:
            await topic.reader(0, 1)
        assert (info.value.topic, info.value.partition) == (topic.name, 0)
        assert (info.value.requested, info.value.start, info.value.end) == (1, 2, 4)
        assert [r.value for r in await (await topic.reader(0)).read()] == [b"c", b"d"]


async def test_a_topic_opened_without_partitions_must_exist(api: Api) -> None:
    client = api.client()
    with pytest.raises(fencing.UnknownTopic):
        await client.topic("nope").open()
    made = client.topic("made", partitions=3)
    await made.open()
    again = client.topic("made")
    await again.open()
    assert (again.partitions, again.incarnation) == (3, made.incarnation)


async def test_a_superseded_consumer_commits_nothing(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1)
    async with topic.producer() as producer:
        await producer.send_batch([b"a", b"b", b"c"], partition=0)
    first = await topic.consumer("billing", "m1", [0])
    assert [r.value for r in await first.poll()] == [b"a", b"b", b"c"]
    assert await first.commit() == {0: 3}
    taker = client.ownership("billing", "ops", ttl=5)
    await taker.claim(["t/0"], generation=0)
    with pytest.raises(fencing.Fenced):
        await first.commit({0: 1})
    with pytest.raises(fencing.Fenced):
        await first.poll()
    assert await first.committed(0) == 3
    await first.close()
    await taker.close()
    second = await topic.consumer("billing", "m2", [0])
    assert second.position(0) == 3
    await second.close()

"""Producers, written once, run for sync and asyncio on Redis 7 and Valkey 8."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.cluster

import fencing
import fencing.aio
from fencing import AccessMode
from fencing._keys import Keys
from fencing._protocol.producer import decode_pid_state
from fencing.verify import Attempt, verify_log

from ..support.flavours import Api


async def read_all(topic: object, partition: int) -> list[tuple[int | None, bytes]]:
    reader = await topic.reader(partition, "earliest")  # type: ignore[attr-defined]
    return [(r.offset, r.value) for r in await reader.read(max_records=10_000)]


async def test_sends_land_at_contiguous_offsets_and_read_back_exactly(api: Api) -> None:
    topic = api.client().topic("orders", partitions=2)
    async with topic.producer() as producer:
        first = await producer.send(b"a", partition=0)
        batch = await producer.send_batch([b"b", fencing.Record(b"c", b"k")], partition=0)
        other = await producer.send(b"x", partition=1, expected_offset=0)
    assert (first.offset, [m.offset for m in batch], other.offset) == (0, [1, 2], 0)
    assert {m.epoch for m in (first, *batch, other)} == {0}
    assert await read_all(topic, 0) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert await read_all(topic, 1) == [(0, b"x")]
    assert await topic.offsets(0) == (0, 3)


async def test_a_known_message_id_is_answered_with_the_original(api: Api) -> None:
    """On one server, a cluster, as an ACL user and over TLS: the id window's keys and
    commands are the append's own."""
    topic = api.client().topic("ids", partitions=3, message_id_window=2)
    async with topic.producer() as producer:
        first = await producer.send(b"a", message_id="a")
        batch = await producer.send_batch(
            [fencing.Record(b"b", message_id="b"), fencing.Record(b"c", message_id="c")],
            partition=first.partition,
        )
        resent = await producer.send_batch(
            [fencing.Record(b"b", message_id="b"), fencing.Record(b"c", message_id="c")],
            partition=first.partition,
        )
        assert resent == batch and all(md.duplicate for md in resent)
        again = await producer.send(b"a", message_id="a")  # pushed out of a window of 2
        assert (again.offset, again.duplicate) == (first.offset + 3, False)
    reader = await topic.reader(first.partition, "earliest")
    records = await reader.read(max_records=10)
    assert [(r.value, r.message_id) for r in records] == [
        (b"a", "a"),
        (b"b", "b"),
        (b"c", "c"),
        (b"a", "a"),
    ]


async def test_expected_offset_mismatch_carries_the_real_next_offset(api: Api) -> None:
    topic = api.client().topic("t", partitions=1)
    async with topic.producer() as producer:
        await producer.send(b"a")
        with pytest.raises(fencing.OffsetMismatch) as err:
            await producer.send(b"b", expected_offset=5)
        assert (err.value.expected, err.value.actual) == (5, 1)
        assert (err.value.topic, err.value.partition) == ("t", 0)
    assert await read_all(topic, 0) == [(0, b"a")]


async def test_exclusive_refuses_while_another_lives_and_fencing_takes_over(api: Api) -> None:
    topic = api.client().topic("t", partitions=1)
    holder = await topic.producer(AccessMode.EXCLUSIVE)
    await holder.send(b"old")
    with pytest.raises(fencing.ProducerBusy):
        await topic.producer(AccessMode.EXCLUSIVE)
    with pytest.raises(fencing.ProducerBusy):
        await topic.producer(AccessMode.SHARED)
    taker = await topic.producer(AccessMode.EXCLUSIVE_WITH_FENCING)
    assert taker.epoch(0) == holder.epoch(0) + 1
    with pytest.raises(fencing.ProducerFenced):
        await holder.send(b"zombie")
    with pytest.raises(fencing.ProducerFenced):  # and every send after, without a round trip
        await holder.send(b"zombie")
    md = await taker.send(b"new")
    assert (md.offset, md.epoch) == (1, taker.epoch(0))
    await taker.close()
    await holder.close()
    assert await read_all(topic, 0) == [(0, b"old"), (1, b"new")]


async def test_wait_for_exclusive_queues_in_order_and_each_writes_alone(api: Api) -> None:
    topic = api.client().topic("t", partitions=1)
    await topic.open()
    order: list[int] = []

    async def writer(i: int) -> None:
        async with topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, lease_ttl=2) as p:
            order.append(i)
            for j in range(3):
                await p.send(f"{i}-{j}".encode(), expected_offset=len(order) * 3 - 3 + j)

    tasks = []
    for i in range(4):
        tasks.append(asyncio.ensure_future(writer(i)))
        await asyncio.sleep(0.05)  # queue positions follow the order they asked in
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    log = await read_all(topic, 0)
    assert [v for _, v in log] == [f"{i}-{j}".encode() for i in order for j in range(3)]
    assert sorted(order) == [0, 1, 2, 3]


async def test_idempotent_resend_after_resume_is_deduplicated(api: Api) -> None:
    topic = api.client().topic("t", partitions=1)
    async with topic.producer(name="ingest") as first:
        await first.send(b"a")
        state = first.state
    async with topic.producer(resume=state) as again:
        md = await again.send(b"b")
    assert md.offset == 1
    assert await read_all(topic, 0) == [(0, b"a"), (1, b"b")]


async def test_a_named_incarnation_fences_the_older_one(api: Api) -> None:
    topic = api.client().topic("t", partitions=1)
    old = await topic.producer(name="job")
    await old.send(b"1")
    new = await topic.producer(name="job")
    assert new.producer_id == old.producer_id
    with pytest.raises(fencing.ProducerFenced):
        await old.send(b"2")
    await new.send(b"3")
    await new.close()
    await old.close()
    assert [v for _, v in await read_all(topic, 0)] == [b"1", b"3"]


async def test_bad_input_is_refused_before_any_write(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=2)
    async with topic.producer() as producer:
        with pytest.raises(fencing.InvalidArgumentType):
            await producer.send(123)
        with pytest.raises(fencing.InvalidArgument):
            await producer.send(b"v", partition=7)
        with pytest.raises(fencing.InvalidArgument):
            await producer.send(b"v", expected_offset=0)  # needs a partition on 2 partitions
        with pytest.raises(fencing.RecordTooLarge):
            await producer.send(b"x" * (2 * 1024 * 1024), partition=0)
    with pytest.raises(fencing.InvalidName):
        client.topic("bad name{", partitions=1)
    assert await topic.offsets(0) == (0, 0)
    assert await topic.offsets(1) == (0, 0)
    with pytest.raises(fencing.UnknownTopic):
        await client.topic("missing").open()


async def test_closing_a_producer_waiting_in_the_queue_ends_its_wait_at_once(
    aio_api: Api,
) -> None:
    topic = aio_api.client().topic("t", partitions=1)
    holder = await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=30.0)
    waiter = fencing.aio.Producer(topic, AccessMode.WAIT_FOR_EXCLUSIVE, lease_ttl=30.0)
    opening = asyncio.ensure_future(waiter.open())
    await asyncio.sleep(0.3)
    assert not opening.done()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(waiter.close(), 5)  # not at the waiter's next turn (10 s away)
    with pytest.raises(fencing.ProducerBusy) as err:
        await opening
    assert err.value.reason == "closed"
    assert loop.time() - started < 5.0  # far below the waiter's next turn, even when busy
    await holder.close()


async def test_records_land_on_the_server_the_client_was_given(api: Api) -> None:
    # Read straight from the server (not through the library, which would follow the same
    # wrong address): a clone that lost the host and port would write to localhost:6379.
    topic = api.client().topic("where", partitions=1)
    async with topic.producer() as producer:
        await producer.send(b"here")
    key = f"{api.namespace}:{{where/0}}:log"
    scheme, rest = api.url.split("://", 1)
    if scheme in ("redis+cluster", "rediss+cluster"):
        plain = scheme.replace("+cluster", "")
        raw: Any = redis.cluster.RedisCluster.from_url(f"{plain}://{rest}")
    else:
        raw = redis.Redis.from_url(api.url)
    try:
        assert raw.xlen(key) == 1
    finally:
        raw.close()


async def test_an_idle_producer_whose_state_expired_goes_on_as_one_fresh_pid(api: Api) -> None:
    """G5 (Kafka KIP-360): a producer idle past its state's expiry goes on silently
    under a fresh PID, drawn once whichever partitions find out, from sequence 0; a
    partition whose state was still live moves over too (one PID per producer). Checked
    over the whole log: every acknowledged record once, each PID's sequences unbroken."""
    topic = api.client().topic("t", partitions=3)
    scheme, rest = api.url.split("://", 1)
    raw: Any = (
        redis.cluster.RedisCluster.from_url(f"{scheme.replace('+cluster', '')}://{rest}")
        if scheme.endswith("+cluster")
        else redis.Redis.from_url(api.url)
    )
    async with topic.producer() as producer:
        for p in range(3):
            await producer.send_batch([b"before-%d-0" % p, b"before-%d-1" % p], partition=p)
        old = producer.producer_id
        for p in (0, 1):  # expired on two partitions; still live on partition 2
            pk = Keys(api.namespace).partition("t", p)
            assert raw.hdel(pk.pids, str(old)) == 1
            raw.zrem(pk.pid_expiry, str(old))

        async def sender(i: int) -> list[tuple[bytes, int, int]]:
            done = []
            for n in range(5):
                value, p = b"after-%d-%d" % (i, n), (i + n) % 3
                md = await producer.send(value, partition=p)
                done.append((value, p, md.offset))
            return done

        async def one(value: bytes, p: int) -> tuple[bytes, int, int]:
            return value, p, (await producer.send(value, partition=p)).offset

        # Both expired partitions find out at once: one fresh PID is drawn, not two.
        acked = list(await asyncio.gather(one(b"after-x-0", 0), one(b"after-x-1", 1)))
        fresh = producer.producer_id
        acked += [a for part in await asyncio.gather(*(sender(i) for i in range(9))) for a in part]
        assert producer.producer_id == fresh
        state = producer.state
    assert fresh != old
    assert state.producer_id == fresh
    attempts = [Attempt(v, p, "acked", offset, 0) for v, p, offset in acked]
    with fencing.Client.from_url(api.url, namespace=api.namespace) as checker:
        report = verify_log(checker, "t", attempts=attempts, exclusive=False)
        assert report.ok, report.summary()
        for p in range(3):
            records = checker.topic("t").reader(p, "earliest").read(max_records=100)
            pids = [(r.value.startswith(b"after"), r.producer_id) for r in records]
            assert pids == [(False, old)] * 2 + [(True, fresh)] * (len(records) - 2)
            # Each partition's share of the fresh PID started at 0 and has no gap.
            stored = decode_pid_state(
                raw.hget(Keys(api.namespace).partition("t", p).pids, str(fresh))
            )
            assert (stored.generation, stored.last_sequence) == (0, len(records) - 3)
            assert state.next_sequence(p) == len(records) - 2
    assert len(acked) == 47
    raw.close()

"""Every handle factory of ``fencing.aio`` is entered directly (``async with
topic.producer() as p``) or awaited (``p = await topic.producer()``, closed after), and the
sync flavour's return the handle (``with topic.producer() as p``, ``p = topic.producer()``).
Against real servers: what each form opened is held while it lives and given back after."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import pytest
import redis

import fencing
import fencing.aio
from fencing import AccessMode

from ..support.flavours import Api
from ..support.polling import wait_until_async

EXCLUSIVE = AccessMode.EXCLUSIVE


async def values(topic: fencing.aio.Topic, partition: int = 0) -> list[tuple[int | None, bytes]]:
    reader = await topic.reader(partition, "earliest")
    return [(r.offset, r.value) for r in await reader.read(max_records=1000)]


async def claimable(client: fencing.aio.Client, group: str, resource: str) -> bool:
    """Whether another session can claim ``resource`` now (it is given back at once)."""
    probe = client.ownership(group, "probe", ttl=5.0)
    try:
        await probe.claim(resource)
    except fencing.OwnershipConflict:
        return False
    finally:
        await probe.close()
    return True


async def eventually(check: Callable[[], Awaitable[object]], *, what: str) -> None:
    """Poll an awaited ``check`` until it is truthy (10 s at most)."""
    deadline = time.monotonic() + 10.0
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within 10s")
        await asyncio.sleep(0.005)


async def exclusive_free(topic: fencing.aio.Topic) -> bool:
    """Whether an exclusive producer opens on the topic now (it is closed at once)."""
    try:
        probe = await topic.producer(EXCLUSIVE)
    except fencing.ProducerBusy:
        return False
    await probe.close()
    return True


# -- producer --------------------------------------------------------------------------------


async def test_producer_entered_directly_writes_and_leaves_its_partitions(aio_api: Api) -> None:
    topic = aio_api.client().topic("t", partitions=1)
    async with topic.producer(EXCLUSIVE) as producer:
        assert isinstance(producer, fencing.aio.Producer)
        md = await producer.send(b"a")
        assert not await exclusive_free(topic)
    assert (md.partition, md.offset) == (0, 0)
    assert await values(topic) == [(0, b"a")]
    assert await exclusive_free(topic)


async def test_producer_awaited_writes_until_closed(aio_api: Api) -> None:
    topic = aio_api.client().topic("t", partitions=1)
    producer = await topic.producer(EXCLUSIVE)
    assert isinstance(producer, fencing.aio.Producer)
    assert (await producer.send(b"a")).offset == 0
    assert not await exclusive_free(topic)
    await producer.close()
    assert await exclusive_free(topic)
    assert await values(topic) == [(0, b"a")]


async def test_producer_block_that_raises_closes_the_producer(aio_api: Api) -> None:
    topic = aio_api.client().topic("t", partitions=1)
    with pytest.raises(RuntimeError, match="boom"):
        async with topic.producer(EXCLUSIVE) as producer:
            await producer.send(b"a")
            raise RuntimeError("boom")
    assert await exclusive_free(topic)
    with pytest.raises(fencing.InvalidArgument):
        await producer.send(b"late")
    assert await values(topic) == [(0, b"a")]


async def test_producer_entered_and_cancelled_while_waiting_leaves_no_waiter(
    aio_api: Api, raw: redis.Redis
) -> None:
    client = aio_api.client()
    topic = client.topic("t", partitions=1)
    holder = await topic.producer(EXCLUSIVE, lease_ttl=5.0)
    entered = asyncio.Event()

    async def wait_for_it() -> None:
        async with topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, lease_ttl=5.0, wait_timeout=30):
            entered.set()

    task = asyncio.ensure_future(wait_for_it())
    waiters = client.keys.partition("t", 0).waiters
    await wait_until_async(lambda: raw.zcard(waiters) == 1, what="the opening queued")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert not entered.is_set()
    assert raw.zcard(waiters) == 0
    await holder.close()
    assert await exclusive_free(topic)


async def test_producer_opening_runs_as_a_task(aio_api: Api) -> None:
    """An opening is a coroutine too: ``asyncio.create_task`` takes it, as any coroutine."""
    topic = aio_api.client().topic("t", partitions=1)
    producer = await asyncio.create_task(topic.producer(EXCLUSIVE))
    assert isinstance(producer, fencing.aio.Producer)
    assert (await producer.send(b"a")).offset == 0
    await producer.close()
    assert await exclusive_free(topic)


async def test_a_producer_used_without_await_says_to_await_it(aio_api: Api) -> None:
    """Code ported from the sync flavour that forgets ``await``: reading the producer's
    attributes or sending on the opening says to await it (AttributeError; a TypeError that is
    an InvalidArgumentType), opens nothing, and the opening still opens when awaited."""
    topic = aio_api.client().topic("t", partitions=1)
    opening = topic.producer(EXCLUSIVE)
    with pytest.raises(AttributeError, match=r"await topic\.producer\(\)"):
        _ = opening.producer_id
    with pytest.raises(fencing.InvalidArgumentType, match=r"await topic\.producer\(\)"):
        opening.send(b"hello")
    assert await exclusive_free(topic)  # nothing was opened
    async with opening as producer:
        assert (await producer.send(b"a")).offset == 0
    assert await values(topic) == [(0, b"a")]


# -- consumer --------------------------------------------------------------------------------


async def test_consumer_entered_directly_holds_its_partition_until_the_block_ends(
    aio_api: Api,
) -> None:
    client = aio_api.client()
    topic = client.topic("t", partitions=2)
    async with topic.producer() as producer:
        await producer.send(b"a", partition=1)
    async with topic.consumer("g", "m", partitions=[1], start="earliest") as consumer:
        assert isinstance(consumer, fencing.aio.Consumer)
        records = await consumer.poll()
        assert [(r.partition, r.offset, r.value) for r in records] == [(1, 0, b"a")]
        assert not await claimable(client, "g", "t/1")
    assert await claimable(client, "g", "t/1")
    with pytest.raises(fencing.InvalidArgument):
        await consumer.poll()


async def test_consumer_awaited_holds_its_partition_until_closed(aio_api: Api) -> None:
    client = aio_api.client()
    topic = client.topic("t", partitions=1)
    async with topic.producer() as producer:
        await producer.send_batch([b"a", b"b"])
    consumer = await topic.consumer("g", "m", partitions=0, start=1)
    assert isinstance(consumer, fencing.aio.Consumer)
    assert [(r.offset, r.value) for r in await consumer.poll()] == [(1, b"b")]
    assert not await claimable(client, "g", "t/0")
    await consumer.close()
    assert await claimable(client, "g", "t/0")


# -- reader ----------------------------------------------------------------------------------


async def test_reader_entered_directly_reads_and_is_closed_after(aio_api: Api) -> None:
    topic = aio_api.client().topic("t", partitions=1)
    async with topic.producer() as producer:
        await producer.send_batch([b"a", b"b"])
    async with topic.reader(0, "earliest") as reader:
        assert isinstance(reader, fencing.aio.Reader)
        assert [(r.offset, r.value) for r in await reader.read()] == [(0, b"a"), (1, b"b")]
    with pytest.raises(fencing.InvalidArgument, match="closed"):
        await reader.read()


async def test_reader_awaited_reads_until_closed(aio_api: Api) -> None:
    topic = aio_api.client().topic("t", partitions=1)
    async with topic.producer() as producer:
        await producer.send_batch([b"a", b"b"])
    reader = await topic.reader(0, 1)
    assert isinstance(reader, fencing.aio.Reader)
    assert [(r.offset, r.value) for r in await reader.read()] == [(1, b"b")]
    await reader.close()
    with pytest.raises(fencing.InvalidArgument, match="closed"):
        await reader.seek(0)
    await reader.close()  # idempotent


async def test_closing_a_tailing_reader_ends_its_iteration(aio_api: Api) -> None:
    topic = aio_api.client().topic("t", partitions=1)
    async with topic.producer() as producer:
        await producer.send(b"a")
    reader = await topic.reader(0, "earliest")
    got = []
    async for record in reader:
        got.append(record.value)
        await reader.close()  # the loop ends before its next read, with no error
    assert got == [b"a"]


# -- ownership -------------------------------------------------------------------------------


async def test_ownership_entered_directly_releases_its_claims_after(aio_api: Api) -> None:
    client = aio_api.client()
    async with client.ownership("g", "a", ttl=5.0) as owner:
        assert isinstance(owner, fencing.aio.Ownership)
        grant = (await owner.claim("r"))["r"]
        assert grant.token >= 1
        assert not await claimable(client, "g", "r")
    assert await claimable(client, "g", "r")


async def test_ownership_awaited_holds_until_closed(aio_api: Api) -> None:
    client = aio_api.client()
    owner = await client.ownership("g", "a", ttl=5.0)
    assert isinstance(owner, fencing.aio.Ownership)
    await owner.claim("r")
    assert not await claimable(client, "g", "r")
    await owner.close()
    assert await claimable(client, "g", "r")
    plain = client.ownership("g", "b", ttl=5.0)  # no I/O: the handle as it is, unawaited
    assert "r" in await plain.claim("r")
    await plain.close()


# -- election --------------------------------------------------------------------------------


async def test_campaign_entered_directly_leads_until_the_block_ends(aio_api: Api) -> None:
    election = aio_api.client().election("e", "a", ttl=5.0)
    async with election.campaign(timeout=5) as leadership:
        assert isinstance(leadership, fencing.aio.Leadership)
        info = await election.leader()
        assert info is not None
        assert (info.label, info.token) == ("a", leadership.token)
    assert leadership.lost.is_set()
    assert await election.leader() is None
    await election.close()


async def test_campaign_awaited_leads_until_resigned(aio_api: Api) -> None:
    client = aio_api.client()
    election = await client.election("e", "a", ttl=5.0)  # no I/O: awaited as itself
    assert isinstance(election, fencing.aio.Election)
    leadership = await election.campaign(timeout=5)
    assert isinstance(leadership, fencing.aio.Leadership)
    info = await election.leader()
    assert info is not None
    assert (info.label, info.token) == ("a", leadership.token)
    assert not leadership.lost.is_set()
    await leadership.resign()
    assert leadership.lost.is_set()
    assert await election.leader() is None
    await election.close()


async def test_campaign_block_that_raises_resigns(aio_api: Api) -> None:
    client = aio_api.client()
    election = client.election("e", "a", ttl=5.0)
    with pytest.raises(RuntimeError, match="boom"):
        async with election.campaign(timeout=5) as leadership:
            raise RuntimeError("boom")
    assert leadership.lost.is_set()
    assert await election.leader() is None
    other = client.election("e", "b", ttl=5.0)
    async with other.campaign(timeout=1.0) as term:  # at once: nothing was left held
        assert term.token > leadership.token
    await election.close()
    await other.close()


async def test_campaign_entered_and_cancelled_while_waiting_leaves_no_candidate(
    aio_api: Api,
) -> None:
    client = aio_api.client()
    leader = client.election("e", "a", ttl=5.0)
    waiter = client.election("e", "b", ttl=5.0)
    held = await leader.campaign(timeout=5)
    entered = asyncio.Event()

    async def campaign() -> None:
        async with waiter.campaign(timeout=30):
            entered.set()

    task = asyncio.ensure_future(campaign())
    await eventually(leader.candidates, what="the campaign registered")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert not entered.is_set()
    assert await leader.candidates() == 0
    info = await leader.leader()
    assert info is not None
    assert info.token == held.token
    await held.resign()
    assert await leader.leader() is None
    await leader.close()
    await waiter.close()


# -- the sync flavour keeps its shape ---------------------------------------------------------


def test_sync_factories_return_the_handle_and_enter_it(client: fencing.Client) -> None:
    topic = client.topic("t", partitions=1)
    producer = topic.producer(EXCLUSIVE)
    assert isinstance(producer, fencing.Producer)
    assert producer.send(b"a").offset == 0
    producer.close()
    with topic.producer(EXCLUSIVE) as producer:
        assert producer.send(b"b").offset == 1
    with topic.reader(0, "earliest") as reader:
        assert isinstance(reader, fencing.Reader)
        assert [(r.offset, r.value) for r in reader.read()] == [(0, b"a"), (1, b"b")]
    with pytest.raises(fencing.InvalidArgument, match="closed"):
        reader.read()
    with topic.consumer("g", "m", partitions=[0], start="earliest") as consumer:
        assert isinstance(consumer, fencing.Consumer)
        assert [r.value for r in consumer.poll()] == [b"a", b"b"]
        with (
            client.ownership("g", "probe", ttl=5.0) as probe,
            pytest.raises(fencing.OwnershipConflict),
        ):
            probe.claim("t/0")
    with client.ownership("g", "probe", ttl=5.0) as owner:
        assert isinstance(owner, fencing.Ownership)
        assert "t/0" in owner.claim("t/0")


def test_sync_campaign_returns_the_term_until_resigned(client: fencing.Client) -> None:
    election = client.election("e", "a", ttl=5.0)
    leadership = election.campaign(timeout=5)
    assert isinstance(leadership, fencing.Leadership)
    info = election.leader()
    assert info is not None
    assert (info.label, info.token) == ("a", leadership.token)
    leadership.resign()
    assert leadership.lost.is_set()
    assert election.leader() is None
    with election.campaign(timeout=5) as term:
        assert term.token > leadership.token
        assert not term.lost.is_set()
    assert term.lost.is_set()
    assert election.leader() is None
    election.close()

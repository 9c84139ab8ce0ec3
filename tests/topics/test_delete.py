"""Topic administration: list the topics of a namespace, delete one (refused while in use
unless forced; every live handle of a deleted topic raises StateLost and never touches a
recreated one), the end offsets of a topic."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.cluster

import fencing
from fencing import AccessMode
from fencing._urls import redis_from_url

from ..conftest import ServerInfo
from ..support.flavours import Api
from ..support.logs import records_of_async


@pytest.fixture
def plain(server: ServerInfo) -> Iterator[Any]:
    """A plain redis-py client with every right on the test server (a single node, behind
    an ACL or TLS, or a cluster)."""
    if server.embedded is not None:
        client = server.embedded.probe()
    else:
        client = redis_from_url(server.url, redis.Redis, redis.cluster.RedisCluster)
    yield client
    client.close()


def keys_of(raw: Any, namespace: str, topic: str) -> list[str]:
    """Every key the topic has (its metadata, and every key of its partitions)."""
    found = {k.decode() for k in raw.scan_iter(match=f"{namespace}:{{{topic}/*", count=1000)}
    found |= {k.decode() for k in raw.scan_iter(match=f"{namespace}:{{{topic}}}:*", count=1000)}
    return sorted(found)


async def test_a_forced_delete_ends_every_live_handle_and_a_recreated_topic_starts_afresh(
    api: Api, plain: Any
) -> None:
    client = api.client()
    topic = client.topic("orders", partitions=2)
    producer = await topic.producer(AccessMode.EXCLUSIVE)
    await producer.send(b"old-0", partition=0)
    await producer.send(b"old-1", partition=1)
    consumer = await topic.consumer("billing", "host-a", [0, 1])
    assert len(await consumer.poll()) == 2
    await consumer.commit()
    reader = await topic.reader(0, "earliest")
    assert [r.value for r in await reader.read()] == [b"old-0"]
    election = client.election("scheduler", "host-a")
    leadership = await election.campaign(timeout=5)
    assert keys_of(plain, api.namespace, "orders")

    await client.delete_topic("orders", force=True)

    assert keys_of(plain, api.namespace, "orders") == []
    assert await client.topics() == []
    with pytest.raises(fencing.StateLost):
        await producer.send(b"late", partition=0)
    with pytest.raises(fencing.StateLost):
        await consumer.poll()
    with pytest.raises(fencing.StateLost):
        await reader.read()
    await leadership.check()  # elsewhere: untouched
    assert (await election.leader()) is not None

    again = client.topic("orders", partitions=1)
    async with again.producer() as fresh:
        assert (await fresh.send(b"new")).offset == 0
    # The old handles never write to, nor read, the new topic.
    with pytest.raises(fencing.StateLost):
        await producer.send(b"late", partition=0)
    with pytest.raises(fencing.StateLost):
        await reader.read()
    with pytest.raises(fencing.StateLost):
        await consumer.commit()
    assert [r.value for r in await records_of_async(again)] == [b"new"]
    assert await client.topics() == ["orders"]
    async with again.consumer("billing", "host-b", [0]) as second:
        assert [r.value for r in await second.poll()] == [b"new"]  # no old offset kept
    await leadership.resign()
    await producer.close()  # nothing left to release: quiet
    await consumer.close()


@pytest.mark.parametrize("user", ["exclusive", "shared", "consumer"])
async def test_a_delete_is_refused_while_the_topic_is_in_use_and_nothing_is_deleted(
    api: Api, plain: Any, user: str
) -> None:
    client = api.client()
    topic = client.topic("orders", partitions=2)
    async with topic.producer() as setup:
        await setup.send(b"a", partition=1)
    handle: Any
    if user == "consumer":
        handle = await topic.consumer("billing", "host-a", [1])
    else:
        mode = AccessMode.EXCLUSIVE if user == "exclusive" else AccessMode.SHARED
        handle = await topic.producer(mode)
    before = keys_of(plain, api.namespace, "orders")
    with pytest.raises(fencing.OwnershipConflict, match="in use"):
        await client.delete_topic("orders")
    assert keys_of(plain, api.namespace, "orders") == before
    assert await client.topics() == ["orders"]
    # Opens work again at once, and the handle in use goes on.
    assert [r.value for r in await records_of_async(client.topic("orders"), 1)] == [b"a"]
    if user == "consumer":
        assert [r.value for r in await handle.poll()] == [b"a"]
    else:
        assert (await handle.send(b"b", partition=1)).offset == 1
    await handle.close()
    await client.delete_topic("orders")  # nobody uses it now
    assert keys_of(plain, api.namespace, "orders") == []


async def test_topics_lists_the_namespace_sorted_and_skips_what_is_not_a_topic(
    api: Api, plain: Any
) -> None:
    client = api.client()
    for name in ("zeta", "alpha", "mid"):
        await client.topic(name, partitions=1).open()
    other = api.client(namespace=api.namespace + "-other")
    await other.topic("elsewhere", partitions=1).open()
    plain.set(f"{api.namespace}:{{broken}}:topic", "not a hash")
    assert await client.topics() == ["alpha", "mid", "zeta"]
    await client.delete_topic("mid")
    assert await client.topics() == ["alpha", "zeta"]
    assert await other.topics() == ["elsewhere"]


async def test_deleting_an_unknown_topic_or_with_bad_arguments_writes_nothing(
    api: Api, plain: Any
) -> None:
    client = api.client()
    await client.topic("orders", partitions=1).open()
    before = keys_of(plain, api.namespace, "orders")
    with pytest.raises(fencing.UnknownTopic, match="'nope' does not exist"):
        await client.delete_topic("nope")
    with pytest.raises(fencing.InvalidName):
        await client.delete_topic("bad name")
    with pytest.raises(fencing.InvalidArgumentType):
        await client.delete_topic(42)
    with pytest.raises(fencing.InvalidArgumentType, match="force must be a bool"):
        await client.delete_topic("orders", force="yes")
    assert keys_of(plain, api.namespace, "orders") == before
    assert list(plain.scan_iter(match=f"{api.namespace}:{{nope}}*")) == []
    plain.set(f"{api.namespace}:{{str}}:topic", "x")
    with pytest.raises(fencing.WrongKeyType):
        await client.delete_topic("str")
    assert plain.get(f"{api.namespace}:{{str}}:topic") == b"x"


async def test_a_delete_cut_short_refuses_opens_until_it_is_run_again(api: Api, plain: Any) -> None:
    """The process deleting died after it marked the topic: opening it is refused (a new
    handle: UnknownTopic saying so; one that saw the topic: StateLost), and running the
    delete again finishes it; then the name is free."""
    client = api.client()
    topic = client.topic("orders", partitions=1)
    async with topic.producer() as producer:
        await producer.send(b"a")
    plain.hset(f"{api.namespace}:{{orders}}:topic", "deleting", 1)  # where it was cut short
    with pytest.raises(fencing.UnknownTopic, match="being deleted"):
        await client.topic("orders", partitions=1).open()
    assert await client.topics() == []
    await client.delete_topic("orders")
    assert keys_of(plain, api.namespace, "orders") == []
    async with client.topic("orders", partitions=1).producer() as producer:
        assert (await producer.send(b"b")).offset == 0


async def test_end_offsets_are_each_partitions_next_offset(api: Api) -> None:
    client = api.client()
    topic = client.topic("orders", partitions=3)
    async with topic.producer() as producer:
        await producer.send_batch([b"a", b"b"], partition=0)
        await producer.send(b"c", partition=2)
    assert await topic.end_offsets() == {0: 2, 1: 0, 2: 1}
    with pytest.raises(fencing.UnknownTopic):
        await client.topic("nope").end_offsets()

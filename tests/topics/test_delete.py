"""Topic administration: list the topics of a namespace, delete one (refused while in use
unless forced; every live handle of a deleted topic raises StateLost and never touches a
recreated one), the end offsets of a topic."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
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
from ..support.polling import wait_until


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
    """Every key the topic has (its metadata, and every key of its partitions), but the
    marks a delete leaves to tell live handles of it (:func:`marks_of`)."""
    found = {k.decode() for k in raw.scan_iter(match=f"{namespace}:{{{topic}/*", count=1000)}
    found |= {k.decode() for k in raw.scan_iter(match=f"{namespace}:{{{topic}}}:*", count=1000)}
    return sorted(k for k in found if not k.endswith("}:deleted"))


def marks_of(raw: Any, namespace: str, topic: str) -> dict[str, set[str]]:
    """The delete marks of the topic's partitions: key -> the incarnations deleted."""
    found = raw.scan_iter(match=f"{namespace}:{{{topic}/*}}:deleted", count=1000)
    return {k.decode(): {f.decode() for f in raw.hkeys(k)} for k in found}


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
    with pytest.raises(fencing.InvalidArgument, match="mark_ttl must be a positive"):
        await client.delete_topic("orders", mark_ttl=0)
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


def _deleted_text(partition: int, topic: str, deleted_ms: int) -> str:
    when = datetime.fromtimestamp(deleted_ms / 1000, UTC).isoformat(timespec="milliseconds")
    return (
        f"partition {partition} of topic {topic!r} was deleted by an operator at {when} "
        "(client.delete_topic or 'fencing delete-topic' with force). Nothing was written; "
        "this handle cannot continue: close it, and open the topic again if it is meant to "
        "exist (a topic made anew under that name starts afresh)"
    )


async def test_a_live_producer_of_a_deleted_topic_is_told_of_the_delete_and_when(
    api: Api, plain: Any
) -> None:
    """A forced delete leaves a mark of each partition's incarnation, kept for the topic's
    producer state expiry: a live producer's next send is StateLost(reason="deleted")
    naming the delete and its time, also once a topic of that name was made again."""
    client = api.client()
    topic = client.topic("orders", partitions=2, producer_state_ttl=3600.0)
    producer = await topic.producer(AccessMode.EXCLUSIVE)
    await producer.send(b"a", partition=0)
    incs = [plain.hget(f"{api.namespace}:{{orders/{p}}}:part", "inc").decode() for p in (0, 1)]

    await client.delete_topic("orders", force=True)

    marks = {f"{api.namespace}:{{orders/{p}}}:deleted": {incs[p]} for p in (0, 1)}
    assert marks_of(plain, api.namespace, "orders") == marks
    for key in marks:
        assert 3_590_000 < plain.pttl(key) <= 3_600_000
    deleted_ms = int(plain.hget(f"{api.namespace}:{{orders/1}}:deleted", incs[1]))
    with pytest.raises(fencing.StateLost) as lost:
        await producer.send(b"late", partition=1)
    assert (lost.value.reason, str(lost.value)) == (
        "deleted",
        _deleted_text(1, "orders", deleted_ms),
    )
    async with client.topic("orders", partitions=2).producer() as fresh:
        assert (await fresh.send(b"new", partition=1)).offset == 0
    with pytest.raises(fencing.StateLost) as lost:
        await producer.send(b"late", partition=1)
    assert lost.value.reason == "deleted"
    await producer.close()


async def test_a_handle_idle_past_the_delete_mark_is_told_its_partition_is_gone(
    api: Api, plain: Any
) -> None:
    """``mark_ttl`` states how long the mark is kept; past it, a live handle gets the text
    of a partition gone (as after lost writes)."""
    client = api.client()
    producer = await client.topic("orders", partitions=1).producer(AccessMode.EXCLUSIVE)
    await producer.send(b"a")
    await client.delete_topic("orders", force=True, mark_ttl=0.3)
    mark = f"{api.namespace}:{{orders/0}}:deleted"
    assert 0 < plain.pttl(mark) <= 300
    wait_until(lambda: plain.exists(mark) == 0, timeout=5.0)
    with pytest.raises(fencing.StateLost) as lost:
        await producer.send(b"late")
    assert lost.value.reason == "missing"
    assert "the Redis server lost writes" in str(lost.value)
    await producer.close()


async def test_a_consumer_and_a_reader_of_a_deleted_topic_are_told_of_the_delete(
    api: Api, plain: Any
) -> None:
    """A poll, a commit and a read after a forced delete raise StateLost(reason="deleted")
    naming the delete and its time, as a send does; also once the topic was made again."""
    client = api.client()
    topic = client.topic("orders", partitions=2)
    async with topic.producer() as producer:
        await producer.send(b"a", partition=1)
    consumer = await topic.consumer("billing", "host-a", [1])
    assert [r.value for r in await consumer.poll()] == [b"a"]
    reader = await topic.reader(1, "earliest")
    assert [r.value for r in await reader.read()] == [b"a"]
    inc = plain.hget(f"{api.namespace}:{{orders/1}}:part", "inc").decode()

    await client.delete_topic("orders", force=True)

    deleted_ms = int(plain.hget(f"{api.namespace}:{{orders/1}}:deleted", inc))
    told = ("deleted", _deleted_text(1, "orders", deleted_ms))
    for call in (consumer.poll, consumer.commit, reader.read):
        with pytest.raises(fencing.StateLost) as lost:
            await call()
        assert (lost.value.reason, str(lost.value)) == told
    async with client.topic("orders", partitions=2).producer() as fresh:
        assert (await fresh.send(b"new", partition=1)).offset == 0
    for call in (consumer.poll, reader.read):
        with pytest.raises(fencing.StateLost) as lost:
            await call()
        assert (lost.value.reason, str(lost.value)) == told
    await consumer.close()

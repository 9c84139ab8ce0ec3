"""G9 for topics: a partition that vanished, was recreated or went back in history is
StateLost for producers and readers that saw it, and nothing is written."""

from __future__ import annotations

import threading

import pytest
import redis

import fencing
from fencing import AccessMode, Client, StateLost

from ..support.polling import wait_until


def test_flushall_stops_producers_and_readers(own: tuple[Client, redis.Redis]) -> None:
    client, raw = own
    topic = client.topic("orders", partitions=2)
    producer = topic.producer()
    producer.send(b"a", partition=0)
    reader = topic.reader(0, 0)
    raw.flushall()
    with pytest.raises(StateLost) as lost:
        producer.send(b"b", partition=0)
    # Lost writes, not an operator's delete: the text sends one to the server's persistence.
    assert lost.value.reason == "missing"
    assert "the Redis server lost writes" in str(lost.value)
    with pytest.raises(StateLost):
        reader.read()
    assert raw.keys("*") == []  # nothing was written: no fresh start at offset 0


def test_recreated_topic_is_another_history(own: tuple[Client, redis.Redis]) -> None:
    client, raw = own
    old = client.topic("orders", partitions=1)
    old_producer = old.producer()
    old_producer.send_batch([b"a", b"b"])
    raw.flushall()
    new = client.topic("orders", partitions=1)
    assert new.producer().send(b"fresh").offset == 0  # a new handle starts a new history
    assert new.incarnation != old.incarnation
    with pytest.raises(StateLost) as info:
        old_producer.send(b"c")
    assert info.value.reason == "incarnation"
    with pytest.raises(StateLost):
        old.reader(0, 0)
    assert [r.value for r in new.reader(0, 0).read()] == [b"fresh"]


def test_partition_going_back_in_history(own: tuple[Client, redis.Redis]) -> None:
    client, raw = own
    topic = client.topic("orders", partitions=1)
    producer = topic.producer()
    producer.send(b"a")
    pk = client.keys.partition("orders", 0)
    meta, stream = raw.dump(pk.meta), raw.dump(pk.stream)
    producer.send_batch([b"b", b"c"])
    # A failover to a replica that missed the last append.
    raw.restore(pk.meta, 0, meta, replace=True)  # type: ignore[arg-type]
    raw.restore(pk.stream, 0, stream, replace=True)  # type: ignore[arg-type]
    before = raw.xrange(pk.stream)
    with pytest.raises(StateLost) as info:
        producer.send(b"d")
    assert info.value.reason == "offset"
    with pytest.raises(StateLost):
        topic.reader(0, 0).read()
    assert raw.xrange(pk.stream) == before


def test_a_missing_partition_of_a_ready_topic_is_not_recreated(
    own: tuple[Client, redis.Redis],
) -> None:
    client, raw = own
    client.topic("orders", partitions=3).open()
    raw.delete(client.keys.partition("orders", 1).meta)  # one slot lost its keys
    with pytest.raises(StateLost):
        client.topic("orders", partitions=3).open()
    assert not raw.exists(client.keys.partition("orders", 1).meta)


def test_stream_deleted_under_the_metadata(own: tuple[Client, redis.Redis]) -> None:
    client, raw = own
    topic = client.topic("orders", partitions=1)
    producer = topic.producer()
    producer.send(b"a")
    raw.delete(client.keys.partition("orders", 0).stream)
    with pytest.raises(StateLost) as info:
        producer.send(b"b")
    assert info.value.reason == "stream"


def test_a_blocking_read_never_returns_records_of_a_recreated_log(
    own: tuple[Client, redis.Redis],
) -> None:
    client, raw = own
    topic = client.topic("t", partitions=1)
    topic.producer().send(b"old")
    reader = topic.reader(0, "latest")
    out: list[object] = []

    def read() -> None:
        try:
            out.append(reader.read(block_ms=20_000))
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    wait_until(lambda: raw.info("clients")["blocked_clients"] >= 1)
    raw.flushall()
    fresh = client.topic("t", partitions=1)
    fresh.producer().send_batch([b"new-0", b"new-1"])
    thread.join(20)
    (result,) = out
    assert isinstance(result, StateLost)


def test_records_left_without_their_metadata_are_state_lost(
    client: Client, raw: redis.Redis
) -> None:
    raw.xadd(client.keys.partition("t", 0).stream, {"v": b"orphan"}, id="0-1")
    with pytest.raises(StateLost) as info:
        client.topic("t", partitions=1).open()
    assert info.value.reason == "stream"
    assert not raw.exists(client.keys.partition("t", 0).meta)


@pytest.mark.parametrize("mode", [AccessMode.EXCLUSIVE_WITH_FENCING, AccessMode.EXCLUSIVE])
def test_a_topic_handle_from_before_a_flushall_cannot_take_the_recreated_topic(
    own: tuple[Client, redis.Redis], mode: AccessMode
) -> None:
    """Opening a producer checks the partition's incarnation: a topic handle from before a
    FLUSHALL raises StateLost on the recreated topic, and never fences (or, renewing, blocks) its
    producers."""
    client, raw = own
    stale = client.topic("t", partitions=1).open()
    raw.flushall()
    other = Client(redis.Redis(connection_pool=raw.connection_pool), namespace=client.namespace)
    holder = other.topic("t", partitions=1).producer(AccessMode.SHARED)
    holder.send(b"new history")
    with pytest.raises(fencing.StateLost):
        stale.producer(mode)
    assert holder.send(b"still writing").offset == 1
    other.close()

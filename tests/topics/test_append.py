"""Appends: offsets (G6), conditional append (G3), all-or-nothing batches (G4)."""

from __future__ import annotations

import pytest
import redis

import fencing
from fencing import Client, OffsetMismatch, Record


def snapshot(raw: redis.Redis, client: Client, topic: str, partition: int) -> tuple[object, ...]:
    pk = client.keys.partition(topic, partition)
    return (raw.dump(pk.meta), raw.dump(pk.stream), raw.xrange(pk.stream), raw.hgetall(pk.meta))


def test_offsets_are_contiguous_from_zero_and_ids_encode_them(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("orders", partitions=1)
    p = topic.producer()
    mds = [p.send(f"v{i}") for i in range(3)]
    mds += p.send_batch([Record(b"a"), Record(b"b")], partition=0)
    assert [m.offset for m in mds] == [0, 1, 2, 3, 4]
    assert {(m.topic, m.partition, m.epoch) for m in mds} == {("orders", 0, 0)}
    stream = client.keys.partition("orders", 0).stream
    ids = [entry_id for entry_id, _ in raw.xrange(stream)]
    assert ids == [b"0-1", b"0-2", b"0-3", b"0-4", b"0-5"]
    assert topic.offsets(0) == (0, 5)


def test_expected_offset_appends_only_at_the_next_offset(client: Client, raw: redis.Redis) -> None:
    topic = client.topic("log", partitions=1)
    p = topic.producer()
    assert [m.offset for m in p.send_batch([b"a", b"b"], expected_offset=0)] == [0, 1]
    before = snapshot(raw, client, "log", 0)
    for wrong in (0, 1, 3, 100):
        with pytest.raises(OffsetMismatch) as info:
            p.send_batch([b"x", b"y", b"z"], expected_offset=wrong)
        assert (info.value.expected, info.value.actual) == (wrong, 2)
        assert snapshot(raw, client, "log", 0) == before  # byte-for-byte unchanged
    assert p.send(b"c", expected_offset=2).offset == 2


def test_a_batch_is_all_or_nothing_on_a_failed_check(client: Client, raw: redis.Redis) -> None:
    topic = client.topic("log", partitions=2)
    p = topic.producer()
    p.send_batch([b"a"] * 5, partition=1)
    before = snapshot(raw, client, "log", 1)
    with pytest.raises(OffsetMismatch):
        p.send_batch(
            [Record(b"x", key=b"k", headers={"h": b"1"})] * 50, partition=1, expected_offset=4
        )
    assert snapshot(raw, client, "log", 1) == before
    assert raw.xlen(client.keys.partition("log", 1).stream) == 5


def test_records_round_trip_with_keys_headers_epoch_producer_and_time(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("rt", partitions=1)
    p = topic.producer()
    sent = [
        Record(b"plain"),
        Record(b"", key=b""),  # empty value and empty key are not "no key"
        Record("unicode é", key="k\u00e9"),
        Record(b"\x00\xff", headers={"a": b"1", "b": "two", "ü": b""}),
        Record(b"all", key=b"k", headers={"x": b"y"}),
    ]
    p.send_batch(sent, partition=0)
    t0, t1 = raw.time()
    now_ms = t0 * 1000 + t1 // 1000
    got = topic.reader(0, 0).read(max_records=10)
    assert [r.value for r in got] == [b"plain", b"", "unicode é".encode(), b"\x00\xff", b"all"]
    assert [r.key for r in got] == [None, b"", "k\u00e9".encode(), None, b"k"]
    assert [dict(r.headers) for r in got] == [
        {},
        {},
        {},
        {"a": b"1", "b": b"two", "ü": b""},
        {"x": b"y"},
    ]
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    assert {(r.topic, r.partition, r.epoch, r.producer_id) for r in got} == {
        ("rt", 0, 0, p.producer_id)
    }
    assert len({r.timestamp_ms for r in got}) == 1  # one batch, one server timestamp
    assert 0 <= now_ms - got[0].timestamp_ms < 60_000  # type: ignore[operator]


def test_keys_pick_partitions_with_murmur2(client: Client) -> None:
    topic = client.topic("keyed", partitions=5)
    p = topic.producer()
    for key in (b"user-1", b"user-2", b"abc", b"21", b"foobar"):
        md = p.send(b"v", key=key)
        assert md.partition == fencing._partitioner.partition_for_key(key, 5)
        assert md.partition == topic.partition_for(key)


def test_keyless_records_spread_round_robin(client: Client) -> None:
    topic = client.topic("rr", partitions=3)
    p = topic.producer()
    assert sorted(p.send(b"v").partition for _ in range(6)) == [0, 0, 1, 1, 2, 2]


def test_partition_count_is_fixed(client: Client) -> None:
    client.topic("fixed", partitions=3).open()
    assert client.topic("fixed").partitions == 3
    assert client.topic("fixed", partitions=3).partitions == 3
    with pytest.raises(fencing.InvalidArgument, match="3 partitions"):
        client.topic("fixed", partitions=4).open()


def test_offsets_survive_two_topic_handles_and_producers(client: Client) -> None:
    a = client.topic("shared", partitions=1).producer()
    b = client.topic("shared", partitions=1).producer()
    offsets = []
    for _ in range(5):
        offsets.append(a.send(b"a").offset)
        offsets.append(b.send(b"b").offset)
    assert offsets == list(range(10))
    assert a.producer_id != b.producer_id


def test_batch_limits_are_refused_before_any_io(client: Client, raw: redis.Redis) -> None:
    topic = client.topic(
        "limits", partitions=1, max_batch_records=3, max_batch_bytes=100, max_record_bytes=60
    )
    p = topic.producer()
    p.send(b"ok")
    before = snapshot(raw, client, "limits", 0)
    with pytest.raises(fencing.RecordTooLarge, match="3"):
        p.send_batch([b"a"] * 4)
    with pytest.raises(fencing.RecordTooLarge):
        p.send(b"x" * 61)
    with pytest.raises(fencing.RecordTooLarge):
        p.send_batch([b"x" * 50, b"y" * 51])
    with pytest.raises(fencing.RecordTooLarge):
        p.send(b"x" * 30, key=b"k" * 31)  # the key counts too
    assert snapshot(raw, client, "limits", 0) == before


def test_default_limits_are_1000_records_and_1_mib(client: Client) -> None:
    topic = client.topic("defaults", partitions=1)
    p = topic.producer()
    assert len(p.send_batch([b"x"] * 1000)) == 1000
    with pytest.raises(fencing.RecordTooLarge):
        p.send_batch([b"x"] * 1001)
    with pytest.raises(fencing.RecordTooLarge):
        p.send_batch([b"x" * 1024] * 1025)

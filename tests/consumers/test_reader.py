"""Readers and retention: seeks by offset, earliest/latest, blocking reads, trimming (G6)."""

from __future__ import annotations

import threading

import pytest
import redis

import fencing
from fencing import Client, InvalidArgument, OffsetOutOfRange

from ..conftest import ServerInfo
from ..support.polling import wait_until


def fill(client: Client, name: str, count: int, partitions: int = 1) -> None:
    p = client.topic(name, partitions=partitions).producer()
    p.send_batch([f"r{i}".encode() for i in range(count)], partition=0)


def values(records: list) -> list[bytes]:  # type: ignore[type-arg]
    return [r.value for r in records]


def test_read_from_any_offset(client: Client) -> None:
    fill(client, "log", 10)
    topic = client.topic("log")
    assert values(topic.reader(0, 0).read(max_records=3)) == [b"r0", b"r1", b"r2"]
    assert values(topic.reader(0, 7).read()) == [b"r7", b"r8", b"r9"]
    assert topic.reader(0, 10).read() == []  # at the end: nothing yet
    assert topic.reader(0, "earliest").position == 0
    assert topic.reader(0, "latest").position == 10


def test_reader_advances_and_pages(client: Client) -> None:
    fill(client, "log", 25)
    reader = client.topic("log").reader(0)
    pages = [reader.read(max_records=10) for _ in range(4)]
    assert [len(p) for p in pages] == [10, 10, 5, 0]
    assert [r.offset for page in pages for r in page] == list(range(25))
    assert reader.position == 25


def test_out_of_range_offsets(client: Client) -> None:
    fill(client, "log", 5)
    topic = client.topic("log")
    with pytest.raises(OffsetOutOfRange) as info:
        topic.reader(0, 6)
    assert (info.value.requested, info.value.start, info.value.end) == (6, 0, 5)
    with pytest.raises(InvalidArgument, match="earliest"):
        topic.reader(0, "nope")  # type: ignore[arg-type]


def test_trim_keeps_offsets_and_reads_before_at_after(client: Client, raw: redis.Redis) -> None:
    fill(client, "log", 10)
    topic = client.topic("log")
    stale = topic.reader(0, 2)  # positioned before the trim point
    assert topic.trim(0, before_offset=6) == 6
    assert topic.offsets(0) == (6, 10)
    assert raw.xlen(client.keys.partition("log", 0).stream) == 4  # XLEN shrank; offsets did not
    with pytest.raises(OffsetOutOfRange) as info:
        topic.reader(0, 5)  # before the trim point
    assert (info.value.start, info.value.end) == (6, 10)
    with pytest.raises(OffsetOutOfRange):
        stale.read()
    assert [r.offset for r in topic.reader(0, 6).read()] == [6, 7, 8, 9]  # at
    assert [r.offset for r in topic.reader(0, 8).read()] == [8, 9]  # after
    assert topic.reader(0, "earliest").position == 6
    # Appending after a trim continues the offsets.
    md = topic.producer().send(b"r10", expected_offset=10)
    assert md.offset == 10
    assert values(topic.reader(0, 9).read()) == [b"r9", b"r10"]


def test_trim_everything_then_append(client: Client) -> None:
    fill(client, "log", 3)
    topic = client.topic("log")
    assert topic.trim(0, before_offset=3) == 3
    assert topic.reader(0, "earliest").read() == []
    assert topic.producer().send(b"x").offset == 3
    assert values(topic.reader(0, "earliest").read()) == [b"x"]
    assert topic.trim(0, before_offset=1) == 3  # below the start: nothing changes
    with pytest.raises(OffsetOutOfRange):
        topic.trim(0, before_offset=5)  # past the end


def test_max_len_retention_keeps_the_newest_records(client: Client) -> None:
    topic = client.topic("capped", partitions=1, max_len=4)
    p = topic.producer()
    for i in range(10):
        p.send(f"r{i}".encode())
    assert topic.offsets(0) == (6, 10)
    assert [r.offset for r in topic.reader(0, "earliest").read()] == [6, 7, 8, 9]
    p.send_batch([b"a", b"b", b"c"])
    assert topic.offsets(0) == (9, 13)


def test_blocking_read_returns_when_a_record_arrives(client: Client) -> None:
    topic = client.topic("tail", partitions=1)
    topic.open()
    reader = topic.reader(0, "latest")
    started = threading.Event()

    def produce() -> None:
        started.wait(5)
        topic.producer().send(b"late")

    thread = threading.Thread(target=produce)
    thread.start()
    started.set()
    got = reader.read(block_ms=10_000)
    thread.join()
    assert [(r.offset, r.value) for r in got] == [(0, b"late")]


def test_blocking_read_times_out_empty(client: Client) -> None:
    topic = client.topic("tail", partitions=1)
    assert topic.reader(0, "latest").read(block_ms=50) == []


def test_iteration_tails_the_partition(client: Client) -> None:
    topic = client.topic("tail", partitions=1)
    producer = topic.producer()
    producer.send_batch([b"a", b"b"])
    seen: list[bytes] = []
    for record in topic.reader(0, 0):
        seen.append(record.value)
        if len(seen) == 2:
            producer.send(b"c")
        if len(seen) == 3:
            break
    assert seen == [b"a", b"b", b"c"]


@pytest.mark.parametrize("resp", [2, 3])
def test_reads_work_over_resp2_and_resp3(server: ServerInfo, namespace: str, resp: int) -> None:
    client = Client(redis.Redis.from_url(server.url, protocol=resp), namespace=namespace)
    topic = client.topic("resp", partitions=1)
    topic.producer().send_batch([fencing.Record(b"a", key=b"k", headers={"h": b"1"}), b"b"])
    got = topic.reader(0, 0).read()
    assert [(r.offset, r.value, r.key, dict(r.headers)) for r in got] == [
        (0, b"a", b"k", {"h": b"1"}),
        (1, b"b", None, {}),
    ]
    reader = topic.reader(0, "latest")
    raw = redis.Redis.from_url(server.url)
    blocked_before = raw.info("clients")["blocked_clients"]
    sender = threading.Thread(
        target=lambda: (
            wait_until(lambda: raw.info("clients")["blocked_clients"] > blocked_before),
            topic.producer().send(b"c", key=b"k2"),
        )
    )
    sender.start()
    tail = reader.read(block_ms=10_000)  # answered by XREAD BLOCK
    sender.join(10)
    assert [(r.offset, r.value, r.key) for r in tail] == [(2, b"c", b"k2")]
    raw.close()
    client.close()


def test_a_seek_out_of_range_is_offset_out_of_range(client: Client) -> None:
    topic = client.topic("t", partitions=1)
    topic.producer().send_batch([b"a", b"b"])
    reader = topic.reader(0)
    for offset in (3, 2**53, 2**70):
        with pytest.raises(fencing.OffsetOutOfRange):
            reader.seek(offset)
    with pytest.raises(fencing.InvalidArgument):
        reader.seek(-1)
    reader.seek(2)
    assert reader.read() == []
    reader.seek(1)
    assert [r.value for r in reader.read()] == [b"b"]


def test_a_reader_with_end_offset_latest_reads_the_snapshot_and_stops(client: Client) -> None:
    """``end_offset="latest"`` is the end when reader() was called: records appended
    afterwards are not read, ``read()`` returns [] at once at the end (even with
    ``block_ms``), and iterating ends."""
    fill(client, "log", 5)
    topic = client.topic("log")
    reader = topic.reader(0, 1, end_offset="latest")
    assert reader.end_offset == 5
    topic.producer().send(b"after", partition=0)
    assert values(reader.read(max_records=3)) == [b"r1", b"r2", b"r3"]
    assert values(reader.read(max_records=100)) == [b"r4"]
    assert reader.at_end
    assert reader.read(block_ms=60_000) == []
    assert values(list(topic.reader(0, "earliest", end_offset="latest"))) == [
        b"r0",
        b"r1",
        b"r2",
        b"r3",
        b"r4",
        b"after",
    ]


def test_a_reader_with_an_end_offset_past_the_log_waits_for_it_then_stops(
    client: Client,
) -> None:
    fill(client, "log", 2)
    topic = client.topic("log")
    reader = topic.reader(0, "earliest", end_offset=4)
    got: list[bytes] = []
    done = threading.Event()

    def iterate() -> None:
        got.extend(r.value for r in reader)
        done.set()

    thread = threading.Thread(target=iterate, daemon=True)
    thread.start()
    wait_until(lambda: len(got) == 2)
    producer = topic.producer()
    producer.send_batch([b"x", b"y", b"z"], partition=0)
    assert done.wait(10)
    assert got == [b"r0", b"r1", b"x", b"y"]
    assert reader.position == 4 and reader.at_end


def test_end_offset_is_checked_before_any_read(client: Client) -> None:
    fill(client, "log", 5)
    topic = client.topic("log")
    with pytest.raises(InvalidArgument, match="before where the reader starts"):
        topic.reader(0, 3, end_offset=2)
    with pytest.raises(InvalidArgument, match="end_offset must be"):
        topic.reader(0, 0, end_offset="earliest")  # type: ignore[arg-type]
    with pytest.raises(fencing.InvalidArgumentType):
        topic.reader(0, 0, end_offset=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        topic.reader(0, 0, end_offset=-1)
    reader = topic.reader(0, 2, end_offset=2)  # empty: at the end at once
    assert reader.at_end and reader.read() == [] and list(reader) == []
    assert topic.reader(0, 0).end_offset is None


def test_read_caps_max_records_and_says_so(client: Client) -> None:
    fill(client, "log", 1)
    with pytest.raises(InvalidArgument, match="max_records is capped at 10000"):
        client.topic("log").reader(0).read(max_records=10_001)


def test_a_reader_at_its_end_offset_still_finds_its_topic_deleted(client: Client) -> None:
    """At its end a reader reads nothing, but still checks the partition: a topic deleted
    (and made again) is StateLost there as on any other read."""
    fill(client, "log", 1)
    topic = client.topic("log")
    reader = topic.reader(0, "earliest", end_offset="latest")
    assert values(list(reader)) == [b"r0"]
    client.delete_topic("log", force=True)  # (fill's producer is left open)
    fill(client, "log", 2)
    with pytest.raises(fencing.StateLost):
        reader.read()
    with pytest.raises(InvalidArgument, match="past the largest offset"):
        client.topic("log").reader(0, 0, end_offset=2**63)

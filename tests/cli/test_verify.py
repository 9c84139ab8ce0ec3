"""The log verifier (fencing.verify): a clean log passes; logs that break G1, G2, G5 or G6,
written straight into Redis on the library's own keys, are reported violation by violation."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import redis

import fencing
from fencing import AccessMode, Client, ProducerFenced, UnknownTopic
from fencing._keys import PartitionKeys
from fencing._sync.metadata import metadata_of
from fencing.verify import Attempt, LogReport, Segment, verify_log

from ..support.keys import snapshot

TOPIC = "log"
Row = tuple[int, int, str]  # (epoch, producer id, value)
Where = tuple[str, int, int | None]  # (guarantee, partition, offset)


def forge(raw: redis.Redis, pk: PartitionKeys, rows: list[Row]) -> None:
    """Append records as the append script stores them, but with raw XADD, from the
    partition's next offset; next and the producer row's token follow, so that only the
    corruption a test makes on purpose is wrong."""
    nxt = int(raw.hget(pk.meta, "next") or 0)
    for epoch, producer, value in rows:
        nxt += 1
        raw.xadd(pk.stream, {"t": 1, "e": epoch, "p": producer, "v": value}, id=f"0-{nxt}")
    raw.hset(pk.meta, "next", nxt)
    token = int(raw.hget(pk.owner, "token") or 0)
    raw.hset(pk.owner, "token", max([token, *(row[0] for row in rows)]))


def where(report: LogReport) -> list[Where]:
    return [(v.guarantee, v.partition, v.offset) for v in report.violations]


def acked(md: fencing.RecordMetadata, value: bytes) -> Attempt:
    return Attempt(value, md.partition, "acked", md.offset, md.epoch)


# -- a clean log, written through the library ------------------------------------------------


def test_clean_log_of_two_exclusive_producers_one_after_another(
    client: Client, raw: redis.Redis, namespace: str
) -> None:
    topic = client.topic(TOPIC, partitions=2)
    attempts = []
    first = topic.producer(AccessMode.EXCLUSIVE, lease_ttl=0.5)
    for value, p in [(b"a0", 0), (b"a1", 0), (b"a2", 0), (b"a3", 1)]:
        attempts.append(acked(first.send(value, partition=p), value))
    first._renewal.cancel()  # type: ignore[union-attr]  # a paused process stops renewing
    second = topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, wait_timeout=20)
    with pytest.raises(ProducerFenced):  # the paused holder wakes up and sends: fenced
        first.send(b"late", partition=0)
    attempts.append(Attempt(b"late", 0, "fenced"))
    for value, p in [(b"b0", 0), (b"b1", 1), (b"b2", 1)]:
        attempts.append(acked(second.send(value, partition=p), value))
    second.close()
    before = snapshot(raw, namespace)

    report = verify_log(client, TOPIC, attempts=attempts, page=2)

    assert snapshot(raw, namespace) == before  # it never writes
    a, b = str(first.producer_id), str(second.producer_id)
    assert a != b
    assert report.ok and report.violations == ()
    assert report.segments == (
        Segment(partition=0, epoch=1, producer_id=a, first_offset=0, last_offset=2, records=3),
        Segment(partition=0, epoch=2, producer_id=b, first_offset=3, last_offset=3, records=1),
        Segment(partition=1, epoch=1, producer_id=a, first_offset=0, last_offset=0, records=1),
        Segment(partition=1, epoch=2, producer_id=b, first_offset=1, last_offset=2, records=2),
    )
    assert (report.records, report.partitions, report.duplicates, report.interleavings) == (
        7,
        2,
        0,
        0,
    )
    assert (report.fenced_attempts, report.fenced_landed, report.lost) == (1, 0, 0)
    assert report.checks == {"G1": "ok", "G2": "ok", "G5": "ok", "G6": "ok"}


def test_unknown_topic(client: Client) -> None:
    with pytest.raises(UnknownTopic):
        verify_log(client, "nothing-here")


# -- broken logs, written straight into Redis --------------------------------------------------


def _xdel(offset: int) -> Callable[[redis.Redis, PartitionKeys], object]:
    return lambda raw, pk: raw.xdel(pk.stream, f"0-{offset + 1}")


def _xadd(entry_id: str, **fields: object) -> Callable[[redis.Redis, PartitionKeys], object]:
    return lambda raw, pk: raw.xadd(pk.stream, fields, id=entry_id)  # type: ignore[arg-type]


def _token(token: int) -> Callable[[redis.Redis, PartitionKeys], object]:
    return lambda raw, pk: raw.hset(pk.owner, "token", token)


def _trim(start: int, *, xtrim: bool) -> Callable[[redis.Redis, PartitionKeys], object]:
    def trim(raw: redis.Redis, pk: PartitionKeys) -> None:
        if xtrim:  # what trim-2.lua does
            raw.xtrim(pk.stream, minid=f"0-{start + 1}", approximate=False)
        raw.hset(pk.meta, "start", start)

    return trim


def _malformed(raw: redis.Redis, pk: PartitionKeys) -> None:
    raw.xadd(pk.stream, {"t": 1, "e": 1}, id="0-2")  # no p, no v
    raw.hset(pk.meta, "next", 2)
    forge(raw, pk, [(1, 7, "a2")])  # the verifier keeps going after it


@dataclass
class Case:
    rows: list[Row]
    corrupt: Callable[[redis.Redis, PartitionKeys], object] | None
    expected: list[Where]
    attempts: list[Attempt] = field(default_factory=list)
    options: dict[str, bool] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


A3 = [(1, 7, "a0"), (1, 7, "a1"), (1, 7, "a2")]
CASES = {
    "gap in ids": Case(A3, _xdel(1), [("G6", 0, 1)]),
    "entry past next": Case(A3, _xadd("0-5", t=1, e=1, p=7, v="x"), [("G6", 0, 4)]),
    "id not 0-N": Case(A3, _xadd("5-1", t=1, e=1, p=7, v="x"), [("G6", 0, None)]),
    "epoch goes back": Case(
        [(1, 7, "a0"), (2, 9, "b0"), (2, 9, "b1"), (1, 7, "a1")],
        None,
        [("G1", 0, 3), ("G2", 0, 3)],
        counts={"interleavings": 1},
    ),
    "two producers in one epoch": Case(
        [(1, 7, "a0"), (1, 8, "b0"), (1, 7, "a1")],
        None,
        [("G1", 0, 2)],  # producer 7 again after 8: two writers interleave
        counts={"interleavings": 1},
    ),
    "a fresh producer id within one epoch is one writer": Case(
        [(1, 7, "a0"), (1, 7, "a1"), (1, 8, "a2")], None, []
    ),
    "shared producers may interleave": Case(
        [(1, 7, "a0"), (1, 8, "b0"), (1, 7, "a1")], None, [], options={"exclusive": False}
    ),
    "epoch above the current one": Case([(1, 7, "a0"), (2, 9, "b0")], _token(1), [("G1", 0, 1)]),
    "fenced value landed": Case(
        A3, None, [("G2", 0, 2)], [Attempt(b"a2", 0, "fenced")], counts={"fenced_landed": 1}
    ),
    "acked value missing": Case(
        A3[:1], None, [("G5", 0, 1)], [Attempt(b"a1", 0, "acked", 1, 1)], counts={"lost": 1}
    ),
    "acked at another offset": Case(A3, None, [("G5", 0, 2)], [Attempt(b"a2", 0, "acked", 1, 1)]),
    "acked with another epoch": Case(A3, None, [("G2", 0, 0)], [Attempt(b"a0", 0, "acked", 0, 2)]),
    "same value twice": Case(
        [(1, 7, "a0"), (1, 7, "a1"), (1, 7, "a0")], None, [("G5", 0, 2)], counts={"duplicates": 1}
    ),
    "repeats allowed unless acked": Case(
        [(1, 7, "a0"), (1, 7, "a0"), (1, 7, "u"), (1, 7, "u")],
        None,
        [("G5", 0, 3)],
        [Attempt(b"u", 0, "unknown")],
        options={"unique_values": False},
        counts={"duplicates": 1},
    ),
    "malformed entry": Case(A3[:1], _malformed, [("G6", 0, 1)]),
    "trimmed records are not lost": Case(
        A3, _trim(2, xtrim=True), [], [Attempt(b"a0", 0, "acked", 0, 1)], counts={"lost": 0}
    ),
    "entry below start": Case(A3, _trim(1, xtrim=False), [("G6", 0, 0)]),
    "no partition metadata": Case(A3, lambda raw, pk: raw.delete(pk.meta), [("G6", 0, None)]),
    "log key not a stream": Case(
        A3,
        lambda raw, pk: raw.delete(pk.stream) and raw.set(pk.stream, "x"),
        [("G6", 0, None), ("G6", 0, 0)],  # and offsets 0..2 are missing
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_each_broken_guarantee_is_reported(client: Client, raw: redis.Redis, case: Case) -> None:
    pk = metadata_of(client.topic(TOPIC, partitions=1).open()).partition_keys(0)
    forge(raw, pk, case.rows)
    if case.corrupt is not None:
        case.corrupt(raw, pk)
    report = verify_log(client, TOPIC, attempts=case.attempts, page=2, **case.options)
    assert where(report) == case.expected, report.summary()
    assert report.ok == (not case.expected)
    for name, value in case.counts.items():
        assert getattr(report, name) == value


def test_segments_of_a_broken_log_and_a_malformed_entry_inside_a_segment(
    client: Client, raw: redis.Redis
) -> None:
    pk = metadata_of(client.topic(TOPIC, partitions=1).open()).partition_keys(0)
    forge(raw, pk, [(1, 7, "a0"), (2, 9, "b0"), (2, 9, "b1")])
    raw.xadd(pk.stream, {"e": 2, "p": 9}, id="0-4")  # offset 3: no value
    raw.hset(pk.meta, "next", 4)
    forge(raw, pk, [(2, 9, "b2"), (1, 7, "a1")])
    report = verify_log(client, TOPIC)
    assert [
        (s.epoch, s.producer_id, s.first_offset, s.last_offset, s.records) for s in report.segments
    ] == [(1, "7", 0, 0, 1), (2, "9", 1, 4, 4), (1, "7", 5, 5, 1)]
    assert report.records == 6
    assert where(report) == [("G6", 0, 3), ("G1", 0, 5), ("G2", 0, 5)]


def test_a_log_breaking_everything_at_once_reports_every_violation(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic(TOPIC, partitions=2).open()
    p0, p1 = metadata_of(topic).partition_keys(0), metadata_of(topic).partition_keys(1)
    forge(raw, p0, [(1, 7, "a0"), (1, 7, "a1"), (2, 9, "b0"), (1, 7, "late"), (2, 9, "a0")])
    raw.xdel(p0.stream, "0-2")  # offset 1 gone
    forge(raw, p1, [(1, 7, "c0"), (1, 8, "c1")])
    raw.xadd(p1.stream, {"t": 1}, id="0-3")  # malformed, and past next
    raw.xadd(p1.stream, {"t": 1, "e": 1, "p": 7, "v": "d"}, id="1-0")
    raw.hset(p1.owner, "token", 0)
    attempts = [
        Attempt(b"late", 0, "fenced"),
        Attempt(b"c0", 1, "acked", 0, 1),
        Attempt(b"gone", 1, "acked", 2, 1),
        Attempt(b"b0", 0, "acked", 1, 2),
    ]
    report = verify_log(client, TOPIC, attempts=attempts, page=3)
    assert where(report) == [
        ("G6", 0, 1),  # gap
        ("G5", 0, 2),  # b0 acked at offset 1, found at 2
        ("G1", 0, 3),  # epoch 1 after epoch 2
        ("G2", 0, 3),  # ... written by a superseded producer
        ("G2", 0, 3),  # and the fenced value "late" landed
        ("G1", 0, 4),  # epoch 2 resumes after epoch 1
        ("G5", 0, 4),  # a0 a second time
        ("G6", 1, None),  # entry 1-0
        ("G1", 1, 0),  # epoch 1 above token 0
        ("G1", 1, 1),  # epoch 1 above token 0 (a second PID that never hands back is one
        #               writer that took a fresh producer id: not two writers)
        ("G5", 1, 2),  # "gone" was acked but never landed
        ("G6", 1, 2),  # past next
        ("G6", 1, 2),  # ... and malformed
    ]
    assert (report.records, report.duplicates, report.lost, report.fenced_landed) == (8, 1, 1, 1)
    assert report.interleavings == 2
    assert report.checks == {"G1": "failed", "G2": "failed", "G5": "failed", "G6": "failed"}


# -- summary and JSON ----------------------------------------------------------------------------


def test_summary_and_to_dict(client: Client, raw: redis.Redis) -> None:
    pk = metadata_of(client.topic(TOPIC, partitions=2).open()).partition_keys(0)
    forge(raw, pk, [(1, 7, f"a{i}") for i in range(312)])
    forge(raw, pk, [(2, 9, f"b{i}") for i in range(229)])
    attempts = [Attempt(b"late", 0, "fenced"), Attempt(b"b0", 0, "acked", 312, 2)]
    report = verify_log(client, TOPIC, attempts=attempts)
    assert report.summary().splitlines() == [
        "topic log: 2 partitions, 541 records",
        "  partition 0: 2 segments",
        "    epoch 1  producer 7   offsets 0..311     (312 records)",
        "    epoch 2  producer 9   offsets 312..540   (229 records)",
        "  partition 1: 0 segments",
        "  duplicates 0, interleavings 0, lost acknowledged 0, fenced attempts 1 (none landed)",
        "  G1 ok  G2 ok  G5 ok  G6 ok",
    ]
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is True and data["records"] == 541 and data["violations"] == []
    assert data["segments"][1] == {
        "partition": 0,
        "epoch": 2,
        "producer_id": "9",
        "first_offset": 312,
        "last_offset": 540,
        "records": 229,
    }

    forge(raw, pk, [(1, 7, "late")])
    report = verify_log(client, TOPIC, attempts=attempts)
    assert report.summary().splitlines()[-6:] == [
        "  duplicates 0, interleavings 1, lost acknowledged 0, fenced attempts 1 (1 landed)",
        "  G1 FAILED (1)  G2 FAILED (2)  G5 ok  G6 ok",
        "  3 violations:",
        "    G1 partition 0 offset 541: epoch goes back to 1 (producer 7) after epoch 2: "
        "epochs must never decrease along the log",
        "    G2 partition 0 offset 541: a record of epoch 1 (producer 7) after epoch 2 began at "
        "offset 312: a superseded producer wrote",
        "    G2 partition 0 offset 541: value 'late' of a send that raised ProducerFenced "
        "is in the log",
    ]
    data = json.loads(json.dumps(report.to_dict()))
    assert data["checks"] == {"G1": "failed", "G2": "failed", "G5": "ok", "G6": "ok"}
    assert data["violations"][0] == {
        "guarantee": "G1",
        "partition": 0,
        "offset": 541,
        "message": "epoch goes back to 1 (producer 7) after epoch 2: "
        "epochs must never decrease along the log",
    }

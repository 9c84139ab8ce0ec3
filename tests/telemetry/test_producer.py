"""A producer's records, sends, lost replies and fences, as its instruments count them."""

from __future__ import annotations

import pytest

import fencing
from fencing import AccessMode, Client
from fencing.faults import Proxy

from ..support.telemetry import Recorded
from ..support.wire import APPEND

RECORDS = "fencing.producer.records"
DURATION = "fencing.producer.send.duration"


def test_written_and_duplicate_records_are_counted_by_partition(
    client: Client, recorded: Recorded, topic_name: str
) -> None:
    topic = client.topic(topic_name, partitions=2)
    with topic.producer() as p:
        p.send_batch([b"a", b"b", b"c"], partition=1)
        p.send(b"d", partition=0)
    points = recorded.collect()
    on = {"fencing.topic": topic_name}
    assert points.sum(RECORDS, {**on, "fencing.partition": 1, "fencing.outcome": "written"}) == 3
    assert points.sum(RECORDS, {**on, "fencing.partition": 0, "fencing.outcome": "written"}) == 1
    assert points.sum(DURATION, {**on, "fencing.outcome": "written"}) == 2
    assert points.sum("fencing.producer.batches", on) == 2
    assert points.sum("fencing.producer.batch.sends", on) == 2  # (a histogram: two calls)
    sends = recorded.spans("fencing.send")
    assert [dict(s.attributes or {}) for s in sends] == [
        {"fencing.topic": topic_name, "fencing.partition": 1, "fencing.script": "append",
         "fencing.outcome": "written"},
        {"fencing.topic": topic_name, "fencing.partition": 0, "fencing.script": "append",
         "fencing.outcome": "written"},
    ]  # fmt: skip


def test_a_fenced_send_counts_its_records_fenced_and_the_lease_lost(
    client: Client, recorded: Recorded, topic_name: str
) -> None:
    topic = client.topic(topic_name, partitions=1)
    old = topic.producer(access_mode=AccessMode.EXCLUSIVE, lease_ttl=30.0).open()
    assert old.send_batch([b"a"], partition=0)[0].offset == 0
    with topic.producer(access_mode=AccessMode.EXCLUSIVE_WITH_FENCING, lease_ttl=30.0) as new:
        with pytest.raises(fencing.ProducerFenced):
            old.send_batch([b"b", b"c"], partition=0)
        new.send(b"d", partition=0)
    old.close()
    points = recorded.collect()
    on = {"fencing.topic": topic_name, "fencing.partition": 0}
    assert points.by(RECORDS, "fencing.outcome") == {"written": 2, "fenced": 2}
    assert points.sum(RECORDS, {**on, "fencing.outcome": "fenced"}) == 2
    assert points.sum(DURATION, {**on, "fencing.outcome": "fenced"}) == 1
    assert points.by("fencing.lease.lost", "fencing.kind") == {"producer": 1}
    outcomes = [(s.attributes or {}).get("fencing.outcome") for s in recorded.spans("fencing.send")]
    assert outcomes == ["written", "fenced", "written"]


def test_a_lost_reply_is_counted_unknown_then_resolved_as_landed(
    pclient: Client, proxy: Proxy, recorded: Recorded, topic_name: str
) -> None:
    topic = pclient.topic(topic_name, partitions=1)
    with topic.producer(lease_ttl=1.0) as p:
        p.send_batch([b"w0"], partition=0)
        with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"a", b"b"], partition=0)
        landed = p.resolve(0)
        assert landed is not None and [md.offset for md in landed] == [1, 2]
    points = recorded.collect()
    on = {"fencing.topic": topic_name, "fencing.partition": 0}
    assert points.by(RECORDS, "fencing.outcome") == {"written": 1, "unknown": 2}
    assert points.sum(DURATION, {**on, "fencing.outcome": "unknown"}) == 1
    assert points.by("fencing.producer.unknown.resolved", "fencing.outcome") == {"landed": 1}


def test_a_request_lost_is_resolved_as_not_landed(
    pclient: Client, proxy: Proxy, recorded: Recorded, topic_name: str
) -> None:
    topic = pclient.topic(topic_name, partitions=1)
    with topic.producer(lease_ttl=1.0) as p:
        p.send_batch([b"w0"], partition=0)
        with proxy.drop_requests(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"a"], partition=0)
        assert p.resolve(0) is None
    points = recorded.collect()
    assert points.by(RECORDS, "fencing.outcome") == {"written": 1, "unknown": 1}
    resolved = points.by("fencing.producer.unknown.resolved", "fencing.outcome")
    assert resolved == {"not_landed": 1}

"""A producer's records, sends, lost replies and fences, as its instruments count them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

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


class _RaisingProcessor(SpanProcessor):
    """A span processor with a bug (an exporter that raises as a span ends)."""

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("exporter bug")


@contextlib.contextmanager
def _raising_span_processor() -> Iterator[None]:
    """Add a raising processor to the process's TracerProvider (the tests' in-memory one,
    installed by ``recorded``), and take it off again."""
    multi = trace.get_tracer_provider()._active_span_processor  # type: ignore[attr-defined]
    before = multi._span_processors
    multi._span_processors = (*before, _RaisingProcessor())
    try:
        yield
    finally:
        multi._span_processors = before


def test_a_span_processor_that_raises_never_fails_a_send(
    client: Client, recorded: Recorded, topic_name: str
) -> None:
    """An exception from the application's SDK as the ``fencing.send`` span ends (a
    processor or exporter bug) never reaches the caller: the record was appended, and a
    caller told otherwise would send it again."""
    topic = client.topic(topic_name, partitions=1)
    with topic.producer() as p:
        with _raising_span_processor():
            try:
                md = p.send(b"x", partition=0)
            except RuntimeError as exc:
                pytest.fail(
                    f"send() raised {exc!r} from the telemetry, though its record was "
                    f"written: end offsets now {topic.end_offsets()}"
                )
        assert md.offset == 0


def test_a_reply_lost_and_retried_within_one_send_counts_its_records_written(
    pclient: Client, proxy: Proxy, recorded: Recorded, topic_name: str
) -> None:
    """One lost reply, retried by the library within the same send(): the records were
    appended once, by this send, so they count ``written`` (``duplicate`` is for a resend
    of records an earlier send wrote)."""
    topic = pclient.topic(topic_name, partitions=1)
    with topic.producer(lease_ttl=10.0) as p:
        p.send(b"w0", partition=0)  # (the script is loaded: the rule hits the append)
        with proxy.drop_replies(APPEND, count=1) as rule:
            mds = p.send_batch([b"a", b"b"], partition=0)
        assert rule.hits == 1
        assert [md.offset for md in mds] == [1, 2]
    assert topic.end_offsets() == {0: 3}
    points = recorded.collect()
    assert points.by(RECORDS, "fencing.outcome") == {"written": 3}
    outcomes = [(s.attributes or {}).get("fencing.outcome") for s in recorded.spans("fencing.send")]
    assert outcomes == ["written", "written"]


def test_every_send_a_fenced_producer_refuses_is_counted_fenced(
    client: Client, recorded: Recorded, topic_name: str
) -> None:
    """Every send a fenced producer refuses counts its records ``fenced``, with a duration
    and a span: a zombie that keeps trying shows, not only its first refusal."""
    topic = client.topic(topic_name, partitions=1)
    old = topic.producer(access_mode=AccessMode.EXCLUSIVE, lease_ttl=30.0).open()
    old.send(b"a", partition=0)
    with topic.producer(access_mode=AccessMode.EXCLUSIVE_WITH_FENCING, lease_ttl=30.0):
        with pytest.raises(fencing.ProducerFenced):
            old.send(b"b", partition=0)
        with pytest.raises(fencing.ProducerFenced):
            old.send(b"c", partition=0)
        with pytest.raises(fencing.ProducerFenced):
            old.send_batch([b"d", b"e"], partition=0)
    old.close()
    points = recorded.collect()
    assert points.by(RECORDS, "fencing.outcome") == {"written": 1, "fenced": 4}
    assert points.by(DURATION, "fencing.outcome") == {"written": 1, "fenced": 3}
    outcomes = [(s.attributes or {}).get("fencing.outcome") for s in recorded.spans("fencing.send")]
    assert outcomes == ["written", "fenced", "fenced", "fenced"]

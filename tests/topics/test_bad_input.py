"""Bad input to topics, producers and readers: a typed error before any write."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

import fencing
from fencing import AccessMode, Client, Record

from ..support.keys import snapshot


@pytest.fixture
def ready(client: Client) -> fencing.Producer:
    topic = client.topic("orders", partitions=3)
    producer = topic.producer()
    producer.send(b"seed", partition=0)
    return producer


CASES: list[tuple[str, Callable[[fencing.Producer], object], type[Exception]]] = [
    ("unknown partition", lambda p: p.send(b"v", partition=3), fencing.InvalidArgument),
    ("negative partition", lambda p: p.send(b"v", partition=-1), fencing.InvalidArgument),
    ("str partition", lambda p: p.send(b"v", partition="0"), fencing.InvalidArgumentType),  # type: ignore[arg-type]
    ("bool partition", lambda p: p.send(b"v", partition=True), fencing.InvalidArgumentType),
    (
        "negative expected offset",
        lambda p: p.send(b"v", partition=0, expected_offset=-1),
        fencing.InvalidArgument,
    ),
    (
        "float expected offset",
        lambda p: p.send(b"v", partition=0, expected_offset=1.0),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
    ),
    (
        "expected offset without partition",
        lambda p: p.send(b"v", expected_offset=1),
        fencing.InvalidArgument,
    ),
    ("int value", lambda p: p.send(5, partition=0), fencing.InvalidArgumentType),  # type: ignore[arg-type]
    ("None value", lambda p: p.send(None, partition=0), fencing.InvalidArgumentType),  # type: ignore[arg-type]
    ("int key", lambda p: p.send(b"v", key=3, partition=0), fencing.InvalidArgumentType),  # type: ignore[arg-type]
    (
        "bad header value",
        lambda p: p.send(b"v", headers={"h": 1}, partition=0),  # type: ignore[dict-item]
        fencing.InvalidArgumentType,
    ),
    (
        "bad header name",
        lambda p: p.send(b"v", headers={1: b"x"}, partition=0),  # type: ignore[dict-item]
        fencing.InvalidArgumentType,
    ),
    (
        "empty header name",
        lambda p: p.send(b"v", headers={"": b"x"}, partition=0),
        fencing.InvalidArgument,  # a bad value, not a bad type
    ),
    (
        "headers not a mapping",
        lambda p: p.send(b"v", headers=[("h", b"x")], partition=0),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
    ),
    ("empty batch", lambda p: p.send_batch([], partition=0), fencing.InvalidArgument),
    (
        "batch of one record object",
        lambda p: p.send_batch(Record(b"v"), partition=0),  # type: ignore[arg-type]
        fencing.InvalidArgumentType,
    ),
    (
        "batch with a bad item",
        lambda p: p.send_batch([b"ok", 7], partition=0),  # type: ignore[list-item]
        fencing.InvalidArgumentType,
    ),
    ("batch without partition", lambda p: p.send_batch([b"a", b"b"]), fencing.InvalidArgument),
    (
        "oversize record",
        lambda p: p.send(b"x" * (1024 * 1024 + 1), partition=0),
        fencing.RecordTooLarge,
    ),
]


@pytest.mark.parametrize(("label", "call", "error"), CASES, ids=[c[0] for c in CASES])
def test_bad_send_is_refused_before_any_write(
    ready: fencing.Producer,
    raw: redis.Redis,
    namespace: str,
    label: str,
    call: Callable[[fencing.Producer], object],
    error: type[Exception],
) -> None:
    before = snapshot(raw, namespace)
    with pytest.raises(error) as info:
        call(ready)
    assert type(info.value) is error  # (a value error is not a TypeError, nor the reverse)
    assert str(info.value)
    assert snapshot(raw, namespace) == before


def test_bad_topic_arguments(client: Client, raw: redis.Redis, namespace: str) -> None:
    for name in ("", "has space", "a{b}", "x" * 201, "__internal"):
        with pytest.raises(fencing.InvalidName):
            client.topic(name, partitions=1)
    with pytest.raises(fencing.InvalidArgumentType):
        client.topic(5, partitions=1)  # type: ignore[arg-type]
    for bad in (0, -1):
        with pytest.raises(fencing.InvalidArgument):
            client.topic("t", partitions=bad)
    with pytest.raises(fencing.InvalidArgumentType):
        client.topic("t", partitions="3")  # type: ignore[arg-type]
    with pytest.raises(fencing.InvalidArgument):
        client.topic("t", partitions=1, max_len=-1)
    with pytest.raises(fencing.InvalidArgument):
        client.topic("t", partitions=1, max_batch_records=0)
    assert snapshot(raw, namespace) == {}


def test_unknown_topic_is_refused_without_creating_it(
    client: Client, raw: redis.Redis, namespace: str
) -> None:
    with pytest.raises(fencing.UnknownTopic) as info:
        client.topic("ghost").reader(0, 0)
    assert info.value.topic == "ghost"
    assert "partitions=" in str(info.value)
    with pytest.raises(fencing.UnknownTopic):
        client.topic("ghost").producer().send(b"v")
    assert snapshot(raw, namespace) == {}


def test_bad_reader_arguments(ready: fencing.Producer) -> None:
    topic = ready.topic
    with pytest.raises(fencing.InvalidArgument):
        topic.reader(3, 0)
    with pytest.raises(fencing.InvalidArgument):
        topic.reader(0, -1)
    with pytest.raises(fencing.InvalidArgumentType):
        topic.reader(0, 1.5)  # type: ignore[arg-type]
    reader = topic.reader(0, 0)
    with pytest.raises(fencing.InvalidArgument):
        reader.read(max_records=0)
    with pytest.raises(fencing.InvalidArgument):
        reader.read(block_ms=-5)
    with pytest.raises(fencing.InvalidArgument):
        topic.trim(0, before_offset=-1)


def test_stream_key_of_another_type(client: Client, raw: redis.Redis, namespace: str) -> None:
    topic = client.topic("orders", partitions=1)
    producer = topic.producer().open()
    stream = client.keys.partition("orders", 0).stream
    raw.set(stream, b"not a stream")
    before = snapshot(raw, namespace)
    with pytest.raises(fencing.WrongKeyType) as info:
        producer.send(b"v")
    assert info.value.key == stream
    assert info.value.key_type == "string"
    assert snapshot(raw, namespace) == before


@pytest.mark.parametrize("kind", ["string", "hash"])
def test_stream_key_of_another_type_before_the_topic_exists(
    client: Client, raw: redis.Redis, namespace: str, kind: str
) -> None:
    """A key of another type where a new topic's stream goes is WrongKeyType naming it (not
    StateLost, which would send the operator looking for lost writes)."""
    stream = client.keys.partition("orders", 0).stream
    if kind == "string":
        raw.set(stream, b"junk")
    else:
        raw.hset(stream, "f", b"v")
    with pytest.raises(fencing.WrongKeyType) as info:
        client.topic("orders", partitions=1).open()
    assert (info.value.key, info.value.key_type) == (stream, kind)
    assert not raw.exists(client.keys.partition("orders", 0).meta)
    raw.delete(stream)  # the operator removes the stray key: the topic's creation goes on
    with client.topic("orders", partitions=1).producer() as producer:
        assert producer.send(b"v").offset == 0


def test_producer_id_counter_of_another_type(
    client: Client, raw: redis.Redis, namespace: str
) -> None:
    """The namespace's producer-id counter holding another type is WrongKeyType naming it; a
    string that is not a number, StateLost (reason "pid-counter"): typed errors, not redis-py's,
    and nothing written."""
    topic = client.topic("orders", partitions=1).open()
    counter = client.keys.producer_ids()
    raw.hset(counter, "junk", 1)
    with pytest.raises(fencing.WrongKeyType) as wrong:
        topic.producer().send(b"v")
    assert (wrong.value.key, wrong.value.key_type) == (counter, "hash")
    raw.delete(counter)
    raw.set(counter, b"not a number")
    with pytest.raises(fencing.StateLost) as lost:
        topic.producer().send(b"v")
    assert (lost.value.key, lost.value.reason) == (counter, "pid-counter")
    assert raw.xlen(client.keys.partition("orders", 0).stream) == 0


def test_metadata_key_of_another_type(client: Client, raw: redis.Redis, namespace: str) -> None:
    raw.rpush(client.keys.topic_meta("orders"), b"x")
    before = snapshot(raw, namespace)
    with pytest.raises(fencing.WrongKeyType):
        client.topic("orders", partitions=1).open()
    assert snapshot(raw, namespace) == before


@pytest.mark.parametrize("bad", [0, -1, 10_001, 10**30, True, False, 5.0, "5", b"5"], ids=repr)
def test_bad_dedup_window_is_refused_before_any_write(
    client: Client, raw: redis.Redis, namespace: str, bad: object
) -> None:
    with pytest.raises(fencing.InvalidArgument) as info:
        client.topic("t", partitions=1, dedup_window=bad).open()  # type: ignore[arg-type]
    assert "dedup_window" in str(info.value)
    if not isinstance(bad, int) or isinstance(bad, bool):
        assert isinstance(info.value, TypeError)
    assert snapshot(raw, namespace) == {}


def test_dedup_window_bounds_are_accepted(client: Client) -> None:
    assert client.topic("one", partitions=1, dedup_window=1).open().dedup_window == 1
    assert client.topic("most", partitions=1, dedup_window=10_000).open().dedup_window == 10_000
    assert client.topic("default", partitions=1).open().dedup_window == 5


def test_dedup_window_is_fixed_when_the_topic_is_created(
    client: Client, raw: redis.Redis, namespace: str
) -> None:
    assert client.topic("orders", partitions=2, dedup_window=10).open().dedup_window == 10
    before = snapshot(raw, namespace)
    for other in (20, 5, 1):
        with pytest.raises(fencing.InvalidArgument) as info:
            client.topic("orders", partitions=2, dedup_window=other).open()
        assert "dedup_window" in str(info.value)
        with pytest.raises(fencing.InvalidArgument):
            client.topic("orders", dedup_window=other).open()
    assert snapshot(raw, namespace) == before
    # Without the argument, the stored window is taken; the same value is accepted too.
    assert client.topic("orders").open().dedup_window == 10
    assert client.topic("orders", partitions=2).open().dedup_window == 10
    assert client.topic("orders", dedup_window=10).open().dedup_window == 10
    assert snapshot(raw, namespace) == before


def test_too_many_headers_are_refused_before_any_io(client: Client) -> None:
    with pytest.raises(fencing.RecordTooLarge):
        fencing.Record(b"v", headers={f"h{i}": b"" for i in range(2000)})
    with pytest.raises(fencing.RecordTooLarge):
        fencing.Record(b"v", headers={"n" * 2000: b""})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_an_unusable_wait_timeout_is_refused(client: Client, value: float) -> None:
    topic = client.topic("t", partitions=1)
    with pytest.raises(fencing.InvalidArgument, match="wait_timeout"):
        topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, wait_timeout=value)

"""``spark.read.format("fencing")`` on a real local PySpark (``local[2]``): rows read back
exactly, offset ranges, trims, bad options at load, the snapshot, another incarnation.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow", reason="the spark extra is not installed")

import fencing  # noqa: E402
import fencing.spark  # noqa: E402

from ..conftest import ServerInfo  # noqa: E402
from ..support.logs import read_records  # noqa: E402


@pytest.fixture(autouse=True)
def _one_kind(server: ServerInfo) -> None:
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for the source on Spark: redis")


def load(spark: Any, server: ServerInfo, namespace: str, topic: str, **options: str) -> Any:
    reader = (
        spark.read.format("fencing")
        .option("url", server.url)
        .option("namespace", namespace)
        .option("topic", topic)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def rows(df: Any) -> list[tuple[Any, ...]]:
    """The rows, sorted, with their timestamps as epoch milliseconds (PySpark hands them
    over as naive datetimes of the local time zone)."""
    return sorted(
        (*r[:8], round(r.timestamp.timestamp() * 1000), r.message_id) for r in df.collect()
    )


def fill(client: fencing.Client, name: str, per_partition: int = 5) -> fencing.Topic:
    """A topic of 2 partitions: values p<p>-<i>, keys on even i, a header on every third, a
    message id on odd i."""
    topic = client.topic(name, partitions=2)
    with topic.producer() as producer:
        for p in (0, 1):
            for i in range(per_partition):
                producer.send(
                    f"p{p}-{i}".encode(),
                    key=f"k{i}".encode() if i % 2 == 0 else None,
                    headers={"h": f"{i}".encode(), "n": b""} if i % 3 == 0 else None,
                    partition=p,
                    message_id=f"m{p}-{i}" if i % 2 else None,
                )
    return topic


def expected(client: fencing.Client, name: str) -> list[tuple[Any, ...]]:
    out = []
    for p in (0, 1):
        for r in read_records(client, name, p):
            row = (name, p, r.offset, r.key, r.value, dict(r.headers), r.epoch, r.producer_id)
            out.append((*row, r.timestamp_ms, r.message_id))
    return sorted(out)


def test_every_record_is_read_back_exactly_with_all_its_columns(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    fill(client, "orders")
    df = load(spark, server, namespace, "orders")
    assert [f.name for f in df.schema.fields] == [
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "headers",
        "epoch",
        "producer_id",
        "timestamp",
        "message_id",
    ]
    got = rows(df)
    want = expected(client, "orders")
    assert len(got) == 10
    assert sum(1 for g in got if g[3] is None) == 4 and sum(1 for g in got if g[5]) == 4
    assert [g[9] for g in got if g[9] is not None] == ["m0-1", "m0-3", "m1-1", "m1-3"]
    assert got == want
    assert df.rdd.getNumPartitions() == 2


def test_a_read_writes_nothing_to_redis(
    spark: Any,
    own: tuple[fencing.Client, redis.Redis],
    fresh_server: ServerInfo,
    namespace: str,
) -> None:
    """On a server of the test's own (the suite's Spark executors keep producers of other
    tests renewing on the shared one), reading a topic changes no key."""
    client, raw = own
    fill(client, "orders")
    writes_before = raw.info("persistence")["rdb_changes_since_last_save"]
    assert len(rows(load(spark, fresh_server, namespace, "orders"))) == 10
    assert raw.info("persistence")["rdb_changes_since_last_save"] == writes_before


def test_starting_and_ending_offsets_per_partition(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    fill(client, "orders", per_partition=6)
    df = load(
        spark,
        server,
        namespace,
        "orders",
        startingOffsets='{"0": 2, "1": 5}',
        endingOffsets='{"0": 4}',
    )
    assert [
        (r.partition, r.offset, r.value) for r in df.orderBy("partition", "offset").collect()
    ] == [
        (0, 2, b"p0-2"),
        (0, 3, b"p0-3"),
        (1, 5, b"p1-5"),
    ]
    latest = load(spark, server, namespace, "orders", startingOffsets="latest")
    assert latest.count() == 0


def test_an_empty_topic_reads_no_rows(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    client.topic("empty", partitions=2).open()
    assert load(spark, server, namespace, "empty").collect() == []


def test_trimmed_offsets_fail_by_default_and_are_skipped_with_fail_on_trim_false(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    topic = fill(client, "orders", per_partition=6)
    topic.trim(0, before_offset=3)
    # Offsets are checked against the topic when the read is planned, at the first action
    # (load() does not know a batch read from a stream, whose checkpoint may start elsewhere).
    df = load(spark, server, namespace, "orders", startingOffsets='{"0": 1}')
    with pytest.raises(Exception) as caught:
        df.collect()
    line = _error_line(caught.value, "OffsetOutOfRange")
    assert "offsets 1 to 2 of partition 0 of topic 'orders' were trimmed" in line
    assert "first retained offset is 3" in line
    df = load(spark, server, namespace, "orders", startingOffsets='{"0": 1}', failOnTrim="false")
    assert [(r.partition, r.offset) for r in df.collect() if r.partition == 0] == [
        (0, 3),
        (0, 4),
        (0, 5),
    ]
    # "earliest" is the first retained offset: nothing requested was trimmed.
    assert load(spark, server, namespace, "orders").count() == 3 + 6


def test_offsets_trimmed_after_load_fail_the_read_or_are_skipped(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    topic = fill(client, "orders", per_partition=6)
    strict = load(spark, server, namespace, "orders")
    lenient = load(spark, server, namespace, "orders", failOnTrim="false")
    topic.trim(1, before_offset=4)
    with pytest.raises(Exception) as caught:
        strict.collect()
    line = _error_line(caught.value, "OffsetOutOfRange")
    assert "offsets 0 to 3 of partition 1 of topic 'orders' were trimmed after the read" in line
    assert sorted((r.partition, r.offset) for r in lenient.collect() if r.partition == 1) == [
        (1, 4),
        (1, 5),
    ]


def _error_line(exc: BaseException, name: str) -> str:
    """The one line of ``exc``'s text that carries the library's error ``name``."""
    lines = [line for line in str(exc).splitlines() if f"fencing.errors.{name}: " in line]
    assert lines, str(exc)
    return lines[-1]


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"topic": "nope"}, "UnknownTopic", "topic 'nope' does not exist"),
        ({"startingOffsets": "{0: 1"}, "InvalidArgument", "startingOffsets must be"),
        ({"endingOffsets": "[1]"}, "InvalidArgument", "endingOffsets must be"),
        ({"startingOffsets": '{"0": -1}'}, "InvalidArgument", "offset -1"),
        ({"failOnTrim": "maybe"}, "InvalidArgument", "failOnTrim must be"),
        ({"maxRecordsPerTrigger": "0"}, "InvalidArgument", "maxRecordsPerTrigger must be"),
        (
            {"startingOffset": "earliest"},
            "InvalidArgument",
            "its options are url, namespace, topic, startingOffsets, endingOffsets, failOnTrim, "
            "maxRecordsPerTrigger",
        ),
    ],
)
def test_a_bad_option_fails_at_load_with_one_line(
    spark: Any,
    client: fencing.Client,
    namespace: str,
    server: ServerInfo,
    options: dict[str, str],
    error: str,
    words: str,
) -> None:
    fill(client, "orders")
    options = {"topic": "orders", **options}
    topic = options.pop("topic")
    with pytest.raises(Exception) as caught:
        load(spark, server, namespace, topic, **options)
    assert words in _error_line(caught.value, error)


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"startingOffsets": '{"7": 0}'}, "InvalidArgument", "names partition 7"),
        ({"endingOffsets": '{"1": 99}'}, "OffsetOutOfRange", "past its end"),
        (
            {"startingOffsets": '{"0": 3}', "endingOffsets": '{"0": 1}'},
            "InvalidArgument",
            "startingOffsets 3 is after endingOffsets 1",
        ),
    ],
)
def test_offsets_the_topic_does_not_hold_fail_a_batch_read_at_its_first_action(
    spark: Any,
    client: fencing.Client,
    namespace: str,
    server: ServerInfo,
    options: dict[str, str],
    error: str,
    words: str,
) -> None:
    fill(client, "orders")
    df = load(spark, server, namespace, "orders", **options)
    with pytest.raises(Exception) as caught:
        df.collect()
    assert words in _error_line(caught.value, error)


def test_a_missing_topic_option_fails_at_load(spark: Any, server: ServerInfo) -> None:
    with pytest.raises(Exception) as caught:
        spark.read.format("fencing").option("url", server.url).load()
    assert "needs the option topic" in _error_line(caught.value, "InvalidArgument")


def test_rows_appended_after_load_are_not_read(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    topic = fill(client, "orders")
    df = load(spark, server, namespace, "orders")
    with topic.producer() as producer:
        producer.send(b"late", partition=0)
    assert df.count() == 10
    assert b"late" not in [r.value for r in df.collect()]
    assert load(spark, server, namespace, "orders").count() == 11


def test_a_topic_made_again_between_load_and_the_read_raises_state_lost(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    fill(client, "orders")
    df = load(spark, server, namespace, "orders")
    client.delete_topic("orders", force=True)
    again = fencing.Client.from_url(server.url, namespace=namespace)
    try:
        fill(again, "orders")
    finally:
        again.close()
    with pytest.raises(Exception) as caught:
        df.collect()
    line = _error_line(caught.value, "StateLost")
    assert "was made again (another incarnation of the topic) after the read was planned" in line


def test_a_partition_longer_than_a_page_is_read_whole_in_order_and_register_is_idempotent(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    fencing.spark.register(spark)  # again: the module's fixture registered it already
    topic = client.topic("long", partitions=1)
    values = [f"v{i}".encode() * (1 + i % 7) for i in range(2_500)]
    with topic.producer() as producer:
        for i in range(0, len(values), 500):
            producer.send_batch([fencing.Record(v) for v in values[i : i + 500]], partition=0)
    got = load(spark, server, namespace, "long").orderBy("offset").collect()
    assert [(r.offset, r.value) for r in got] == list(enumerate(values))

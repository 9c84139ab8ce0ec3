"""The fencing source's parts without a Spark session: its options, the ranges it plans from
a topic's state (trims, offsets past the end, long ranges split across tasks), the Arrow
batches its tasks hand Spark, and what ``register`` says when PySpark or pyarrow cannot
run it."""

from __future__ import annotations

import sys
from typing import Any

import pytest

import fencing
import fencing.spark
from fencing.spark.plan import (
    PartitionState,
    Range,
    TopicState,
    parse_options,
    plan_ranges,
)
from fencing.spark.scan import FIRST_PAGE, PAGE_BYTES, ScanConfig, read_records

STATE = TopicState("orders", "t1", [PartitionState("a", 0, 250), PartitionState("b", 10, 20)])


def plan(per_task: int = 100, **options: str) -> list[tuple[int, int, int]]:
    parsed = parse_options({"topic": "orders", **{k.lower(): v for k, v in options.items()}})
    return [(r.partition, r.start, r.end) for r in plan_ranges(parsed, STATE, per_task)]


def test_a_range_longer_than_a_task_takes_is_split_and_each_carries_its_incarnation() -> None:
    assert plan() == [(0, 0, 100), (0, 100, 200), (0, 200, 250), (1, 10, 20)]
    ranges = plan_ranges(parse_options({"topic": "orders"}), STATE, 100)
    assert [r.incarnation for r in ranges] == ["a", "a", "a", "b"]
    assert ranges[0] == Range(0, 0, 100, "a")


def test_offsets_per_partition_and_defaults_for_the_partitions_left_out() -> None:
    assert plan(startingOffsets='{"1": 15}') == [
        (0, 0, 100),
        (0, 100, 200),
        (0, 200, 250),
        (1, 15, 20),
    ]
    assert plan(startingOffsets="latest") == []
    assert plan(endingOffsets='{"0": 5, "1": 12}') == [(0, 0, 5), (1, 10, 12)]
    # "earliest" past an ending offset that is below the first retained one: nothing.
    assert plan(endingOffsets='{"1": 5}', failOnTrim="false")[-1:] == [(0, 200, 250)]


def test_trimmed_offsets_fail_with_the_offsets_and_the_start_or_start_at_the_start() -> None:
    with pytest.raises(fencing.OffsetOutOfRange) as caught:
        plan(startingOffsets='{"1": 4}')
    assert str(caught.value).startswith(
        "offsets 4 to 9 of partition 1 of topic 'orders' were trimmed: its first retained "
        "offset is 10."
    )
    assert (caught.value.requested, caught.value.start, caught.value.partition) == (4, 10, 1)
    assert plan(startingOffsets='{"1": 4}', failOnTrim="FALSE")[-1] == (1, 10, 20)


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"startingOffsets": '{"0": 251}'}, fencing.OffsetOutOfRange, "past its end"),
        ({"endingOffsets": '{"1": 21}'}, fencing.OffsetOutOfRange, "past its end"),
        ({"startingOffsets": '{"2": 0}'}, fencing.InvalidArgument, "has partitions 0 to 1"),
        (
            {"startingOffsets": '{"0": 9}', "endingOffsets": '{"0": 3}'},
            fencing.InvalidArgument,
            "startingOffsets 9 is after endingOffsets 3",
        ),
    ],
)
def test_offsets_the_topic_cannot_serve_are_refused(
    options: dict[str, str], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        plan(**options)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({}, "needs the option topic"),
        ({"topic": "orders", "path": "x"}, "has no option 'path'"),
        ({"topic": "orders", "startingoffsets": "first"}, "startingOffsets must be"),
        ({"topic": "orders", "startingoffsets": '{"a": 1}'}, "names partition 'a'"),
        ({"topic": "orders", "endingoffsets": '{"0": 1.5}'}, "offsets are integers >= 0"),
        ({"topic": "orders", "endingoffsets": '{"0": true}'}, "offsets are integers >= 0"),
        ({"topic": "orders", "failontrim": "yes"}, "failOnTrim must be"),
        ({"topic": "bad name"}, "topic"),
    ],
)
def test_bad_options_are_refused_without_io_in_one_line(
    options: dict[str, str], words: str
) -> None:
    with pytest.raises(fencing.InvalidArgument) as caught:
        parse_options(options)
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_option_names_are_taken_in_any_case() -> None:
    parsed = parse_options({"TOPIC": "orders", "StartingOffsets": "LATEST", "FailOnTrim": "False"})
    assert (parsed.topic, parsed.starting, parsed.fail_on_trim) == ("orders", "latest", False)


def test_the_tasks_arrow_batches_have_the_schema_spark_expects() -> None:
    pytest.importorskip("pyarrow", reason="the spark extra is not installed")
    pytest.importorskip("pyspark.sql.datasource", reason="needs PySpark 4")
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415 - the spark extra

    from fencing.spark.scan import arrow_schema, to_batch  # noqa: PLC0415 - the spark extra
    from fencing.spark.source import SCHEMA  # noqa: PLC0415 - the spark extra

    assert arrow_schema().equals(to_arrow_schema(SCHEMA, timezone="UTC"))
    records = [
        fencing.Record(b"a", key=b"k", headers={"h": b"1", "g": b""}),
        fencing.Record(b"b"),
    ]
    built = []
    for offset, r in enumerate(records):
        record: Any = r
        object.__setattr__(record, "topic", "orders")
        object.__setattr__(record, "partition", 1)
        object.__setattr__(record, "offset", offset + 7)
        object.__setattr__(record, "epoch", 3)
        object.__setattr__(record, "producer_id", None if offset else 9)
        object.__setattr__(record, "timestamp_ms", 1_700_000_000_123)
        built.append(record)
    batch = to_batch(built, arrow_schema())
    assert batch.schema.equals(arrow_schema())
    rows = batch.to_pylist()
    assert [(r["offset"], r["key"], r["value"], r["producer_id"]) for r in rows] == [
        (7, b"k", b"a", 9),
        (8, None, b"b", None),
    ]
    assert rows[0]["headers"] == [("h", b"1"), ("g", b"")] and rows[1]["headers"] == []
    assert rows[0]["timestamp"].timestamp() == 1_700_000_000.123


def test_register_refuses_pyspark_older_than_4_2(monkeypatch: pytest.MonkeyPatch) -> None:
    pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")
    monkeypatch.setattr(pyspark, "__version__", "3.5.1")
    with pytest.raises(fencing.ConfigurationError, match=r"PySpark 4\.2 or later.*3\.5\.1"):
        fencing.spark.register(object())


def test_register_refuses_a_python_without_pyarrow(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(fencing.ConfigurationError, match="needs pyarrow"):
        fencing.spark.register(object())


def test_a_task_reads_large_records_in_small_pages(
    client: fencing.Client, server: Any, namespace: str
) -> None:
    topic = client.topic("big", partitions=1)
    big = 512 * 1024
    with topic.producer() as producer:
        for i in range(48):
            producer.send(bytes([i]) * big)
    inc = fencing.spark.plan.read_topic(client, "big").partitions[0].incarnation
    config = ScanConfig(server.url, namespace, "big", fail_on_trim=True)
    pages = list(read_records(config, Range(0, 0, 48, inc)))
    assert len(pages[0]) == FIRST_PAGE
    assert all(sum(len(r.value) for r in page) <= 2 * PAGE_BYTES for page in pages)
    assert [r.offset for page in pages for r in page] == list(range(48))

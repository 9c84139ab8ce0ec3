"""The ``format("fencing")`` sink's options and columns, checked without a Spark session:
every refusal names what to do, before anything is written."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow", reason="the spark extra is not installed")

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

import fencing
from fencing import InvalidArgument, InvalidArgumentType, NondeterministicBatch
from fencing._protocol.sink import Lineage
from fencing.spark.datasink import (
    FencingBatchWriter,
    FencingCommitMessage,
    FencingStreamWriter,
    layout_of,
    parse_sink_options,
    write_task,
)
from fencing.spark.rows import encode_row
from fencing.spark.writer import SinkConfig, begin_batch

from ..support.logs import read_records


def schema(**columns: object) -> StructType:
    return StructType([StructField(name, kind) for name, kind in columns.items()])  # type: ignore[arg-type]


def test_the_options_spark_passes_along_are_ignored_and_names_are_any_case() -> None:
    got = parse_sink_options(
        {"TOPIC": "events", "appid": "etl", "checkpointLocation": "/ck", "newlineage": "TRUE"}
    )
    assert (got.topic, got.app_id, got.new_lineage, got.partitions) == ("events", "etl", True, None)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"appId": "etl"}, "needs the option topic"),
        ({"topic": "events"}, "needs the option appId"),
        ({"topic": "events", "appId": "etl", "partitions": "0"}, "partitions must be"),
        ({"topic": "events", "appId": "etl", "newLineage": "yes"}, "newLineage must be"),
        ({"topic": "a b", "appId": "etl"}, "topic"),
    ],
)
def test_bad_options_are_refused(options: dict[str, str], words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        parse_sink_options(options)


@pytest.mark.parametrize(
    ("columns", "error", "words"),
    [
        ({"offset": LongType()}, InvalidArgument, "writes the column value"),
        ({"value": IntegerType()}, InvalidArgumentType, "value column is a int"),
        ({"value": StringType(), "key": LongType()}, InvalidArgumentType, "key column is a bigint"),
        (
            {"value": StringType(), "headers": StringType()},
            InvalidArgumentType,
            "headers column is a string",
        ),
        (
            {"value": StringType(), "partition": StringType()},
            InvalidArgumentType,
            "partition column is a string",
        ),
    ],
)
def test_bad_columns_are_refused(columns: dict[str, object], error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        layout_of(schema(**columns))


def test_kafka_style_columns_become_records_and_other_columns_are_ignored() -> None:
    kafka = ArrayType(
        StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    )
    layout = layout_of(
        schema(topic=StringType(), key=StringType(), value=BinaryType(), headers=kafka)
    )
    row = ("ignored", "k", b"v", [{"key": "h", "value": b"1"}])
    value, key, headers, target = encode_row(layout, row, 0, 0, 4)
    assert (value, key) == (b"v", b"k") and headers and target in range(4)
    as_map = layout_of(schema(value=StringType(), headers=MapType(StringType(), StringType())))
    assert encode_row(as_map, ("v", [("h", "1")]), 0, 0, 4)[2] == headers


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ([{"key": "h", "value": None}], "header 'h' of column 'headers' is null"),
        ([{"key": "h", "value": b"1"}, {"key": "h", "value": b"2"}], "appears twice"),
        ([{"key": "", "value": b"1"}], "header names are non-empty"),
    ],
)
def test_bad_headers_are_refused_naming_the_row(headers: object, words: str) -> None:
    kafka = ArrayType(
        StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    )
    layout = layout_of(schema(value=BinaryType(), headers=kafka))
    with pytest.raises(InvalidArgument, match=words):
        encode_row(layout, (b"v", headers), 0, 3, 4)


def test_the_partition_count_is_ascii_digits() -> None:
    for raw in ("\u00b2", "\u0663", "-1", "2.0"):
        with pytest.raises(InvalidArgument, match="partitions must be"):
            parse_sink_options({"topic": "events", "appId": "etl", "partitions": raw})


def _config(server: Any, namespace: str) -> SinkConfig:
    layout = layout_of(schema(value=BinaryType()))
    return SinkConfig(server.url, namespace, "events", layout, 2, 1 << 20, 10.0)


def test_saves_under_one_app_id_keep_their_own_dedupe_state(
    client: fencing.Client, server: Any, namespace: str
) -> None:
    client.topic("events", partitions=1).open()
    config = _config(server, namespace)
    options = parse_sink_options({"topic": "events", "appId": "backfill"})
    a, b = FencingBatchWriter(config, options), FencingBatchWriter(config, options)
    assert a.lineage.app_id != b.lineage.app_id
    assert a.lineage.app_id.startswith("backfill.w")
    rows = pa.record_batch({"value": [b"a0", b"a1", b"a2"]})
    # Save A's task writes a chunk and fails; save B (the same appId) writes; A's retry
    # skips what its first attempt wrote.
    write_task(config, a.lineage, True, 0, iter([rows.slice(0, 2)]))
    write_task(config, b.lineage, True, 0, iter([pa.record_batch({"value": [b"b0"]})]))
    retried = write_task(config, a.lineage, True, 0, iter([rows]))
    assert (retried.written, retried.skipped) == (1, 2)
    assert [r.value for r in read_records(client, "events", 0)] == [b"a0", b"a1", b"b0", b"a2"]


def test_a_commit_with_fewer_spark_partitions_than_an_earlier_attempt_wrote_is_refused(
    client: fencing.Client, server: Any, namespace: str
) -> None:
    client.topic("events", partitions=1).open()
    config = _config(server, namespace)
    options = parse_sink_options({"topic": "events", "appId": "copy"})
    lineage = Lineage("copy", "q", 0, 0)
    # An earlier attempt of batch 0 had 4 Spark partitions: partition 3 wrote its rows.
    write_task(config, lineage, False, 3, iter([pa.record_batch({"value": [b"x"]})]))
    writer = FencingStreamWriter(config, options)
    replay = [FencingCommitMessage("q", 0, sp) for sp in (0, 1)]  # the replay has 2
    with pytest.raises(NondeterministicBatch, match="wrote rows from Spark partition 3"):
        writer.commit(list(replay), 0)
    # Not finished: the batch is begun, not done.
    begun = begin_batch(client.topic("events"), lineage, new_lineage=False)
    assert [x.status for x in begun] == ["replay"]

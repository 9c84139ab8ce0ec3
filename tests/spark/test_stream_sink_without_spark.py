"""The ``format("fencing")`` sink's options and columns, checked without a Spark session:
every refusal names what to do, before anything is written."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

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

from fencing import InvalidArgument, InvalidArgumentType
from fencing.spark.datasink import layout_of, parse_sink_options
from fencing.spark.rows import encode_row


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

"""A sink task that routes and encodes whole Arrow columns makes the very calls it makes from
Python rows (keys, arguments, chain hashes, chunking), and its murmur2 over a whole column is
Kafka's on every key. No server, no Spark: the calls are recorded (tests.support.sink_calls)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencing._partitioner import murmur2
from fencing._protocol.sink import Lineage
from fencing._record import Limits
from fencing.errors import FencingError
from fencing.spark import writer
from fencing.spark.arrow import murmur2_array
from fencing.spark.rows import RowLayout, arrow_rows
from fencing.spark.writer import SinkConfig, write_batches, write_partition

from ..support.sink_calls import recorded_calls

LINEAGE = Lineage("app", "q-1", 3, 4)


@given(st.lists(st.binary(max_size=40) | st.binary(min_size=60, max_size=300), max_size=30))
def test_murmur2_over_a_column_is_murmur2_of_each_item(items: list[bytes]) -> None:
    offsets = np.cumsum([0] + [len(b) for b in items])
    data = np.frombuffer(b"".join(items), np.uint8)
    assert murmur2_array(offsets, data).tolist() == [murmur2(b) for b in items]


def test_murmur2_over_a_sliced_column_reads_only_its_items() -> None:
    column = pa.array(["skip", "21", "foobar", "a-little-bit-long-string", "x"])[1:4]
    _, offsets, data = column.buffers()
    o = np.frombuffer(offsets, np.int32)[column.offset : column.offset + len(column) + 1]
    got = murmur2_array(o, np.frombuffer(data, np.uint8)).tolist()
    assert got == [-973932308, -790332482, -985981536]


def calls_both_ways(
    layout: RowLayout,
    batches: list[pa.RecordBatch],
    *,
    partitions: int,
    spark_partition: int = 1,
    chunk_records: int = 500,
    chunk_bytes: int = 1 << 20,
    limits: Limits | None = None,
) -> tuple[Any, Any]:
    """(calls, result or error) from Python rows, then from Arrow batches."""
    config = SinkConfig(None, None, "orders", layout, chunk_records, chunk_bytes, 30.0)
    out = []
    with recorded_calls(partitions, limits) as calls:
        for by_rows in (True, False):
            calls.clear()
            try:
                outcome: Any = list(
                    write_partition(config, LINEAGE, spark_partition, arrow_rows(batches))
                    if by_rows
                    else write_batches(config, LINEAGE, spark_partition, batches)
                )
            except FencingError as exc:
                outcome = (type(exc), str(exc))
            out.append((list(calls.made), outcome))
    return out[0], out[1]


def split(table: pa.Table, cuts: list[int]) -> list[pa.RecordBatch]:
    """``table``'s rows as record batches cut at ``cuts``."""
    edges = [0, *sorted({c for c in cuts if 0 < c < table.num_rows}), table.num_rows]
    empty = pa.RecordBatch.from_pylist([], schema=table.schema)
    return [
        (table.slice(a, b - a).to_batches() or [empty])[0] for a, b in itertools.pairwise(edges)
    ]


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    value_type=st.sampled_from([pa.string(), pa.binary(), pa.large_string()]),
    key_type=st.sampled_from([None, pa.string(), pa.binary()]),
    partitions=st.integers(1, 5),
    spark_partition=st.integers(0, 6),
    chunk_records=st.integers(1, 6),
    chunk_bytes=st.integers(1, 200),
)
def test_arrow_batches_make_the_calls_python_rows_make(
    data: st.DataObject,
    value_type: pa.DataType,
    key_type: pa.DataType | None,
    partitions: int,
    spark_partition: int,
    chunk_records: int,
    chunk_bytes: int,
) -> None:
    text = st.text(max_size=30)
    blob = st.binary(max_size=30)
    value = text if pa.types.is_string(value_type) or pa.types.is_large_string(value_type) else blob
    n = data.draw(st.integers(0, 40))
    values = data.draw(st.lists(value, min_size=n, max_size=n))
    columns: dict[str, pa.Array] = {"v": pa.array(values, value_type)}
    if key_type is not None:
        key = st.none() | (text if key_type == pa.string() else blob)
        columns["k"] = pa.array(data.draw(st.lists(key, min_size=n, max_size=n)), key_type)
    table = pa.table(columns)
    cuts = data.draw(st.lists(st.integers(0, max(n, 1)), max_size=4))
    layout = RowLayout(tuple(columns), 0, 1 if key_type is not None else None, (), None)
    rows, arrow = calls_both_ways(
        layout,
        split(table, cuts),
        partitions=partitions,
        spark_partition=spark_partition,
        chunk_records=chunk_records,
        chunk_bytes=chunk_bytes,
    )
    assert arrow == rows


def test_the_calls_are_the_same_for_other_layouts_and_refused_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(writer._Sources, "_incarnation", lambda self, topic, p: f"{topic}{p}")
    n = 50
    base = {
        "v": pa.array([f"value {i}" for i in range(n)]),
        "k": pa.array([None if i % 7 == 0 else f"k{i % 9}".encode() for i in range(n)]),
        "h": pa.array([None if i % 3 == 0 else f"h{i}" for i in range(n)]),
        "p": pa.array([i % 3 for i in range(n)], pa.int64()),
        "st": pa.array(["src"] * n),
        "sp": pa.array([i % 2 for i in range(n)], pa.int64()),
        "so": pa.array([i // 3 for i in range(n)], pa.int64()),
    }
    table = pa.table(base)
    names = tuple(base)
    layouts = [
        RowLayout(names, 0, 1, (("h", 2),), None),  # a header column
        RowLayout(names, 0, 1, (), 3),  # a partition column
        RowLayout(names, 0, 1, (), None, source=(4, 5, 6)),  # message ids of source rows
        RowLayout(names, None, None, (), None),  # the whole row as JSON
        RowLayout(names, 0, 3, (), None),  # a key that is not text: refused
        RowLayout(names, 3, 1, (), None),  # a value that is not text: refused
    ]
    for layout in layouts:
        rows, arrow = calls_both_ways(layout, split(table, [13, 30]), partitions=3, chunk_records=4)
        assert arrow == rows, layout
    # A null value: refused at its row, after the chunks before it were written.
    nulls = table.set_column(0, "v", pa.array([None if i == 33 else "v" for i in range(n)]))
    rows, arrow = calls_both_ways(
        RowLayout(names, 0, 1, (), None), split(nulls, [13, 30]), partitions=3, chunk_records=4
    )
    assert arrow == rows and rows[0] and isinstance(rows[1], tuple)
    # A record over the topic's limit: refused at its row too.
    big = table.set_column(0, "v", pa.array(["x" * (200 if i == 21 else 5) for i in range(n)]))
    limits = Limits(max_record_bytes=100)
    rows, arrow = calls_both_ways(
        RowLayout(names, 0, 1, (), None),
        split(big, [13]),
        partitions=3,
        chunk_records=4,
        limits=limits,
    )
    assert arrow == rows and rows[0] and isinstance(rows[1], tuple)

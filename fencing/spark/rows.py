"""Turning Spark rows into records, and routing them to topic partitions. No I/O, no Spark.

Rows arrive as tuples in the column order of :attr:`RowLayout.columns` (the sink selects the
columns it needs on the driver). Every choice here is a pure function of the row and its
place in its Spark partition, so an attempt that sees the same rows routes and encodes them
the same way: the sink's dedupe depends on it.
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._partitioner import partition_for_key
from .._record import encode_headers
from ..errors import InvalidArgument, InvalidArgumentType

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True, slots=True)
class RowLayout:
    """Where the parts of a record sit in a row.

    ``value`` is the index of the value column, or None for the whole row as JSON (then
    ``columns`` names every column); ``key`` and ``partition`` are indexes or None;
    ``headers`` are (header name, index) pairs, one column a header; ``headers_map`` is the
    index of one column that holds all of a row's headers (a map of names to values, or an
    array of key/value structs as Spark's Kafka sink takes), or None. ``source`` is the
    indexes of the columns naming each row's source record (its topic, partition and
    offset in a fencing topic), or None: with them, each record carries a message id made
    of that position, and the sink records the highest positions it wrote.
    """

    columns: tuple[str, ...]
    value: int | None
    key: int | None
    headers: tuple[tuple[str, int], ...]
    partition: int | None
    headers_map: int | None = None
    source: tuple[int, int, int] | None = None


def plain_layout(layout: RowLayout) -> bool:
    """Whether rows of ``layout`` are records of a value column and at most a key column."""
    return (
        layout.value is not None
        and not layout.headers
        and layout.headers_map is None
        and layout.partition is None
        and layout.source is None
    )


def _json_default(value: object) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)


def _plain(value: object) -> object:
    """Nested Rows as dicts (a Row is a tuple: JSON would make it a list, losing its names)."""
    if hasattr(value, "asDict"):
        return value.asDict(recursive=True)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def row_json(columns: Sequence[str], row: Sequence[Any]) -> bytes:
    """A row as compact JSON with sorted keys (the same bytes on every attempt, whatever
    order a map column's entries arrive in); nested structs keep their field names.

    >>> row_json(("name", "id"), (1, "a"))
    b'{"id":"a","name":1}'
    """
    return json.dumps(
        {c: _plain(v) for c, v in zip(columns, row, strict=True)},
        separators=(",", ":"),
        ensure_ascii=False,
        sort_keys=True,
        default=_json_default,
    ).encode("utf-8")


def _as_bytes(what: str, value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgumentType(
        f"{what} must be a string or binary column, got a {type(value).__name__}: cast it "
        "in the query (col.cast('string'))"
    )


def _header_map(column: str, entries: object, index: int) -> dict[str, bytes]:
    """A headers column's entries as names to bytes: a map arrives as a dict (or pairs),
    an array of structs as dicts with the fields key and value."""
    found: dict[str, bytes] = {}
    pairs = entries.items() if isinstance(entries, dict) else entries
    for entry in pairs:  # type: ignore[attr-defined]
        name, value = (entry["key"], entry["value"]) if isinstance(entry, dict) else entry
        if not isinstance(name, str) or not name:
            raise InvalidArgument(
                f"row {index}: the headers column {column!r} holds a header named {name!r}; "
                "header names are non-empty strings"
            )
        if value is None:
            raise InvalidArgument(
                f"row {index}: header {name!r} of column {column!r} is null; headers hold "
                "bytes or text: drop it or coalesce() it before the sink"
            )
        if name in found:
            raise InvalidArgument(
                f"row {index}: header {name!r} appears twice in column {column!r}; a record's "
                "headers have distinct names"
            )
        found[name] = _as_bytes(f"header {name!r}", value)
    return found


def encode_row(
    layout: RowLayout, row: Sequence[Any], spark_partition: int, index: int, partitions: int
) -> tuple[bytes, bytes | None, bytes, int]:
    """(value, key, encoded headers, topic partition) of one row.

    Rows without a key and without a partition column go to topic partition
    ``spark_partition % partitions``: deterministic, and one Spark partition's rows stay in
    order in one topic partition.
    """
    if layout.value is None:
        value = row_json(layout.columns, row)
    else:
        raw = row[layout.value]
        if raw is None:
            raise InvalidArgument(
                f"row {index} of Spark partition {spark_partition} has a null value in "
                f"column {layout.columns[layout.value]!r}: filter nulls or coalesce() them "
                "before the sink"
            )
        value = _as_bytes(f"value column {layout.columns[layout.value]!r}", raw)
    key = None
    if layout.key is not None and row[layout.key] is not None:
        key = _as_bytes(f"key column {layout.columns[layout.key]!r}", row[layout.key])
    headers = b""
    if layout.headers:
        found = {
            name: _as_bytes(f"header column {name!r}", row[i])
            if isinstance(row[i], (bytes, bytearray, memoryview))
            else str(row[i]).encode("utf-8")
            for name, i in layout.headers
            if row[i] is not None
        }
        headers = encode_headers(found)
    elif layout.headers_map is not None and row[layout.headers_map]:
        headers = encode_headers(
            _header_map(layout.columns[layout.headers_map], row[layout.headers_map], index)
        )
    if layout.partition is not None:
        target = row[layout.partition]
        if isinstance(target, bool) or not isinstance(target, int) or not 0 <= target < partitions:
            raise InvalidArgument(
                f"row {index} of Spark partition {spark_partition}: partition column "
                f"{layout.columns[layout.partition]!r} holds {target!r}; the topic has "
                f"partitions 0 to {partitions - 1}"
            )
    elif key is not None:
        target = partition_for_key(key, partitions)
    else:
        target = spark_partition % partitions
    return value, key, headers, target


def arrow_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[Any, ...]]:
    """The rows of Arrow record batches as tuples in column order, as a sink writes them:
    strings as str, binary as bytes, structs and maps as dicts (a map as Spark's own rows
    give it: its keys to its values).

    >>> import pyarrow as pa
    >>> list(arrow_rows([pa.record_batch({"v": [b"a", b"b"], "k": ["x", None]})]))
    [(b'a', 'x'), (b'b', None)]
    """
    for batch in batches:
        columns = (column.to_pylist(maps_as_pydicts="strict") for column in batch.columns)
        yield from zip(*columns, strict=True)

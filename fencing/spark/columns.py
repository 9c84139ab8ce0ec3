"""The columns ``ForeachBatchSink`` writes from: which ones it takes from a micro-batch, in a
known order, checked against the batch's schema (:func:`select_columns`). Needs PySpark."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigurationError, InvalidArgument, InvalidArgumentType
from .rows import RowLayout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """The column names a sink was given (None: not used)."""

    value: str | None
    key: str | None
    headers: tuple[str, ...]
    partition: str | None
    #: Each row's source topic, partition and offset in a fencing topic.
    source: tuple[str, str, str] | None


def source_columns_of(names: Sequence[str] | None) -> tuple[str, str, str] | None:
    """``source_columns=`` checked without I/O: None, or three column names.

    >>> source_columns_of(["src_topic", "src_partition", "src_offset"])
    ('src_topic', 'src_partition', 'src_offset')
    """
    if names is None:
        return None
    if (
        isinstance(names, str)
        or len(names) != 3
        or not all(isinstance(n, str) and n for n in names)
    ):
        raise InvalidArgumentType(
            "source_columns names the columns that hold each row's source topic, partition "
            "and offset, in that order: source_columns=('src_topic', 'src_partition', "
            f"'src_offset'), got {names!r}"
        )
    return (names[0], names[1], names[2])


def select_columns(df: DataFrame, columns: SinkColumns) -> tuple[DataFrame, RowLayout]:
    """The columns the records need, in a known order, checked against the schema. With
    ``value`` None the record is the whole row as JSON (source columns included)."""
    try:
        from pyspark.sql import types  # noqa: PLC0415 - PySpark is an optional extra
    except ImportError as exc:  # pragma: no cover - the spark extra is missing
        raise ConfigurationError(
            "fencing.spark needs PySpark: pip install 'redis-fencing[spark]'"
        ) from exc
    fields = {f.name: f.dataType for f in df.schema.fields}

    def need(what: str, col: str, kinds: tuple[type, ...]) -> None:
        if col not in fields:
            raise InvalidArgument(
                f"{what} {col!r} is not a column of the micro-batch (columns: {', '.join(fields)})"
            )
        if kinds and not isinstance(fields[col], kinds):
            raise InvalidArgumentType(
                f"{what} {col!r} is a {fields[col].simpleString()} column; it must be "
                f"{' or '.join(k.__name__.removesuffix('Type').lower() for k in kinds)}: "
                "cast it in the query"
            )

    text_kinds = (types.StringType, types.BinaryType)
    int_kinds = (types.IntegerType, types.LongType, types.ShortType, types.ByteType)
    if columns.value is not None:
        need("value_col", columns.value, text_kinds)
    if columns.key is not None:
        need("key_col", columns.key, text_kinds)
    for col in columns.headers:
        need("headers_cols", col, ())
    if columns.partition is not None:
        need("partition_col", columns.partition, int_kinds)
    if columns.source is not None:
        for col, kinds in zip(
            columns.source, ((types.StringType,), int_kinds, int_kinds), strict=True
        ):
            need("source_columns", col, kinds)
    if columns.value is None:
        names = [f.name for f in df.schema.fields]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InvalidArgument(
                f"the micro-batch has several columns named {', '.join(twice)}: the whole "
                "row as JSON needs distinct names; alias them (or pass value_col=)"
            )
        chosen = tuple(fields)
        frame = df
    else:
        wanted = [
            columns.value,
            columns.key,
            *columns.headers,
            columns.partition,
            *(columns.source or ()),
        ]
        chosen = tuple(dict.fromkeys(c for c in wanted if c is not None))
        frame = df.select(*chosen)
    at = chosen.index
    layout = RowLayout(
        columns=chosen,
        value=None if columns.value is None else at(columns.value),
        key=None if columns.key is None else at(columns.key),
        headers=tuple((c, at(c)) for c in columns.headers),
        partition=None if columns.partition is None else at(columns.partition),
        source=None
        if columns.source is None
        else (at(columns.source[0]), at(columns.source[1]), at(columns.source[2])),
    )
    return frame, layout

"""``spark.read.format("fencing")`` and ``spark.readStream.format("fencing")``: a topic read
into a DataFrame through Spark 4's Python Data Source API (``pyspark.sql.datasource``).
Register it with :func:`fencing.spark.register`.

When the DataFrame is loaded (Spark calls :meth:`FencingDataSource.schema` then, in a Python
process of the driver) the options are checked and the topic is read with plain commands:
each partition's incarnation and offsets then are the snapshot a batch read covers. Its
ranges ``[starting, ending)`` are planned from that snapshot when the first action runs
(so offsets the topic does not hold raise then). A stream (:class:`FencingStreamReader`)
reads the topic anew at every micro-batch instead. Tasks (:mod:`.scan`) check each page
against the plan or the micro-batch's offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .._sync.client import Client
from ..errors import InvalidArgument
from .datasink import (
    FencingBatchWriter,
    FencingStreamWriter,
    parse_sink_options,
    sink_config,
)
from .offsets import Offsets, initial_offsets, latest_offsets, next_offsets, stream_ranges
from .plan import (
    Range,
    SourceOptions,
    TopicState,
    parse_options,
    plan_ranges,
    read_topic,
    topic_state,
)
from .resume import lineage_notice, resolve_after_sink
from .scan import ScanConfig, read_range, scan_client

if TYPE_CHECKING:
    import pyarrow as pa

#: The rows of the source: its public columns, fixed.
SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("headers", MapType(StringType(), BinaryType())),
        StructField("epoch", LongType()),
        StructField("producer_id", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("message_id", StringType(), nullable=True),
    ]
)


log = logging.getLogger("fencing.spark.sink")


class RangePartition(InputPartition):
    """One Spark input partition: a planned range of one topic partition."""

    def __init__(self, part: Range) -> None:
        super().__init__(part)
        self.range = part


class FencingDataSource(DataSource):
    """The ``fencing`` data source: a topic's records as rows, exactly by offset.

    >>> import fencing.spark
    >>> fencing.spark.register(spark)
    >>> df = (spark.read.format("fencing")
    ...       .option("url", "redis://localhost:6379/0")
    ...       .option("topic", "orders")
    ...       .option("startingOffsets", '{"0": 12, "1": 0}')   # or "earliest" (default)
    ...       .option("endingOffsets", "latest")                 # (default) or JSON
    ...       .option("failOnTrim", "true")                       # (default)
    ...       .load())                                            # doctest: +SKIP
    >>> df.select("partition", "offset", "value").show()          # doctest: +SKIP
    >>> stream = (spark.readStream.format("fencing")
    ...           .option("topic", "orders")
    ...           .option("maxRecordsPerTrigger", 10000)
    ...           .load())                                        # doctest: +SKIP

    Options: ``url`` (default ``FENCING_REDIS_URL``), ``namespace`` (default
    ``FENCING_NAMESPACE``), ``topic`` (required), ``startingOffsets`` ("earliest", "latest"
    or JSON of partition numbers to offsets; a partition left out of the JSON starts at the
    earliest), ``endingOffsets`` (batch reads only: "latest" or JSON; a partition left out
    reads up to the latest), ``failOnTrim`` ("true": asking for offsets already trimmed
    raises :class:`~fencing.OffsetOutOfRange` naming them and the first retained offset;
    "false": the read skips ahead to the first retained offset), ``maxRecordsPerTrigger``
    (streams only: at most this many records per micro-batch, shared fairly among the
    partitions; batch reads ignore it). Bad options raise at ``load()``, as does a topic
    that does not exist; offsets a batch read asks for that the topic does not hold raise
    at its first action. Columns: topic, partition, offset, key, value, headers, epoch,
    producer_id, timestamp. A read writes nothing to Redis.

    A batch read covers the topic as it was at ``load()``: rows appended later are not
    read. A stream's offsets in Spark's checkpoint are the topic's own offsets, with each
    partition's incarnation: a query restarted from its checkpoint reads on exactly where it
    stopped (``startingOffsets`` only applies to a new checkpoint), and a topic deleted and
    made again under the same name fails the query with :class:`~fencing.StateLost`, never
    reads another history under the old offsets.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._raw = dict(options)
        self._parsed: SourceOptions | None = None
        self._loaded: tuple[ScanConfig, TopicState] | None = None

    @property
    def _options(self) -> SourceOptions:
        if self._parsed is None:
            self._parsed = parse_options(self._raw)
        return self._parsed

    @classmethod
    def name(cls) -> str:
        return "fencing"

    def schema(self) -> StructType:
        self._load()
        return SCHEMA

    def _load(self) -> tuple[ScanConfig, TopicState]:
        if self._loaded is None:
            options = self._options
            url, namespace, state = topic_state(options)
            self._loaded = (ScanConfig(url, namespace, options.topic, options.fail_on_trim), state)
        return self._loaded

    def reader(self, schema: StructType) -> FencingReader:
        _check_schema(schema)
        config, state = self._load()
        options = resolve_after_sink(scan_client(config), self._options, state)
        return FencingReader(config, plan_ranges(options, state))

    def streamReader(self, schema: StructType) -> FencingStreamReader:  # noqa: N802 - Spark's name
        _check_schema(schema)
        if any(name.lower() == "endingoffsets" for name in self._raw):
            raise InvalidArgument(
                "endingOffsets applies to batch reads (spark.read) only: a stream reads on as "
                "records arrive. Drop the option, or read a fixed range with spark.read"
            )
        config, _ = self._load()
        return FencingStreamReader(config, self._options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> FencingStreamWriter:  # noqa: N802 - Spark's name
        options = parse_sink_options(self._raw)
        config = sink_config(options, schema)
        if options.new_lineage:
            client = Client.from_url(config.url, namespace=config.namespace)
            try:
                notice = lineage_notice(
                    client,
                    config.topic,
                    options.app_id,
                    positions=options.source_columns is not None,
                )
            finally:
                client.close()
            if notice:
                log.warning("redis-fencing spark sink: %s", notice)
        return FencingStreamWriter(config, options)

    def writer(self, schema: StructType, overwrite: bool) -> FencingBatchWriter:
        if overwrite:
            raise InvalidArgument(
                "the fencing sink appends: a topic is a log, nothing of it is overwritten. "
                "Write with .mode('append')"
            )
        options = parse_sink_options(self._raw)
        return FencingBatchWriter(sink_config(options, schema), options)


def _check_schema(schema: StructType) -> None:
    if schema != SCHEMA:
        raise InvalidArgument(
            "the fencing source has a fixed schema (topic, partition, offset, key, value, "
            "headers, epoch, producer_id, timestamp): do not set another one with "
            ".schema(...); select or cast the columns after load()"
        )


def _read(config: ScanConfig, partition: Any) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):
        # Spark reads one partition of its own when none was planned (nothing to read).
        return iter(())
    return read_range(config, partition.range)


class FencingReader(DataSourceReader):
    """Reads the planned ranges: one Spark partition per range."""

    def __init__(self, config: ScanConfig, ranges: list[Range]) -> None:
        self.config = config
        self.ranges = ranges

    def partitions(self) -> list[InputPartition]:
        return [RangePartition(part) for part in self.ranges]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        return _read(self.config, partition)


class FencingStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream of a topic: every micro-batch reads the offsets ``[start, end)`` that
    Spark's checkpoint holds, one Spark task per topic partition (in offset order).

    Spark keeps this object on the driver for the query's life (its offset calls read the
    topic with plain commands, nothing written); its tasks receive a copy for
    :meth:`read`. ``commit`` does nothing: the checkpoint holds the query's progress, and
    the topic keeps its records until they are trimmed.
    """

    def __init__(self, config: ScanConfig, options: SourceOptions) -> None:
        self.config = config
        self.options = options
        self._cap: Offsets | None = None

    def _state(self) -> TopicState:
        return read_topic(scan_client(self.config), self.config.topic)

    def initialOffset(self) -> Offsets:  # noqa: N802 - Spark's name
        state = self._state()
        options = resolve_after_sink(scan_client(self.config), self.options, state)
        return initial_offsets(options, state)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        if self.options.max_records is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_records)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:  # noqa: N802 - Spark's name
        return next_offsets(
            start,
            self._state(),
            max_records=limit.max_rows if isinstance(limit, ReadMaxRows) else None,
            cap=self._cap,
            fail_on_trim=self.config.fail_on_trim,
        )

    def reportLatestOffset(self) -> Offsets:  # noqa: N802 - Spark's name
        return latest_offsets(self._state())

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        self._cap = latest_offsets(self._state())

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        return [RangePartition(part) for part in stream_ranges(start, end)]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        return _read(self.config, partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the records stay until they are trimmed."""

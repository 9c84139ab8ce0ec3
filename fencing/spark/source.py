"""``spark.read.format("fencing")``: a topic read into a DataFrame through Spark 4's Python
Data Source API (``pyspark.sql.datasource``). Register it with :func:`fencing.spark.register`.

The read is planned when the DataFrame is loaded (Spark calls :meth:`FencingDataSource.schema`
then, in a Python process of the driver): the options are checked, the topic is read with
plain commands, and the ranges ``[starting, ending)`` are fixed with each partition's
incarnation. Every action on the DataFrame reads that snapshot; rows written later are read
by a DataFrame loaded later. Tasks (:mod:`.scan`) check each page against the plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
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

from ..errors import InvalidArgument
from .plan import Range, parse_options, plan_ranges, topic_state
from .scan import ScanConfig, read_range

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
    ]
)


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

    Options: ``url`` (default ``FENCING_REDIS_URL``), ``namespace`` (default
    ``FENCING_NAMESPACE``), ``topic`` (required), ``startingOffsets`` and ``endingOffsets``
    ("earliest", "latest" or JSON of partition numbers to offsets; a partition left out of
    the JSON reads from the earliest, up to the latest), ``failOnTrim`` ("true": asking for
    offsets already trimmed raises :class:`~fencing.OffsetOutOfRange` naming them and the
    first retained offset; "false": the read starts at the first retained offset). Bad
    options raise at ``load()``. Columns: topic, partition, offset, key, value, headers,
    epoch, producer_id, timestamp. A read writes nothing to Redis.

    The snapshot is fixed at ``load()``: rows appended later are not read, and a topic
    deleted and made again before the read raises :class:`~fencing.StateLost` in the tasks.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._options = parse_options(options)
        self._plan: tuple[ScanConfig, list[Range]] | None = None

    @classmethod
    def name(cls) -> str:
        return "fencing"

    def schema(self) -> StructType:
        self._planned()
        return SCHEMA

    def _planned(self) -> tuple[ScanConfig, list[Range]]:
        if self._plan is None:
            options = self._options
            url, namespace, state = topic_state(options)
            config = ScanConfig(url, namespace, options.topic, options.fail_on_trim)
            self._plan = (config, plan_ranges(options, state))
        return self._plan

    def reader(self, schema: StructType) -> FencingReader:
        if schema != SCHEMA:
            raise InvalidArgument(
                "the fencing source has a fixed schema (topic, partition, offset, key, value, "
                "headers, epoch, producer_id, timestamp): do not set another one with "
                ".schema(...); select or cast the columns after load()"
            )
        config, ranges = self._planned()
        return FencingReader(config, ranges)


class FencingReader(DataSourceReader):
    """Reads the planned ranges: one Spark partition per range."""

    def __init__(self, config: ScanConfig, ranges: list[Range]) -> None:
        self.config = config
        self.ranges = ranges

    def partitions(self) -> list[InputPartition]:
        return [RangePartition(part) for part in self.ranges]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            # Spark reads one partition of its own when none was planned (nothing to read).
            return iter(())
        return read_range(self.config, partition.range)

"""``df.writeStream.format("fencing")`` and ``df.write.format("fencing")``: rows into a topic,
exactly once, through Spark 4's Python Data Source API.

The same scripts as :class:`~fencing.spark.ForeachBatchSink` (one dedupe path): every row is
deduplicated on (app id, query id, batch id, Spark partition, its index in the partition)
with its chain hash. Spark gives the driver no call before a micro-batch's tasks run, so
each task begins the batch itself on every topic partition (idempotent: the first begins,
the others replay), reading the query and batch ids from the local properties Spark sets on
a micro-batch's jobs; :meth:`FencingStreamWriter.commit` marks the batch finished once every
task succeeded, and a replay of a finished batch writes nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from .. import _protocol as protocol
from .. import _telemetry as telemetry
from .._keys import validate_name
from .._protocol.sink import NEW_LINEAGE_HINT, Lineage
from .._sync.client import Client
from .._sync.context import context_of
from .._sync.metadata import metadata_of
from ..errors import (
    CheckpointReset,
    InvalidArgument,
    InvalidArgumentType,
    NondeterministicBatch,
    SinkError,
    StateLost,
)
from . import progress
from .rows import RowLayout, arrow_rows
from .writer import (
    SinkConfig,
    batch_totals,
    begin_batch,
    forget,
    shared_producer,
    stored_points,
    verify_partition,
    write_batches,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

log = logging.getLogger("fencing.spark.sink")

#: The local properties Spark sets on the jobs of a streaming query's micro-batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

#: The sink's options; Spark's own (checkpointLocation, path) are passed along and ignored.
OPTIONS = (
    "url",
    "namespace",
    "topic",
    "appId",
    "partitions",
    "newLineage",
    "sourceColumns",
    "sourceNamespace",
)
_SPARKS_OWN = ("checkpointlocation", "path", "queryname")
#: The input columns the sink reads, as Spark's Kafka sink names them; others are ignored.
COLUMNS = ("value", "key", "headers", "partition")


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The sink's parsed options."""

    topic: str
    app_id: str
    url: str | None = None
    namespace: str | None = None
    partitions: int | None = None
    new_lineage: bool = False
    source_columns: tuple[str, str, str] | None = None
    source_namespace: str | None = None


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """The sink's options, checked without I/O.

    >>> parse_sink_options({"topic": "events", "appid": "etl"}).app_id
    'etl'
    """
    known = {name.lower(): name for name in OPTIONS}
    unknown = sorted(n for n in options if n.lower() not in known and n.lower() not in _SPARKS_OWN)
    if unknown:
        raise InvalidArgument(
            f"the fencing sink has no option {', '.join(map(repr, unknown))}; its options are "
            f"{', '.join(OPTIONS)}"
        )
    got = {known[n.lower()]: v for n, v in options.items() if n.lower() in known}
    for needed, example in (("topic", "'events'"), ("appId", "'etl'")):
        if not got.get(needed):
            raise InvalidArgument(
                f"the fencing sink needs the option {needed}: .option({needed!r}, {example})"
                + (
                    " names this pipeline's lineage (one streaming query, one checkpoint, at a "
                    "time)"
                    if needed == "appId"
                    else ""
                )
            )
    partitions = None
    if got.get("partitions"):
        raw = got["partitions"].strip()
        if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
            raise InvalidArgument(f"partitions must be a whole number >= 1, got {raw!r}")
        partitions = int(raw)
    new = got.get("newLineage", "false").strip().lower()
    if new not in ("true", "false"):
        raise InvalidArgument(f"newLineage must be 'true' or 'false', got {got['newLineage']!r}")
    source_columns = None
    if got.get("sourceColumns"):
        names = tuple(n.strip() for n in got["sourceColumns"].split(","))
        if len(names) != 3 or not all(names):
            raise InvalidArgument(
                "sourceColumns names the input columns that hold each row's source topic, "
                "partition and offset, in that order, comma-separated: "
                f".option('sourceColumns', 'source_topic,source_partition,source_offset'), "
                f"got {got['sourceColumns']!r}"
            )
        source_columns = (names[0], names[1], names[2])
    return SinkOptions(
        source_columns=source_columns,
        source_namespace=validate_name("sourceNamespace", got["sourceNamespace"])
        if got.get("sourceNamespace")
        else None,
        topic=validate_name("topic", got["topic"]),
        app_id=validate_name("appId", got["appId"]),
        url=got.get("url") or None,
        namespace=got.get("namespace") or None,
        partitions=partitions,
        new_lineage=new == "true",
    )


def layout_of(schema: StructType, source: tuple[str, str, str] | None = None) -> RowLayout:
    """Where the sink's columns sit in the input rows (with ``source``, the columns of each
    row's source topic, partition and offset), checked against their types."""
    from pyspark.sql import types  # noqa: PLC0415 - PySpark is an optional extra

    names = [f.name for f in schema.fields]
    fields = {f.name: f.dataType for f in schema.fields}
    text = (types.StringType, types.BinaryType)
    whole = (types.IntegerType, types.LongType, types.ShortType, types.ByteType)

    def column(name: str, kinds: tuple[type, ...], what: str) -> int | None:
        if name not in fields:
            return None
        if names.count(name) > 1:
            raise InvalidArgument(f"the input has several columns named {name!r}: alias them")
        if not isinstance(fields[name], kinds):
            raise InvalidArgumentType(
                f"the sink's {name} column is a {fields[name].simpleString()} column; it must "
                f"be {what}: cast it in the query"
            )
        return names.index(name)

    value = column("value", text, "string or binary")
    if value is None:
        raise InvalidArgument(
            f"the fencing sink writes the column value (string or binary), which the input "
            f"does not have (columns: {', '.join(names) or 'none'}): select or alias one as "
            "value, for example df.selectExpr('to_json(struct(*)) AS value')"
        )
    headers = None
    if "headers" in fields:
        kind = fields["headers"]
        ok = (
            isinstance(kind, types.MapType)
            and isinstance(kind.keyType, types.StringType)
            and isinstance(kind.valueType, text)
        ) or (
            isinstance(kind, types.ArrayType)
            and isinstance(kind.elementType, types.StructType)
            and [f.name for f in kind.elementType.fields] == ["key", "value"]
            and isinstance(kind.elementType["key"].dataType, types.StringType)
            and isinstance(kind.elementType["value"].dataType, text)
        )
        if not ok:
            raise InvalidArgumentType(
                f"the sink's headers column is a {kind.simpleString()} column; it must be "
                "map<string,binary> (or string values), or array<struct<key:string,"
                "value:binary>> as Spark's Kafka sink takes"
            )
        headers = names.index("headers")
    positions = None
    if source is not None:
        found = []
        for name, kinds, what in zip(
            source, (text[:1], whole, whole), ("string", "an integer", "an integer"), strict=True
        ):
            at = column(name, kinds, what)
            if at is None:
                raise InvalidArgument(
                    f"sourceColumns names {name!r}, which the input does not have (columns: "
                    f"{', '.join(names)}): keep the fencing source's topic, partition and "
                    "offset columns under the names sourceColumns gives, for example "
                    "selectExpr('partition AS source_partition', ...)"
                )
            found.append(at)
        positions = (found[0], found[1], found[2])
    return RowLayout(
        source=positions,
        columns=tuple(names),
        value=value,
        key=column("key", text, "string or binary"),
        headers=(),
        partition=column("partition", whole, "an integer"),
        headers_map=headers,
    )


@dataclass
class FencingCommitMessage(WriterCommitMessage):
    """What one task did, for the driver's commit: its batch's ids, rows seen, written and
    skipped (written by an earlier attempt), and rows per topic partition."""

    query_id: str
    batch_id: int
    spark_partition: int
    rows: int = 0
    written: int = 0
    skipped: int = 0
    per_target: dict[int, int] = field(default_factory=dict)
    written_to: dict[int, int] = field(default_factory=dict)
    skipped_to: dict[int, int] = field(default_factory=dict)
    positions: dict[str, int] = field(default_factory=dict)


def write_task(
    config: SinkConfig,
    lineage: Lineage,
    new_lineage: bool,
    spark_partition: int,
    batches: Iterator[pa.RecordBatch],
) -> FencingCommitMessage:
    """One task: begin the batch everywhere, check a replay against what its earlier
    attempt stored, then write the partition's rows."""
    try:
        topic, _ = shared_producer(config)
        begun = begin_batch(topic, lineage, new_lineage=new_lineage)
        if any(b.status == "lineage" for b in begun):
            log.warning(
                "redis-fencing spark sink: app_id %r starts a new lineage with query %s "
                "(newLineage 'true')",
                lineage.app_id,
                lineage.query_id,
            )
        message = FencingCommitMessage(lineage.query_id, lineage.batch_id, spark_partition)
        if all(b.status == "done" for b in begun):
            return message  # finished before: nothing to write
        rows: Any = batches
        if stored_points(config, lineage, spark_partition):
            # An earlier attempt of this task wrote some rows: its rows must pass through
            # every point it stored before anything more is written.
            rows = list(batches)
            missed = list(verify_partition(config, lineage, spark_partition, arrow_rows(rows)))
            if missed:
                _, t, why = missed[0]
                raise NondeterministicBatch(
                    f"micro-batch {lineage.batch_id} of query {lineage.query_id} (app_id "
                    f"{lineage.app_id!r}) is replayed with other rows than its first attempt "
                    f"wrote: Spark partition {spark_partition}, topic partition {t}: {why}. "
                    "Nothing more of it was written. Make the batch deterministic (the same "
                    "source offsets, partitioning and row order within a partition)",
                    app_id=lineage.app_id,
                    query_id=lineage.query_id,
                    batch_id=lineage.batch_id,
                )
        for result in write_batches(config, lineage, spark_partition, rows):
            message.rows, message.written, message.skipped = (
                result.rows,
                result.written,
                result.skipped,
            )
            message.per_target = result.per_target
            message.written_to = result.written_to
            message.skipped_to = result.skipped_to
            message.positions = result.positions
        return message
    except StateLost:
        forget(config)  # the next task opens the topic again
        raise
    except CheckpointReset as exc:
        hint = "use a new appId, or .option('newLineage', 'true') once"
        raise CheckpointReset(
            str(exc).replace(NEW_LINEAGE_HINT, hint),
            app_id=exc.app_id,
            query_id=exc.query_id,
            batch_id=exc.batch_id,
        ) from None


def finish_batch(
    config: SinkConfig, lineage: Lineage, messages: list[FencingCommitMessage | None]
) -> None:
    """Mark the batch finished on every topic partition (the driver's commit).

    First, rows stored by Spark partitions this batch does not have (an earlier attempt of
    it had more: its partitioning changed between attempts) refuse the commit with
    :class:`~fencing.NondeterministicBatch`: their rows may be in the topic twice now.
    """
    client = Client.from_url(config.url, namespace=config.namespace)
    try:
        topic = client.topic(config.topic).open()
        meta = metadata_of(topic)
        context = context_of(client)
        driver = context.driver(context.settings.socket_timeout)
        keys = [meta.partition_keys(t).sink(lineage.app_id) for t in range(topic.partitions)]
        call = protocol.base.ReadCall(
            commands=tuple(("HKEYS", k) for k in keys),
            parse=lambda replies: sorted(
                {
                    int(f[1:])
                    for fields in replies
                    for f in (x.decode() for x in fields)
                    if f[:1] == "s" and f[1:].isdigit()
                }
            ),
        )
        stray = [sp for sp in driver.read(call, context.budget_default()) if sp >= len(messages)]
        if stray:
            raise NondeterministicBatch(
                f"micro-batch {lineage.batch_id} of query {lineage.query_id} (app_id "
                f"{lineage.app_id!r}) has {len(messages)} Spark partitions, but an earlier "
                f"attempt of it wrote rows from Spark partition {stray[0]}: its partitioning "
                "changed between attempts, and rows of it may now be in the topic twice. "
                "The batch is not marked finished. Make the batch deterministic (keep "
                "repartition() as it was), and check the topic",
                app_id=lineage.app_id,
                query_id=lineage.query_id,
                batch_id=lineage.batch_id,
            )
        totals = batch_totals([m for m in messages if m is not None])
        for t in range(topic.partitions):
            finish = protocol.sink.finish(
                meta.partition_keys(t),
                lineage,
                incarnation=meta.incarnation_of(t),
                rows=totals.rows.get(t, 0),
                written=totals.written.get(t, 0),
                skipped=totals.skipped.get(t, 0),
                positions=totals.positions,
            )
            driver.execute(finish, context.budget_default())
    finally:
        client.close()


def _report(lineage: Lineage, messages: list[FencingCommitMessage | None]) -> tuple[int, int]:
    """Log what the batch's tasks did; returns the rows written and skipped."""
    done = [m for m in messages if m is not None]
    written, skipped = sum(m.written for m in done), sum(m.skipped for m in done)
    log.info(
        "redis-fencing spark sink: app_id %r batch %d (query %s): %d rows, %d written, %d "
        "duplicates skipped, %d Spark partitions",
        lineage.app_id,
        lineage.batch_id,
        lineage.query_id,
        sum(m.rows for m in done),
        written,
        skipped,
        len(messages),
    )
    return written, skipped


def _task_context() -> Any:
    from pyspark import TaskContext  # noqa: PLC0415

    context = TaskContext.get()
    if context is None:  # pragma: no cover - write() runs in Spark tasks only
        raise SinkError("the fencing sink's write() runs in a Spark task only")
    return context


class FencingStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("fencing")``: each micro-batch's rows into a topic, exactly
    once. Made by :meth:`fencing.spark.source.FencingDataSource.streamWriter`.

    >>> query = (df.selectExpr("CAST(id AS STRING) AS key", "payload AS value")
    ...          .writeStream.format("fencing")
    ...          .option("url", "redis://localhost:6379/0")
    ...          .option("topic", "events").option("appId", "etl")
    ...          .option("checkpointLocation", "/data/ck/etl")
    ...          .start())                                        # doctest: +SKIP
    """

    def __init__(self, config: SinkConfig, options: SinkOptions) -> None:
        self.config = config
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FencingCommitMessage:
        context = _task_context()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        if not query_id or batch_id is None:
            raise SinkError(
                "the fencing stream sink's task has no streaming query or batch id (Spark sets "
                "them on a micro-batch's jobs): write with df.writeStream.format('fencing')",
                app_id=self.options.app_id,
            )
        lineage = Lineage(self.options.app_id, query_id, int(batch_id), 0)
        return write_task(
            self.config, lineage, self.options.new_lineage, context.partitionId(), iterator
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        found = [m for m in messages if isinstance(m, FencingCommitMessage)]
        if not found:
            return  # no task ran: nothing was begun
        lineage = Lineage(self.options.app_id, found[0].query_id, batchId, 0)
        done: list[FencingCommitMessage | None] = list(found)
        with telemetry.spark_batch_span(self.config.topic, lineage) as span:
            finish_batch(self.config, lineage, done)
            written, skipped = _report(lineage, done)
            # This process is a Python worker of Spark's: the driver's listener counts.
            progress.record(lineage.query_id, batchId, self.config.topic, written, skipped)
            span.set_attribute(telemetry.OUTCOME, "replayed" if skipped else "written")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        log.warning(
            "redis-fencing spark sink: app_id %r batch %d aborted: rows its tasks wrote stay, "
            "and the batch's replay writes the rest once",
            self.options.app_id,
            batchId,
        )


class FencingBatchWriter(DataSourceArrowWriter):
    """``df.write.format("fencing")``: a DataFrame's rows into a topic; a task retried by
    Spark writes none of its rows twice. Each save is its own lineage, deduplicated under an
    app id of its own (``<appId>.w<16 hex>``), so that saves running at once under one
    ``appId`` never touch each other's state; saving the same DataFrame again appends it
    again. Each save leaves its small dedupe record on every partition of the topic.

    >>> (df.selectExpr("payload AS value").write.format("fencing")
    ...    .option("topic", "events").option("appId", "backfill")
    ...    .mode("append").save())                                # doctest: +SKIP
    """

    def __init__(self, config: SinkConfig, options: SinkOptions) -> None:
        self.config = config
        self.options = options
        save = uuid.uuid4().hex
        self.lineage = Lineage(f"{options.app_id}.w{save[:16]}", f"write-{save}", 0, 0)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FencingCommitMessage:
        context = _task_context()
        return write_task(self.config, self.lineage, True, context.partitionId(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        done = [m if isinstance(m, FencingCommitMessage) else None for m in messages]
        if any(m is not None for m in done):
            finish_batch(self.config, self.lineage, done)
        _report(self.lineage, done)


def sink_config(options: SinkOptions, schema: StructType) -> SinkConfig:
    """The tasks' configuration, resolved on the driver: the topic is opened (made with
    ``partitions`` if given and missing) so that a missing topic fails the query at its
    start, and the URL and namespace the driver uses go to every executor."""
    layout = layout_of(schema, options.source_columns)
    client = Client.from_url(options.url, namespace=options.namespace)
    try:
        client.topic(options.topic, options.partitions).open()
        return SinkConfig(
            client.settings.redis_url,
            client.namespace,
            options.topic,
            layout,
            500,
            1024 * 1024,
            10.0,
            options.source_namespace,
        )
    finally:
        client.close()

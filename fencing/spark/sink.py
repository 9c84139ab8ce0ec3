"""``ForeachBatchSink``: Structured Streaming micro-batches into a topic, exactly once.

The driver begins each micro-batch on every topic partition (checking the app's lineage and
the batch's Spark partition count), runs one Spark job whose tasks write their partition's
rows from the executors, then marks the batch finished. See :class:`ForeachBatchSink`.

Every job goes through the DataFrame API (``mapInArrow``; no ``sparkContext``, no RDD), so
the same code runs on a classic session and on Spark Connect, where the foreachBatch
function runs in a Python process beside the Connect server.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import _protocol as protocol
from .. import _telemetry as telemetry
from .. import errors as _errors
from .._keys import validate_name
from .._protocol.sink import Lineage
from .._sync.client import Client
from .._sync.context import context_of
from .._sync.metadata import metadata_of
from .._sync.topic import Topic
from .._validate import check_int
from ..errors import (
    InvalidArgument,
    InvalidArgumentType,
    SinkError,
    StateLost,
    UnknownTopic,
)
from .columns import SinkColumns, select_columns, source_columns_of
from .connect import connect_query_id, connect_root, connect_session_id, is_connect
from .probe import check_executors, executor_error, fail, worker_failure
from .rows import RowLayout
from .tasks import RESULT_SCHEMA, count_task, result_of, verify_task, write_task
from .writer import (
    SinkConfig,
    batch_totals,
    begin_batch,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: The local property Spark sets on the thread that runs a streaming query's batches.
QUERY_ID_PROPERTY = "sql.streaming.queryId"

_TASK_ERROR = re.compile(r"fencing\.errors\.(\w+): (.*?)(?:\n|$)")


@dataclass(frozen=True, slots=True)
class BatchMetrics:
    """What the sink did with one micro-batch.

    ``status`` is ``written`` (a first attempt), ``replayed`` (a batch begun before and not
    finished: rows an earlier attempt wrote were skipped) or ``skipped`` (the batch had
    finished before: nothing was written). ``rows`` counts the batch's rows, ``written`` the
    records appended now, ``duplicates`` the rows found already written.

    >>> df.writeStream.foreachBatch(sink).start().processAllAvailable()  # doctest: +SKIP
    >>> sink.last_batch.status, sink.last_batch.written             # doctest: +SKIP
    ('written', 1000)
    """

    app_id: str
    query_id: str
    batch_id: int
    status: str
    rows: int
    written: int
    duplicates: int
    spark_partitions: int
    seconds: float


class ForeachBatchSink:
    """A ``foreachBatch`` function that writes every row of a micro-batch to a topic
    exactly once, from the executors.

    >>> sink = ForeachBatchSink("redis://localhost:6379/0", "events", app_id="etl",
    ...                         value_col="payload", key_col="user")
    >>> query = (df.writeStream.foreachBatch(sink)                  # doctest: +SKIP
    ...          .option("checkpointLocation", "/data/ck/etl").start())
    >>> sink.last_batch                                             # doctest: +SKIP
    BatchMetrics(app_id='etl', query_id='…', batch_id=0, status='written', rows=1000, ...)

    Exactly once holds for a deterministic micro-batch (Spark's own contract for
    foreachBatch): a replayed batch must hold the same rows, in the same Spark partitions, in
    the same order within each. Rows are deduplicated on (app id, query id, batch id, Spark
    partition, the row's index in it) inside the append script, and each row's chain hash
    proves that a retry sees the rows the first attempt wrote; a batch that differs is
    refused with :class:`~fencing.NondeterministicBatch`, never written twice.

    Arguments:
        url: the Redis URL (None: ``FENCING_REDIS_URL``), on the driver and every executor.
        topic: the topic; created with ``partitions`` partitions if given and missing.
        app_id: names this pipeline's lineage: one streaming query (one checkpoint) at a
            time. A query with another id (a deleted or reset checkpoint) is refused with
            :class:`~fencing.CheckpointReset` unless ``new_lineage=True``.
        value_col: a string or binary column for the record value; None: the whole row as
            compact JSON.
        key_col: a string or binary column for the key (partitions by murmur2, as producers
            do). Rows without a key (and without ``partition_col``) go to topic partition
            ``spark_partition % partitions``.
        headers_cols: columns written as headers (name = column), as UTF-8 text unless binary.
        partition_col: an integer column naming the topic partition of each row.
        source_columns: the columns holding each row's source topic, partition and offset
            in a fencing topic (the ``fencing`` source's ``topic``, ``partition`` and
            ``offset``, renamed), as the data source sink's ``sourceColumns`` option: each
            record gets a message id of that position, and each finished batch records the
            highest source offsets, so a lost checkpoint resumes as a new lineage whose
            source starts with ``startingOffsets="afterSink:<topic>/<app_id>"``.
        source_namespace: the namespace of that source topic (None: the sink's).
        chunk_records, chunk_bytes: the most rows and bytes per append call (capped by the
            topic's limits).

    A batch begun before but not finished (the driver died mid-batch) is recomputed once
    before it is written again, to check that every Spark partition still passes through
    what its earlier attempt wrote: one more pass over that batch only.

    Under Spark Connect the sink is pickled with the client's session id and runs in the
    server's foreachBatch process: it finds its query's id among that session's active
    queries (run each ForeachBatchSink query from a session of its own if one session runs
    several at once), persists each batch while it counts its partitions and writes it, and
    its ``last_batch`` is set there, not on the client's object.

    Before its first batch, the sink runs a one-row job that imports the library on an
    executor: executors whose Python lacks it (``PYSPARK_PYTHON`` not set, the package not
    shipped) fail the batch with :class:`~fencing.ConfigurationError`, in one line that
    names their interpreter and error, before anything reaches Redis.
    """

    def __init__(  # noqa: PLR0917 - the positional order users know (url, topic, app_id)
        self,
        url: str | None,
        topic: str,
        app_id: str,
        value_col: str | None = None,
        key_col: str | None = None,
        headers_cols: Sequence[str] = (),
        partition_col: str | None = None,
        *,
        namespace: str | None = None,
        partitions: int | None = None,
        new_lineage: bool = False,
        source_columns: Sequence[str] | None = None,
        source_namespace: str | None = None,
        query_id: str | None = None,
        chunk_records: int = 500,
        chunk_bytes: int = 1024 * 1024,
        lease_ttl: float = 10.0,
    ) -> None:
        if url is not None and not isinstance(url, str):
            raise InvalidArgumentType(f"url must be a str or None, got {type(url).__name__}")
        self.url = url
        self.topic_name = validate_name("topic", topic)
        self.app_id = validate_name("app_id", app_id)
        for what, col in (("value_col", value_col), ("key_col", key_col)):
            if col is not None and (not isinstance(col, str) or not col):
                raise InvalidArgumentType(f"{what} must be a column name or None, got {col!r}")
        if partition_col is not None and (not isinstance(partition_col, str) or not partition_col):
            raise InvalidArgumentType(
                f"partition_col must be a column name or None, got {partition_col!r}"
            )
        if isinstance(headers_cols, str) or not all(isinstance(c, str) and c for c in headers_cols):
            raise InvalidArgumentType(
                f"headers_cols must be a sequence of column names, got {headers_cols!r}"
            )
        if not isinstance(new_lineage, bool):
            raise InvalidArgumentType(f"new_lineage must be a bool, got {new_lineage!r}")
        if query_id is not None and (not isinstance(query_id, str) or not query_id):
            raise InvalidArgumentType(f"query_id must be a non-empty str or None, got {query_id!r}")
        check_int("chunk_records", chunk_records, minimum=1)
        check_int("chunk_bytes", chunk_bytes, minimum=1)
        self.value_col = value_col
        self.key_col = key_col
        self.headers_cols = tuple(headers_cols)
        self.partition_col = partition_col
        self.source_columns = source_columns_of(source_columns)
        self.source_namespace = (
            None
            if source_namespace is None
            else validate_name("source_namespace", source_namespace)
        )
        self._columns = SinkColumns(
            value_col, key_col, self.headers_cols, partition_col, self.source_columns
        )
        self.namespace = namespace
        self.new_lineage = new_lineage
        self.query_id = query_id
        self.chunk_records = chunk_records
        self.chunk_bytes = chunk_bytes
        self.lease_ttl = float(lease_ttl)
        self._partitions = partitions
        self._client: Client | None = None
        self._topic: Topic | None = None
        self._executors_checked = False
        # Spark Connect: the session of the client that started the query (recorded when
        # foreachBatch pickles the sink), and the query id found for it.
        self._connect_session: str | None = None
        self._connect_query: str | None = None
        #: The metrics of the last micro-batch this sink handled (None before the first).
        #: Under Spark Connect the sink runs in the server's foreachBatch process: this is
        #: set there, not on the client's copy.
        self.last_batch: BatchMetrics | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What ``foreachBatch`` ships to Spark Connect's foreachBatch process: no client,
        and the id of this process's Connect session, in which the query will run."""
        state = dict(self.__dict__)
        state["_client"] = state["_topic"] = None
        state["_connect_session"] = self._connect_session or connect_session_id()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- driver side ---------------------------------------------------------------------------

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Write micro-batch ``batch_id`` (Spark calls this; so may a test)."""
        started = time.monotonic()
        check_int("batch_id", batch_id)
        query_id = self._query_id(df.sparkSession, batch_id)
        frame, layout = select_columns(df, self._columns)
        if not self._executors_checked:
            check_executors(df.sparkSession)  # before anything touches Redis
            self._executors_checked = True
        topic = self._open_topic()
        connect = is_connect(df.sparkSession)
        if connect:
            # Counting the partitions computes the batch there: kept for the jobs after.
            frame.persist()
        try:
            lineage = Lineage(self.app_id, query_id, batch_id, self._spark_partitions(frame))
            with telemetry.spark_batch_span(self.topic_name, lineage) as span:
                self._write(topic, frame, layout, lineage, started)
                assert self.last_batch is not None
                span.set_attribute(telemetry.OUTCOME, self.last_batch.status)
        finally:
            if connect:
                frame.unpersist()

    def _write(
        self, topic: Topic, frame: DataFrame, layout: RowLayout, lineage: Lineage, started: float
    ) -> None:
        """Begin the batch, verify a replay, write it from the executors, finish it."""
        query_id, batch_id = lineage.query_id, lineage.batch_id
        assert self._client is not None
        # Where the driver writes, resolved here: an executor's environment (its own
        # FENCING_REDIS_URL and FENCING_NAMESPACE, or none) is not the driver's.
        config = SinkConfig(
            self._client.settings.redis_url,
            self._client.namespace,
            self.topic_name,
            layout,
            self.chunk_records,
            self.chunk_bytes,
            self.lease_ttl,
            self.source_namespace,
        )
        begun = self._begin(topic, lineage)
        if all(b.status == "done" for b in begun):
            rows = sum(b.rows for b in begun)
            self._report(lineage, "skipped", (rows, 0, rows), started)
            return
        for b in begun:
            if b.status == "lineage":
                log.warning(
                    "redis-fencing spark sink: app_id %r starts a new lineage on topic %r with "
                    "query %s after query %s (it began batch %d; new_lineage=True): %s",
                    self.app_id,
                    self.topic_name,
                    query_id,
                    b.stored_query,
                    b.stored_batch,
                    "rows it already wrote are skipped by their message ids (source "
                    "positions), and a source started with startingOffsets="
                    f"'afterSink:{self.topic_name}/{self.app_id}' reads only what follows them"
                    if self.source_columns is not None
                    else "every row this query's source reads is written again, also rows "
                    "the old query wrote: start the source after what the old query read "
                    "(startingOffsets), or pass source_columns=",
                )
                break
        replay = any(b.status == "replay" for b in begun)
        if replay:
            job = frame.mapInArrow(partial(verify_task, config, lineage), RESULT_SCHEMA)
            missed = [tuple(m) for row in self._run(job) for m in json.loads(row[0])]
            if missed:
                sp, t, why = missed[0]
                raise _errors.NondeterministicBatch(
                    f"micro-batch {batch_id} of query {query_id} (app_id {self.app_id!r}) is "
                    f"replayed with other rows than its first attempt wrote: Spark partition "
                    f"{sp}, topic partition {t}: {why} ({len(missed)} such differences). "
                    "Nothing more of it was written. Make the batch deterministic (the same "
                    "source offsets, partitioning and row order within a partition)",
                    app_id=self.app_id,
                    query_id=query_id,
                    batch_id=batch_id,
                )
        job = frame.mapInArrow(partial(write_task, config, lineage), RESULT_SCHEMA)
        results = [result_of(row[0]) for row in self._run(job)]
        totals = batch_totals(results)
        meta = metadata_of(topic)
        for t in range(topic.partitions):
            done_before = begun[t].rows if begun[t].status == "done" else 0
            self._execute(
                protocol.sink.finish(
                    meta.partition_keys(t),
                    lineage,
                    incarnation=meta.incarnation_of(t),
                    rows=totals.rows.get(t, 0) + done_before,
                    written=totals.written.get(t, 0),
                    skipped=totals.skipped.get(t, 0),
                    positions=totals.positions,
                )
            )
        self._report(
            lineage,
            "replayed" if replay else "written",
            (
                sum(r.rows for r in results),
                sum(r.written for r in results),
                sum(r.skipped for r in results),
            ),
            started,
        )

    def _query_id(self, session: SparkSession, batch_id: int) -> str:
        """The streaming query's id: ``query_id=`` if given; on a classic session the local
        property Spark sets on the thread that runs the batch; under Spark Connect, the id
        of the query of the client's session that is running this batch."""
        if self.query_id:
            return self.query_id
        found: str | None
        if is_connect(session):
            if self._connect_query is None:
                # One foreachBatch process per query run: found once, kept for its batches.
                self._connect_query = connect_query_id(
                    connect_root(session, self._connect_session), batch_id
                )
            found = self._connect_query
        else:
            found = session.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not found:
            raise SinkError(
                "ForeachBatchSink runs as writeStream.foreachBatch(sink): no streaming query "
                "id is set on this thread. Outside a streaming query, pass query_id=",
                app_id=self.app_id,
                batch_id=batch_id,
            )
        return found

    def _spark_partitions(self, frame: DataFrame) -> int:
        """The number of Spark partitions of the batch, as the write tasks see them.

        A foreachBatch DataFrame stands on the RDD Spark planned for the batch, so its
        partitions are fixed. A classic session reads their number from that RDD, at no
        cost. Spark Connect has no RDD and ``mapInArrow`` does not say how many tasks a job
        has: there, a job of one tiny result per task counts them, over the batch that the
        caller persisted (it is computed once, for this count and the jobs after).
        """
        if not is_connect(frame.sparkSession):
            count: int = frame.rdd.getNumPartitions()
            return count
        from pyspark.sql import functions as sf  # noqa: PLC0415 - PySpark is an optional extra

        job = frame.select(sf.lit(0).alias("x")).mapInArrow(count_task, RESULT_SCHEMA)
        return max(1, len(self._run(job)))

    def _begin(self, topic: Topic, lineage: Lineage) -> list[protocol.sink.Begun]:
        """Begin the batch on every partition (see :func:`.writer.begin_batch`)."""
        try:
            return begin_batch(topic, lineage, new_lineage=self.new_lineage)
        except StateLost:
            self._topic = None  # the next batch opens the topic again
            raise

    def _run(self, rdd: Any) -> list[Any]:
        """Collect a job's small results; a sink error in a task is raised as itself."""
        try:
            return list(rdd.collect())
        except Exception as exc:
            found = _TASK_ERROR.search(str(exc))
            if found:
                kind = getattr(_errors, found.group(1), None)
                if isinstance(kind, type) and issubclass(kind, SinkError):
                    raise kind(found.group(2), app_id=self.app_id) from exc
                if isinstance(kind, type) and issubclass(kind, UnknownTopic):
                    # The topic went away while the batch ran (a forced delete).
                    raise kind(found.group(2), topic=self.topic_name) from exc
                if isinstance(kind, type) and issubclass(kind, InvalidArgument):
                    # Bad input met in a task (a null value, a partition out of range, a
                    # record over the limits): raised as itself, the Spark error chained.
                    raise kind(found.group(2)) from exc
            reason = worker_failure(str(exc))
            if reason is not None:
                # An executor without the library that the check before the first batch
                # did not meet (another node, a later executor): the same one line.
                log.debug("redis-fencing spark sink: a Python worker failed", exc_info=exc)
                fail(
                    executor_error(
                        reason,
                        outcome="tasks on other executors may have written their rows, and "
                        "the batch's replay writes the rest once",
                    )
                )
            raise

    def _report(
        self, lineage: Lineage, status: str, counts: tuple[int, int, int], started: float
    ) -> None:
        rows, written, dups = counts
        metrics = BatchMetrics(
            app_id=lineage.app_id,
            query_id=lineage.query_id,
            batch_id=lineage.batch_id,
            status=status,
            rows=rows,
            written=written,
            duplicates=dups,
            spark_partitions=lineage.partitions,
            seconds=time.monotonic() - started,
        )
        self.last_batch = metrics
        telemetry.spark_rows(self.topic_name, written, dups)
        log.info(
            "redis-fencing spark sink: app_id %r batch %d (query %s) %s: %d rows, %d written, "
            "%d duplicates skipped, %d Spark partitions, %.3fs",
            metrics.app_id,
            metrics.batch_id,
            metrics.query_id,
            status,
            rows,
            written,
            dups,
            metrics.spark_partitions,
            metrics.seconds,
        )

    def _open_topic(self) -> Topic:
        if self._topic is None:
            self._client = Client.from_url(self.url, namespace=self.namespace)
            self._topic = self._client.topic(self.topic_name, self._partitions).open()
        return self._topic

    def _execute(self, call: protocol.ScriptCall[Any]) -> Any:
        assert self._client is not None
        context = context_of(self._client)
        return context.driver(context.settings.socket_timeout).execute(
            call, context.budget_default()
        )

    def close(self) -> None:
        """Close the driver's client (executors keep theirs for the worker's life).

        >>> query.stop()                                                # doctest: +SKIP
        >>> sink.close()
        """
        if self._client is not None:
            self._client.close()
            self._client = self._topic = None

    def __repr__(self) -> str:
        return f"<fencing.spark.ForeachBatchSink topic={self.topic_name!r} app_id={self.app_id!r}>"

"""The Spark sink on a real local PySpark (``local[2,4]``: a failed task is retried), against
both servers. Every test ends by reading the topic back from Redis: each row exactly once.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import redis

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

from pyspark import TaskContext  # noqa: E402
from pyspark.errors import StreamingQueryException  # noqa: E402
from pyspark.sql import functions as sf  # noqa: E402
from pyspark.sql.types import StringType  # noqa: E402

import fencing  # noqa: E402
from fencing.spark import ForeachBatchSink  # noqa: E402
from fencing.spark import sink as sink_module  # noqa: E402

from ..conftest import ServerInfo  # noqa: E402
from ..support.logs import topic_values  # noqa: E402
from ..support.polling import wait_until  # noqa: E402
from ..support.spark import duplicates  # noqa: E402

ROWS = 3000
#: The most rows per Arrow batch that a ``mapInArrow`` task receives.
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"


def _write_inputs(folder: Path, files: int, per_file: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    values = []
    for f in range(files):
        with open(folder / f"part-{f:03d}.json", "w") as out:
            for i in range(per_file):
                v = f"f{f}-r{i}"
                values.append(v)
                out.write(json.dumps({"id": f * per_file + i, "v": v}) + "\n")
    return values


#: Rows per input file (one Spark partition each), and the row where attempt 0 fails.
PER_FILE, FAIL_AT = 20_000, 15_000


def fail_on_first_attempt(url: str, namespace: str) -> Any:
    """A UDF that raises mid-partition on attempt 0 of its task (upstream of the sink),
    once the sink has written some of the rows before it: the attempt fails with part of
    its partition written."""

    def udf(row_id: int) -> str:
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and row_id % PER_FILE == FAIL_AT:
            earlier = range(row_id - FAIL_AT, row_id)
            with fencing.Client.from_url(url, namespace=namespace) as client:
                wait_until(
                    lambda: any(int(v[1:]) in earlier for v in topic_values(client, "events")),
                    timeout=60,
                    what=f"rows before {row_id} written",
                )
            raise RuntimeError(f"injected failure at row {row_id} on attempt 0")
        return f"v{row_id}"

    return udf


def always_fail_partition_2(row_id: int) -> str:
    """A UDF that raises in Spark partition 2 on every attempt, after some rows."""
    ctx = TaskContext.get()
    if ctx is not None and ctx.partitionId() == 2 and row_id % 1000 == 700:
        raise RuntimeError("injected failure in partition 2")
    return f"v{row_id}"


@pytest.mark.one_server
def test_a_task_failing_upstream_midway_on_its_first_attempt_writes_every_row_once(
    spark: Any,
    client: fencing.Client,
    namespace: str,
    server: ServerInfo,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    # Rows reach the sink's tasks in Arrow batches of 1,000 here, once the UDF's worker and
    # the JVM have passed them on (each through a buffer of 64 KiB): a partition failing at
    # its row 15,000, once rows before it are written, fails with part of it written.
    spark.conf.set(ARROW_BATCH, "1000")
    request.addfinalizer(lambda: spark.conf.unset(ARROW_BATCH))
    _write_inputs(tmp_path / "in", files=3, per_file=PER_FILE)
    schema = "id LONG, v STRING"
    udf = sf.udf(fail_on_first_attempt(server.url, namespace), StringType())
    sink = ForeachBatchSink(
        server.url,
        "events",
        app_id="etl",
        value_col="out",
        key_col="v",
        namespace=namespace,
        partitions=3,
        chunk_records=100,
    )
    stream = (
        spark.readStream.schema(schema)
        .json(str(tmp_path / "in"))
        .withColumn("out", udf(sf.col("id")))
    )
    query = (
        stream.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None
    values = topic_values(client, "events")
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(3 * PER_FILE))
    assert duplicates(values) == {}
    batch = sink.last_batch
    assert batch is not None and batch.rows == 3 * PER_FILE
    # The first attempts wrote rows before they failed: their retries found them written.
    assert batch.duplicates > 0
    assert batch.written == 3 * PER_FILE - batch.duplicates


def test_a_reset_checkpoint_under_the_same_app_id_is_refused_with_a_clear_error(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    _write_inputs(tmp_path / "in", files=2, per_file=200)

    def run(new_lineage: bool = False) -> Any:
        sink = ForeachBatchSink(
            server.url,
            "events",
            app_id="etl",
            value_col="v",
            namespace=namespace,
            partitions=2,
            new_lineage=new_lineage,
        )
        query = (
            spark.readStream.schema("id LONG, v STRING")
            .json(str(tmp_path / "in"))
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(240)
        return query

    first = run()
    assert first.exception() is None
    assert len(topic_values(client, "events")) == 400
    shutil.rmtree(tmp_path / "ck")  # the checkpoint is lost: a new query id, batch ids from 0

    refused = run()
    error = str(refused.exception())
    assert "CheckpointReset" in error
    assert f"but this is query {refused.id}" in error
    assert "pass a new app_id, or new_lineage=True" in error
    assert len(topic_values(client, "events")) == 400  # nothing was written

    # Asked for explicitly, a new lineage writes its batches (here: the same files again).
    again = run(new_lineage=True)
    assert again.exception() is None
    assert len(topic_values(client, "events")) == 800


def events_sink(server: ServerInfo, namespace: str) -> ForeachBatchSink:
    """A sink of app 'etl', query 'query-1', to the 4 partitions of topic 'events'."""
    return ForeachBatchSink(
        server.url,
        "events",
        app_id="etl",
        value_col="v",
        namespace=namespace,
        partitions=4,
        query_id="query-1",
        chunk_records=100,
    )


def _batch(spark: Any, partitions: int) -> Any:
    return (
        spark.range(0, ROWS, numPartitions=partitions)
        .withColumn("v", sf.concat(sf.lit("v"), sf.col("id").cast("string")))
        .select("id", "v")
    )


def test_a_replay_with_another_partitioning_is_refused_or_deduplicated_never_doubled(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for this sequence of five batches: redis")

    def sink() -> ForeachBatchSink:
        return events_sink(server, namespace)

    # The first attempt of batch 7 dies midway: partition 2 fails on every attempt, so the
    # job fails after partitions 0 and 1 (and part of 2) were written; the driver never
    # marked the batch finished.
    udf = sf.udf(always_fail_partition_2, StringType())
    first = _batch(spark, 3).withColumn("v", udf(sf.col("id")))
    with pytest.raises(Exception, match="injected failure in partition 2"):
        sink()(first, 7)
    written = topic_values(client, "events")
    assert 2000 <= len(written) < ROWS
    assert duplicates(written) == {}

    # Replayed with another partition count: refused before any write.
    with pytest.raises(fencing.NondeterministicBatch, match="first written with 3 Spark"):
        sink()(_batch(spark, 5), 7)
    # Replayed with the same count but other rows in each partition (hash partitioning
    # instead of ranges): the replay's check finds it before any write.
    reshuffled = _batch(spark, 3).repartition(3, "v")
    with pytest.raises(fencing.NondeterministicBatch, match="replayed with other rows"):
        sink()(reshuffled, 7)
    assert sorted(topic_values(client, "events")) == sorted(written)

    # The same partitioning: the rest is written, once.
    done = sink()
    done(_batch(spark, 3), 7)
    values = topic_values(client, "events")
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(ROWS))
    assert done.last_batch is not None
    assert done.last_batch.status == "replayed"
    assert done.last_batch.duplicates == len(written)

    # Once finished, a replay of the batch writes nothing, whatever its partitioning.
    late = sink()
    late(_batch(spark, 6), 7)
    assert late.last_batch is not None and late.last_batch.status == "skipped"
    assert late.last_batch.duplicates == ROWS
    assert sorted(topic_values(client, "events")) == sorted(values)


def test_the_whole_row_as_json_with_keys_headers_and_partition_column(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    df = (
        spark.range(0, 40, numPartitions=2)
        .withColumn("user", sf.concat(sf.lit("u"), (sf.col("id") % 3).cast("string")))
        .withColumn("p", (sf.col("id") % 2).cast("int"))
    )
    sink = ForeachBatchSink(
        server.url,
        "rows",
        app_id="etl",
        headers_cols=("user",),
        partition_col="p",
        namespace=namespace,
        partitions=2,
        query_id="q",
    )
    sink(df, 0)
    topic = client.topic("rows")
    for p in (0, 1):
        records = topic.reader(partition=p, start_offset=0).read(max_records=100)
        assert len(records) == 20
        for record in records:
            row = json.loads(record.value)
            assert row["p"] == p
            assert record.headers == {"user": row["user"].encode()}
    keyed = ForeachBatchSink(
        server.url,
        "keyed",
        app_id="etl",
        value_col="user",
        key_col="user",
        namespace=namespace,
        partitions=4,
        query_id="q",
    )
    keyed(df, 0)
    t = client.topic("keyed")
    for p in range(4):
        for record in t.reader(partition=p, start_offset=0).read(max_records=100):
            assert record.key is not None and t.partition_for(record.key) == p


def test_bad_columns_are_refused_before_any_write(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    df = _batch(spark, 2)
    common: dict[str, Any] = {"namespace": namespace, "partitions": 1, "query_id": "q"}
    with pytest.raises(fencing.InvalidArgument, match="'nope' is not a column"):
        ForeachBatchSink(server.url, "bad", "etl", value_col="nope", **common)(df, 0)
    with pytest.raises(fencing.InvalidArgumentType, match="'id' is a bigint column"):
        ForeachBatchSink(server.url, "bad", "etl", value_col="id", **common)(df, 0)
    with pytest.raises(fencing.InvalidArgumentType, match="partition_col"):
        ForeachBatchSink(server.url, "bad", "etl", value_col="v", partition_col="v", **common)(
            df, 0
        )
    with pytest.raises(fencing.SinkError, match="no streaming query id"):
        ForeachBatchSink(server.url, "bad", "etl", value_col="v", namespace=namespace)(df, 0)
    with pytest.raises(fencing.InvalidName):
        ForeachBatchSink(server.url, "bad", "bad app id")
    with pytest.raises(fencing.InvalidArgumentType):
        ForeachBatchSink(server.url, "bad", "etl", headers_cols="v")
    with pytest.raises(fencing.UnknownTopic):  # refused before anything, even the topic
        client.topic("bad").open()


def test_the_sink_is_refused_while_an_exclusive_producer_holds_the_topic(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    topic = client.topic("held", partitions=1)
    with topic.producer(access_mode=fencing.AccessMode.EXCLUSIVE) as holder:
        holder.send(b"mine")
        sink = ForeachBatchSink(
            server.url, "held", "etl", value_col="v", namespace=namespace, query_id="q"
        )
        with pytest.raises(Exception, match="ProducerBusy"):
            sink(_batch(spark, 1), 0)
        holder.send(b"still mine")
    assert topic_values(client, "held") == [b"mine", b"still mine"]


def test_a_deleted_topic_written_again_by_the_sink_skips_nothing(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    """A batch left unfinished (a task failed on every attempt) keeps the topic in use: a
    delete is refused. Forced, the topic goes with the sink's dedupe state; the same app,
    query and batch id written to the topic made again write every row (none is skipped
    as a duplicate of the deleted topic's rows), once; so do they after a finished batch
    (the Spark workers keep their shared producers for the next batch: the topic is in use
    until forced)."""
    if server.kind != "redis":
        pytest.skip("one server kind is enough for this sequence (a minute of Spark): redis")

    def sink() -> ForeachBatchSink:
        return events_sink(server, namespace)

    udf = sf.udf(always_fail_partition_2, StringType())
    with pytest.raises(Exception, match="injected failure in partition 2"):
        sink()(_batch(spark, 3).withColumn("v", udf(sf.col("id"))), 7)
    assert 0 < len(topic_values(client, "events")) < ROWS
    with pytest.raises(fencing.OwnershipConflict, match="Spark sink app 'etl' has a batch begun"):
        client.delete_topic("events")
    client.delete_topic("events", force=True)

    again = sink()
    again(_batch(spark, 3), 7)
    assert again.last_batch is not None and again.last_batch.duplicates == 0
    assert sorted(topic_values(client, "events")) == sorted(f"v{i}".encode() for i in range(ROWS))

    # Finished, but the workers' shared producers (kept for the next batch) live on.
    with pytest.raises(fencing.OwnershipConflict, match="shared producer"):
        client.delete_topic("events")
    client.delete_topic("events", force=True)
    fresh = sink()
    fresh(_batch(spark, 3), 7)
    assert fresh.last_batch is not None and fresh.last_batch.status != "skipped"
    assert sorted(topic_values(client, "events")) == sorted(f"v{i}".encode() for i in range(ROWS))


def test_the_executors_are_checked_once_per_sink_before_anything_reaches_redis(
    spark: Any,
    client: fencing.Client,
    namespace: str,
    server: ServerInfo,
    raw: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = _write_inputs(tmp_path / "in", files=3, per_file=100)
    keys_at_checks: list[list[bytes]] = []

    def check(on: Any) -> None:
        keys_at_checks.append(list(raw.scan_iter(f"{namespace}:*")))
        real_check(on)

    real_check = sink_module.check_executors
    monkeypatch.setattr(sink_module, "check_executors", check)
    sink = ForeachBatchSink(
        server.url, "events", app_id="etl", value_col="v", namespace=namespace, partitions=2
    )
    query = (
        spark.readStream.schema("id LONG, v STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None
    assert sink.last_batch is not None and sink.last_batch.batch_id == 2
    assert keys_at_checks == [[]]  # once, for three batches, before the topic was made
    assert sorted(topic_values(client, "events")) == sorted(v.encode() for v in values)


def test_a_sink_made_from_the_drivers_environment_writes_where_the_driver_says(
    spark: Any,
    client: fencing.Client,
    namespace: str,
    server: ServerInfo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``namespace=None`` (and ``url=None``) take the driver's FENCING_NAMESPACE (and
    FENCING_REDIS_URL) when the sink is made; the executors, whose environment is not the
    driver's (here the Spark workers were started before the variable was set), write into
    that same namespace, where the driver began the batch."""
    if server.kind != "redis":
        pytest.skip("one server kind is enough for the environment of the executors: redis")
    monkeypatch.setenv("FENCING_NAMESPACE", namespace)
    sink = ForeachBatchSink(
        server.url, "fromenv", app_id="etl", value_col="id", partitions=1, query_id="q"
    )
    sink(spark.range(0, 10, numPartitions=2).select(sf.col("id").cast("string")), 0)
    assert sorted(topic_values(client, "fromenv")) == sorted(b"%d" % i for i in range(10))
    with redis.Redis.from_url(server.url) as raw:
        assert raw.keys("fencing:*") == []  # nothing in the executors' own default namespace

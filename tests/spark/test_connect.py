"""The Spark sink under Spark Connect: the foreachBatch function runs in the server's own
Python process, which has no SparkContext; every job goes through the DataFrame API. Each
test reads the topic back from Redis: every row exactly once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("grpc", reason="Spark Connect's client needs grpcio (the spark extra)")
if shutil.which("java") is None:
    pytest.skip("Spark needs Java", allow_module_level=True)

import fencing
from fencing.spark import (
    ForeachBatchSink,
    probe,
)

from ..conftest import ServerInfo
from ..support.logs import topic_values
from ..support.spark import duplicates
from ..support.spark_cluster import ConnectServer

#: JVMs and query restarts take their time on a loaded machine.
pytestmark = [pytest.mark.timeout(300), pytest.mark.spark_cluster]

#: Rows per input file; each file is a Spark partition of the batch.
PER_FILE = 300

#: pyspark.sql.functions and friends take their Connect implementation while this is set.
CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with ConnectServer.start(tmp_path_factory.mktemp("spark-connect")) as server:
        yield server


@pytest.fixture(scope="module")
def spark(connect_server: ConnectServer) -> Iterator[Any]:
    """A Connect client session; Connect mode is on for this module only (the classic
    sessions of the other modules must not see it)."""
    before = os.environ.get(CONNECT_MODE)
    os.environ[CONNECT_MODE] = "1"
    from pyspark.sql.connect.session import SparkSession  # noqa: PLC0415

    session = SparkSession.builder.remote(connect_server.url).getOrCreate()
    yield session
    session.stop()
    if before is None:
        os.environ.pop(CONNECT_MODE, None)
    else:
        os.environ[CONNECT_MODE] = before


def _write_file(folder: Path, f: int) -> list[bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    values = []
    with open(folder / f"part-{f:03d}.json", "w") as out:
        for i in range(PER_FILE):
            values.append(b"f%d-r%d" % (f, i))
            out.write(json.dumps({"id": f * PER_FILE + i, "v": f"f{f}-r{i}"}) + "\n")
    return values


def failing_while(poison: str) -> Any:
    """A UDF that fails every attempt of Spark partition 1 while the file ``poison``
    exists (upstream of the sink): the batch's job fails, partition 0 written or not."""

    def udf(v: str) -> str:
        from pyspark import TaskContext  # noqa: PLC0415 - runs on an executor

        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == 1 and os.path.exists(poison):
            raise RuntimeError("injected failure in partition 1")
        return v

    return udf


def test_a_query_over_connect_writes_every_row_once_across_a_failed_batch_and_restarts(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    from pyspark.sql import functions as sf  # noqa: PLC0415 - Connect mode is on

    if server.kind != "redis":
        pytest.skip("one server kind is enough for three queries over Spark Connect: redis")
    inputs, checkpoint, poison = tmp_path / "in", tmp_path / "ck", tmp_path / "poison"
    expected = _write_file(inputs, 0) + _write_file(inputs, 1)
    poison.touch()
    udf = sf.udf(failing_while(str(poison)), "string")

    def run(new_lineage: bool = False) -> Any:
        sink = ForeachBatchSink(
            server.url,
            "events",
            app_id="etl",
            value_col="out",
            namespace=namespace,
            partitions=2,
            chunk_records=50,
            new_lineage=new_lineage,
        )
        query = (
            spark.readStream.schema("id LONG, v STRING")
            .json(str(inputs))
            .withColumn("out", udf(sf.col("v")))
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(Exception):
            query.awaitTermination(120)
        return query

    # Batch 0 fails: partition 1 on every attempt. Whatever partition 0 wrote stays, once.
    failed = run()
    assert "injected failure in partition 1" in str(failed.exception())
    written = topic_values(client, "events")
    assert len(written) < len(expected) and duplicates(written) == {}

    # Restarted from the checkpoint (the same query id, found by the sink in the server's
    # foreachBatch process): batch 0 replayed, the rest written once.
    poison.unlink()
    replayed = run()
    assert replayed.exception() is None and replayed.id == failed.id
    values = topic_values(client, "events")
    assert sorted(values) == sorted(expected) and duplicates(values) == {}

    # A reset checkpoint is a new query id: refused, naming it, and nothing written.
    shutil.rmtree(checkpoint)
    refused = run()
    error = str(refused.exception())
    assert "CheckpointReset" in error and f"but this is query {refused.id}" in error
    assert sorted(topic_values(client, "events")) == sorted(expected)


def test_a_sink_called_from_a_connect_client_writes_and_reports_task_errors_as_themselves(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo
) -> None:
    from pyspark.sql import functions as sf  # noqa: PLC0415 - Connect mode is on

    if server.kind != "redis":
        pytest.skip("one server kind is enough for the client's own calls: redis")
    df = spark.range(0, 500, numPartitions=3).select(
        sf.concat(sf.lit("v"), sf.col("id").cast("string")).alias("v")
    )
    sink = ForeachBatchSink(
        server.url, "direct", "etl", value_col="v", namespace=namespace, partitions=2,
        query_id="q",
    )  # fmt: skip
    sink(df, 0)
    assert sink.last_batch is not None
    assert (sink.last_batch.status, sink.last_batch.written) == ("written", 500)
    assert sink.last_batch.spark_partitions == 3
    sink(df, 0)  # finished before: nothing written
    assert sink.last_batch.status == "skipped"
    assert sorted(topic_values(client, "direct")) == sorted(b"v%d" % i for i in range(500))

    nulls = spark.range(0, 10, numPartitions=1).select(
        sf.when(sf.col("id") == 5, None).otherwise(sf.col("id").cast("string")).alias("v")
    )
    with pytest.raises(fencing.InvalidArgument, match="row 5 of Spark partition 0 has a null"):
        sink(nulls, 1)


def test_the_executor_check_runs_over_connect_and_reports_in_one_line(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe.check_executors(spark)  # the library imports there: nothing to say
    monkeypatch.setattr(probe, "EXECUTOR_MODULE", "fencing_not_installed")
    with pytest.raises(fencing.ConfigurationError) as info:
        probe.check_executors(spark)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("Spark executors cannot run redis-fencing: their Python ")
    assert "No module named 'fencing_not_installed'" in message


def test_the_fencing_connector_over_connect_copies_a_topic_once_and_reads_on_after_a_restart(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    # The tasks of a micro-batch started over Connect carry the query and batch ids the
    # data source sink reads from their local properties.
    import fencing.spark  # noqa: PLC0415

    if server.kind != "redis":
        pytest.skip("one server kind is enough for the connector over Spark Connect: redis")
    fencing.spark.register(spark)
    expected = []
    with client.topic("orders", partitions=2).producer() as producer:
        for i in range(300):
            producer.send(b"o%d" % i, key=b"k%d" % (i % 7))
            expected.append(b"o%d" % i)

    def run() -> Any:
        query = (
            spark.readStream.format("fencing")
            .option("url", server.url)
            .option("namespace", namespace)
            .option("topic", "orders")
            .option("maxRecordsPerTrigger", "120")
            .load()
            .select("key", "value")
            .writeStream.format("fencing")
            .option("url", server.url)
            .option("namespace", namespace)
            .option("topic", "copied")
            .option("partitions", "3")
            .option("appId", "copy")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        return query

    first = run()
    assert first.exception() is None
    values = topic_values(client, "copied")
    assert sorted(values) == sorted(expected) and duplicates(values) == {}
    with client.topic("orders").producer() as producer:
        producer.send(b"late", key=b"k0")
    again = run()
    assert again.exception() is None and again.id == first.id
    values = topic_values(client, "copied")
    assert sorted(values) == sorted([*expected, b"late"]) and duplicates(values) == {}

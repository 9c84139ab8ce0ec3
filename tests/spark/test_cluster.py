"""The Spark sink on a standalone cluster: a master and two workers on loopback, each
executor a JVM of its own. Every test reads the topic back from Redis: each row exactly
once, also when an executor dies in the middle of a write.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
if shutil.which("java") is None:
    pytest.skip("Spark needs Java", allow_module_level=True)

from pyspark import TaskContext
from pyspark.sql import functions as sf

import fencing
from fencing.spark import ForeachBatchSink

from ..conftest import ServerInfo
from ..support.logs import topic_values
from ..support.polling import wait_until
from ..support.spark import duplicates
from ..support.spark_cluster import StandaloneCluster

#: JVMs and an executor's replacement take their time on a loaded machine.
pytestmark = [pytest.mark.timeout(300), pytest.mark.spark_cluster]

#: Rows per input file (one Spark partition each), and the row at which attempt 0 of
#: partition 0 waits to be killed: far enough in that the rows before it have passed the
#: UDF's and the JVM's buffers (64 KiB each) and reached the sink.
PER_FILE, KILL_AT = 20_000, 15_000


@pytest.fixture(scope="module")
def spark(standalone: StandaloneCluster) -> Iterator[Any]:
    session = standalone.session()
    yield session
    session.stop()


def _write_inputs(folder: Path, files: int, per_file: int) -> list[bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    values = []
    for f in range(files):
        with open(folder / f"part-{f:03d}.json", "w") as out:
            for i in range(per_file):
                values.append(b"v%d" % (f * per_file + i))
                out.write(json.dumps({"id": f * per_file + i}) + "\n")
    return values


def _query(spark: Any, sink: ForeachBatchSink, folder: Path, column: Any) -> Any:
    return (
        spark.readStream.schema("id LONG")
        .json(str(folder / "in"))
        .withColumn("v", column)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(folder / "ck"))
        .trigger(availableNow=True)
        .start()
    )


def test_two_executors_write_every_row_once(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    expected = _write_inputs(tmp_path / "in", files=4, per_file=500)
    sink = ForeachBatchSink(
        server.url, "events", app_id="etl", value_col="v", namespace=namespace, partitions=3
    )
    value = sf.concat(sf.lit("v"), sf.col("id").cast("string"))
    query = _query(spark, sink, tmp_path, value)
    query.awaitTermination(240)
    assert query.exception() is None
    values = topic_values(client, "events")
    assert sorted(values) == sorted(expected) and duplicates(values) == {}
    assert sink.last_batch is not None and sink.last_batch.spark_partitions == 4


def stalling_first_attempt(url: str, namespace: str, marker: str) -> Any:
    """A UDF that, on attempt 0 of Spark partition 0 at row ``KILL_AT``, waits until rows
    before it are written, writes its Python worker's pid to ``marker`` and waits there
    to be killed with its executor."""

    def udf(row_id: int) -> str:
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and row_id == KILL_AT:
            with fencing.Client.from_url(url, namespace=namespace) as client:
                wait_until(
                    lambda: any(int(v[1:]) < KILL_AT for v in topic_values(client, "events")),
                    timeout=120,
                    what=f"rows before {KILL_AT} written",
                )
            Path(marker + ".tmp").write_text(str(os.getpid()))
            os.replace(marker + ".tmp", marker)
            wait_until(lambda: False, timeout=240, what="this executor to be killed")
        return f"v{row_id}"

    return udf


def _executor_of(pid: int) -> int:
    """The executor JVM (CoarseGrainedExecutorBackend) above a Python worker: its parent
    daemon's parent."""
    at = pid
    while at > 1:
        cmdline = Path(f"/proc/{at}/cmdline").read_bytes()
        if b"CoarseGrainedExecutorBackend" in cmdline:
            return at
        at = int(Path(f"/proc/{at}/stat").read_text().rsplit(")", 1)[1].split()[1])
    raise AssertionError(f"no executor JVM above Python worker {pid}")


def test_an_executor_killed_mid_batch_leaves_every_row_written_once(
    spark: Any,
    standalone: StandaloneCluster,
    client: fencing.Client,
    namespace: str,
    server: ServerInfo,
    tmp_path: Path,
) -> None:
    if server.kind != "redis":
        pytest.skip("one server kind is enough for killing an executor: redis")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        expected = _write_inputs(tmp_path / "in", files=2, per_file=PER_FILE)
        marker = tmp_path / "stalled"
        udf = sf.udf(stalling_first_attempt(server.url, namespace, str(marker)), "string")
        sink = ForeachBatchSink(
            server.url,
            "events",
            app_id="etl",
            value_col="v",
            namespace=namespace,
            partitions=2,
            chunk_records=100,
        )
        query = _query(spark, sink, tmp_path, udf(sf.col("id")))
        wait_until(marker.exists, timeout=180, what="a write task stalled mid-partition")
        executor = _executor_of(int(marker.read_text()))
        assert executor in standalone.executor_pids()
        os.kill(executor, signal.SIGKILL)
        query.awaitTermination(240)
        assert query.exception() is None
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    values = topic_values(client, "events")
    assert sorted(values) == sorted(expected) and duplicates(values) == {}
    batch = sink.last_batch
    assert batch is not None and batch.rows == len(expected)
    # The killed attempt had written rows: its retry on another executor found them.
    assert batch.duplicates > 0


def test_the_fencing_connector_reads_and_writes_from_executors_of_their_own(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    import fencing.spark  # noqa: PLC0415

    if server.kind != "redis":
        pytest.skip("one server kind is enough for the connector on a cluster: redis")
    fencing.spark.register(spark)
    expected = []
    with client.topic("orders", partitions=4).producer() as producer:
        for i in range(2000):
            producer.send(b"o%d" % i, partition=i % 4)
            expected.append(b"o%d" % i)
    query = (
        spark.readStream.format("fencing")
        .option("url", server.url)
        .option("namespace", namespace)
        .option("topic", "orders")
        .load()
        .select("value")
        .writeStream.format("fencing")
        .option("url", server.url)
        .option("namespace", namespace)
        .option("topic", "copied")
        .option("partitions", "2")
        .option("appId", "copy")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None
    values = topic_values(client, "copied")
    assert sorted(values) == sorted(expected) and duplicates(values) == {}

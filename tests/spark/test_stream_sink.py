"""``df.writeStream.format("fencing")`` and ``df.write.format("fencing")`` on a real local
PySpark (``local[2,4]``: failed tasks are retried): a fenced topic copied through Spark into
another exactly once, across task retries, a batch replayed after the query failed, a batch
replayed after its commit, a reset checkpoint; Kafka-style columns; bad input at start."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow", reason="the spark extra is not installed")

from pyspark import TaskContext
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as sf
from pyspark.sql.types import BinaryType

import fencing
import fencing.spark
from fencing._partitioner import partition_for_key

from ..conftest import ServerInfo
from ..support.logs import read_records, topic_values
from ..support.polling import wait_until
from ..support.spark import duplicates, spark_conf


@pytest.fixture(scope="module", autouse=True)
def _small_arrow_batches(spark: Any) -> Iterator[None]:
    """Small Arrow batches: the sink's tasks write while upstream rows are still computed."""
    with spark_conf(spark, {"spark.sql.execution.arrow.maxRecordsPerBatch": "200"}):
        yield


@pytest.fixture(autouse=True)
def _one_kind(server: ServerInfo) -> None:
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for the sink on Spark: redis")


def fill(client: fencing.Client, per_partition: int) -> list[bytes]:
    """Topic 'orders' of 2 partitions: values o<p>-<i>; the values, in partition order."""
    values = []
    with client.topic("orders", partitions=2).producer() as producer:
        for p in (0, 1):
            for i in range(per_partition):
                value = f"o{p}-{i}".encode()
                producer.send(value, partition=p)
                values.append(value)
    return values


def source(spark: Any, server: ServerInfo, namespace: str) -> Any:
    return (
        spark.readStream.format("fencing")
        .option("url", server.url)
        .option("namespace", namespace)
        .option("topic", "orders")
        .load()
    )


def start(frame: Any, server: ServerInfo, namespace: str, checkpoint: Path, **options: str) -> Any:
    """Run ``frame`` into topic 'events' (3 partitions) to the end of its input; the query."""
    writer = (
        frame.writeStream.format("fencing")
        .option("url", server.url)
        .option("namespace", namespace)
        .option("topic", "events")
        .option("partitions", "3")
        .option("appId", "copy")
        .option("checkpointLocation", str(checkpoint))
    )
    for name, value in options.items():
        writer = writer.option(name, value)
    query = writer.trigger(availableNow=True).start()
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(240)
    return query


def error_line(error: object, name: str) -> str:
    lines = [ln for ln in str(error).splitlines() if f"fencing.errors.{name}: " in ln]
    assert lines, str(error)
    return lines[-1]


def test_a_topic_is_copied_exactly_once_though_a_task_fails_midway_on_its_first_attempt(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    values = fill(client, per_partition=3000)
    marker = tmp_path / "written-at-failure"
    url = server.url

    def fail_once(value: bytes) -> bytes:
        # On its first attempt, the task of partition 0 fails at row 2,500, after the sink
        # wrote some of its rows: the marker records how many the target held then.
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and value == b"o0-2500":
            with fencing.Client.from_url(url, namespace=namespace) as c:
                wait_until(lambda: topic_values(c, "events"), timeout=60, what="rows written")
                marker.write_text(str(len(topic_values(c, "events"))))
            raise RuntimeError("injected failure on attempt 0")
        return value

    udf = sf.udf(fail_once, BinaryType(), useArrow=False)  # row by row, as rows arrive
    frame = source(spark, server, namespace).select(udf("value").alias("value"))
    query = start(frame, server, namespace, tmp_path / "ck")
    assert query.exception() is None
    assert int(marker.read_text()) > 0  # the retry met rows its first attempt wrote
    got = topic_values(client, "events")
    assert duplicates(got) == {}
    assert sorted(got) == sorted(values)
    # Rows without a key go to partition (Spark partition % 3), each in its source order.
    for p in (0, 1):
        assert [r.value for r in read_records(client, "events", p)] == [
            v for v in values if v.startswith(f"o{p}-".encode())
        ]


def test_a_batch_the_query_failed_in_is_completed_once_when_it_restarts(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    values = fill(client, per_partition=400)
    flag = tmp_path / "fail"
    flag.touch()

    def fail_partition_1(value: bytes) -> bytes:
        if value == b"o1-300" and flag.exists():
            raise RuntimeError("injected failure in partition 1")
        return value

    udf = sf.udf(fail_partition_1, BinaryType(), useArrow=False)
    frame = source(spark, server, namespace).select(udf("value").alias("value"))
    failed = start(frame, server, namespace, tmp_path / "ck")
    assert "injected failure in partition 1" in str(failed.exception())
    partial = topic_values(client, "events")
    assert 400 <= len(partial) < 800  # partition 0's task finished: its rows are written
    flag.unlink()
    again = start(frame, server, namespace, tmp_path / "ck")
    assert again.exception() is None
    got = topic_values(client, "events")
    assert duplicates(got) == {} and sorted(got) == sorted(values)


def test_a_batch_replayed_after_its_commit_writes_nothing(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    values = fill(client, per_partition=50)
    frame = source(spark, server, namespace).select("key", "value")
    first = start(frame, server, namespace, tmp_path / "ck")
    assert first.exception() is None
    assert sorted(topic_values(client, "events")) == sorted(values)
    # The driver died after the sink's commit and before Spark recorded the batch done:
    # Spark runs the batch again on restart.
    commits = tmp_path / "ck" / "commits"
    for done in commits.iterdir():
        done.unlink()
    replay = start(frame, server, namespace, tmp_path / "ck")
    assert replay.exception() is None
    assert [p["batchId"] for p in replay.recentProgress if p["numInputRows"]] == [0]
    assert sorted(topic_values(client, "events")) == sorted(values)


def test_a_reset_checkpoint_is_refused_and_new_lineage_writes_its_batches(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    fill(client, per_partition=20)
    frame = source(spark, server, namespace).select("value")
    assert start(frame, server, namespace, tmp_path / "ck").exception() is None
    refused = start(frame, server, namespace, tmp_path / "other")
    line = error_line(refused.exception(), "CheckpointReset")
    assert f"but this is query {refused.id}" in line
    assert "use a new appId, or .option('newLineage', 'true') once" in line
    assert len(topic_values(client, "events")) == 40  # nothing was written
    again = start(frame, server, namespace, tmp_path / "other2", newLineage="true")
    assert again.exception() is None
    assert len(topic_values(client, "events")) == 80


def test_keys_route_as_producers_do_and_headers_come_as_a_map_or_kafka_style_array(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    with client.topic("orders", partitions=1).producer() as producer:
        for i in range(6):
            producer.send(f"v{i}".encode(), key=f"k{i}".encode(), headers={"n": b"%d" % i})
    as_map = source(spark, server, namespace).select("key", "value", "headers")
    assert start(as_map, server, namespace, tmp_path / "a").exception() is None
    as_array = source(spark, server, namespace).select(
        "key",
        "value",
        sf.expr("array(named_struct('key', 'n', 'value', CAST('x' AS BINARY)))").alias("headers"),
    )
    assert start(as_array, server, namespace, tmp_path / "b", appId="copy2").exception() is None
    for p in range(3):
        for r in read_records(client, "events", p):
            assert r.key is not None and partition_for_key(r.key, 3) == p
            i = int(r.value[1:])
            assert r.key == f"k{i}".encode()
            assert dict(r.headers) in ({"n": b"%d" % i}, {"n": b"x"})
    assert len(topic_values(client, "events")) == 12


@pytest.mark.parametrize(
    ("columns", "options", "error", "words"),
    [
        (["offset"], {}, "InvalidArgument", "writes the column value"),
        (["value"], {"colour": "red"}, "InvalidArgument", "has no option 'colour'"),
    ],
)
def test_bad_columns_and_options_fail_the_query_before_any_write(
    spark: Any,
    client: fencing.Client,
    namespace: str,
    server: ServerInfo,
    tmp_path: Path,
    columns: list[str],
    options: dict[str, str],
    error: str,
    words: str,
) -> None:
    fill(client, per_partition=3)
    frame = source(spark, server, namespace).selectExpr(*columns)
    try:
        query = start(frame, server, namespace, tmp_path / "ck", **options)
        found: object = query.exception()
    except Exception as exc:  # refused when the query starts
        found = exc
    assert words in error_line(found, error)
    assert "events" not in client.topics() or topic_values(client, "events") == []


def test_a_batch_write_appends_each_row_once_and_refuses_overwrite(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    client.topic("events", partitions=2).open()
    rows = [json.dumps({"id": i}) for i in range(500)]
    frame = spark.createDataFrame([(r,) for r in rows], "value STRING").repartition(3)

    def save(mode: str) -> None:
        (
            frame.write.format("fencing")
            .option("url", server.url)
            .option("namespace", namespace)
            .option("topic", "events")
            .option("appId", "backfill")
            .mode(mode)
            .save()
        )

    save("append")
    got = topic_values(client, "events")
    assert duplicates(got) == {} and sorted(got) == sorted(r.encode() for r in rows)
    with pytest.raises(Exception) as caught:
        save("overwrite")
    assert "the fencing sink appends" in error_line(caught.value, "InvalidArgument")
    save("append")  # another write: its rows again
    assert len(topic_values(client, "events")) == 1000

"""A Spark micro-batch's rows, counted on the driver from its tasks' summaries: written the
first time, skipped when the batch is replayed; for ForeachBatchSink and for the fencing
data source's stream sink, whose commit runs outside the driver's process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from fencing import Client
from fencing.spark import ForeachBatchSink

from ..conftest import ServerInfo
from ..support.polling import wait_until
from ..support.telemetry import Recorded

ROWS = 200


def test_a_replayed_batch_counts_its_rows_skipped(
    spark: Any,
    client: Client,
    server: ServerInfo,
    namespace: str,
    recorded: Recorded,
    topic_name: str,
) -> None:
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for a Spark job: redis")
    frame = spark.range(0, ROWS, numPartitions=2).selectExpr("CAST(id AS STRING) AS v")

    def sink() -> ForeachBatchSink:
        return ForeachBatchSink(
            server.url, topic_name, app_id="etl", value_col="v", namespace=namespace,
            partitions=2, query_id="query-1",
        )  # fmt: skip

    sink()(frame, 0)
    sink()(frame, 0)  # the batch again: every row was written before
    assert sum(client.topic(topic_name).end_offsets().values()) == ROWS
    points = recorded.collect()
    on = {"fencing.topic": topic_name}
    assert points.by("fencing.spark.rows", "fencing.outcome") == {"written": ROWS, "skipped": ROWS}
    assert points.sum("fencing.spark.rows", {**on, "fencing.outcome": "skipped"}) == ROWS
    batches = recorded.spans("fencing.spark.batch")
    assert [(s.attributes or {}).get("fencing.outcome") for s in batches] == [
        "written",
        "skipped",
    ]
    assert (batches[0].attributes or {}).get("fencing.spark.batch_id") == 0


def test_streaming_queries_count_their_rows_in_the_drivers_process(
    spark: Any,
    client: Client,
    server: ServerInfo,
    namespace: str,
    recorded: Recorded,
    topic_name: str,
    tmp_path: Path,
) -> None:
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for a Spark job: redis")
    source = f"{topic_name}-in"
    with client.topic(source, partitions=2).producer() as producer:
        for i in range(ROWS):
            producer.send(b"%d" % i, partition=i % 2)
    where = {"url": server.url, "namespace": namespace}
    rows = spark.readStream.format("fencing").options(**where, topic=source).load()
    formatted, foreach = f"{topic_name}-format", f"{topic_name}-foreach"
    by_format = (
        rows.select("value").writeStream.format("fencing")
        .options(**where, topic=formatted, appId="by-format", partitions="2")
        .option("checkpointLocation", str(tmp_path / "a"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    by_format.awaitTermination()
    sink = ForeachBatchSink(
        server.url, foreach, app_id="by-foreach", value_col="value", namespace=namespace,
        partitions=2,
    )  # fmt: skip
    by_foreach = (
        rows.select("value").writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "b"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    by_foreach.awaitTermination()

    # The format sink's commit runs in a Python worker of Spark's: its counts reach this
    # process through the listener register() added, when Spark reports the progress.
    counted: dict[str, float] = {}

    def written(topic: str) -> float:
        for point in recorded.collect().matching("fencing.spark.rows"):
            assert point.attributes["fencing.outcome"] == "written"
            name = point.attributes["fencing.topic"]
            counted[name] = counted.get(name, 0) + point.value
        return counted.get(topic, 0)

    wait_until(lambda: written(formatted) == ROWS, timeout=60)
    assert counted == {formatted: ROWS, foreach: ROWS}

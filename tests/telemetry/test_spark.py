"""A Spark micro-batch's rows, counted on the driver from its tasks' summaries: written the
first time, skipped when the batch is replayed."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from fencing import Client
from fencing.spark import ForeachBatchSink

from ..conftest import ServerInfo
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

"""The Spark workers' shared producers are recorded in the sink state of the app they
write, on every topic partition (a shared producer registers on all of them), with the
producer id their records carry: what ``fencing status`` tells them apart by."""

from __future__ import annotations

from typing import Any

import pytest
import redis

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

import fencing  # noqa: E402
from fencing.spark import ForeachBatchSink  # noqa: E402

from ..conftest import ServerInfo  # noqa: E402


@pytest.mark.one_server
def test_the_workers_producers_are_recorded_as_the_apps_task_producers(
    spark: Any, client: fencing.Client, raw: redis.Redis, namespace: str, server: ServerInfo
) -> None:
    sink = ForeachBatchSink(
        server.url,
        "events",
        app_id="etl",
        value_col="v",
        namespace=namespace,
        partitions=3,
        query_id="query-1",
    )
    sink(spark.range(0, 40, numPartitions=2).selectExpr("concat('v', id) AS v"), 0)

    topic = client.topic("events")
    written: set[bytes] = set()
    for p in range(3):
        pk = client.keys.partition("events", p)
        recorded = {k[2:]: v for k, v in raw.hgetall(pk.sink("etl")).items() if k.startswith(b"w:")}
        # The workers keep their producers for the next batch: all live, all recorded.
        assert set(recorded) == set(raw.zrange(pk.shared, 0, -1))
        assert recorded
        written |= set(recorded.values())
        records = topic.reader(partition=p, start_offset=0).read(max_records=100)
        assert {str(r.producer_id).encode() for r in records} <= set(recorded.values())
    assert len(written) >= 1

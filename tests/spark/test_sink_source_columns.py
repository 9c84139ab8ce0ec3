"""``ForeachBatchSink(source_columns=...)`` on a real local PySpark: rows that name their
source position carry a message id of it, a finished batch records the highest positions,
and after a lost checkpoint a new lineage whose source starts ``afterSink`` writes what is
missing once, skipping by id the rows of the batch that failed midway."""

from __future__ import annotations

from typing import Any

import pytest
import redis

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from pyspark.sql import functions as sf

import fencing
from fencing._keys import Keys
from fencing.spark import ForeachBatchSink

from ..conftest import ServerInfo
from ..support.logs import read_records
from ..support.spark import sink_totals

SOURCE = ("src_topic", "src_partition", "src_offset")


def _read(spark: Any, server: ServerInfo, namespace: str, **options: str) -> Any:
    """Topic orders through the fencing source, its rows naming their position."""
    reader = (
        spark.read.format("fencing")
        .option("url", server.url)
        .option("namespace", namespace)
        .option("topic", "orders")
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load().selectExpr(
        "CAST(value AS STRING) AS value",
        "topic AS src_topic",
        "partition AS src_partition",
        "offset AS src_offset",
    )


def _sink(server: ServerInfo, namespace: str, query_id: str, new_lineage: bool) -> Any:
    return ForeachBatchSink(
        server.url,
        "events",
        app_id="etl",
        value_col="value",
        partition_col="src_partition",
        namespace=namespace,
        partitions=2,
        source_columns=SOURCE,
        new_lineage=new_lineage,
        query_id=query_id,
    )


@pytest.mark.one_server
def test_a_lost_checkpoint_resumes_after_the_positions_the_sink_recorded(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, raw: redis.Redis
) -> None:
    topic = client.topic("orders", partitions=2)
    with topic.producer() as producer:
        for i in range(20):
            producer.send(f"o{i % 2}-{i // 2}".encode(), partition=i % 2)
    incarnations = [raw.hget(Keys(namespace).partition("orders", p).meta, "inc") for p in (0, 1)]
    source = {p: f"{namespace}/orders/{inc.decode()}/{p}" for p, inc in enumerate(incarnations)}

    first = _sink(server, namespace, "query-1", new_lineage=False)
    first(_read(spark, server, namespace, endingOffsets='{"0": 6, "1": 4}'), 0)
    assert first.last_batch is not None
    assert (first.last_batch.written, first.last_batch.duplicates) == (10, 0)
    # Batch 1 fails midway: source partition 0's rows are written, partition 1's task fails.
    failing = _read(spark, server, namespace, startingOffsets='{"0": 6, "1": 4}').withColumn(
        "value",
        sf.when(sf.col("src_partition") == 1, sf.raise_error(sf.lit("injected"))).otherwise(
            sf.col("value")
        ),
    )
    with pytest.raises(Exception, match="injected"):
        first(failing, 1)
    first.close()
    assert sink_totals(raw, namespace, "events", 2, "etl").positions == {
        source[0]: 5,
        source[1]: 3,
    }

    # The checkpoint is lost: a new query id, its source after what the sink recorded.
    second = _sink(server, namespace, "query-2", new_lineage=True)
    second(_read(spark, server, namespace, startingOffsets="afterSink:events/etl"), 0)
    second.close()
    assert second.last_batch is not None
    assert (second.last_batch.status, second.last_batch.rows) == ("written", 10)
    assert (second.last_batch.written, second.last_batch.duplicates) == (6, 4)
    totals = sink_totals(raw, namespace, "events", 2, "etl")
    assert (totals.written, totals.skipped) == (16, 4)
    assert totals.positions == {source[0]: 9, source[1]: 9}
    for p in (0, 1):
        records = read_records(client, "events", p)
        assert [(r.value, r.message_id) for r in records] == [
            (f"o{p}-{i}".encode(), f"src:{source[p]}:{i}") for i in range(10)
        ]

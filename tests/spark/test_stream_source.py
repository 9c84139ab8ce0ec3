"""``spark.readStream.format("fencing")`` on a real local PySpark: every record read once
across micro-batches and restarts, the limit per trigger, a topic made again, trims."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow", reason="the spark extra is not installed")

from pyspark.errors import StreamingQueryException

import fencing
import fencing.spark

from ..conftest import ServerInfo
from ..support.logs import read_records


@pytest.fixture(autouse=True)
def _one_kind(server: ServerInfo) -> None:
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for the source on Spark: redis")


def send(topic: fencing.Topic, values: dict[int, list[str]]) -> None:
    with topic.producer() as producer:
        for p, vs in values.items():
            for v in vs:
                producer.send(v.encode(), partition=p)


def run(
    spark: Any, server: ServerInfo, namespace: str, checkpoint: Path, **options: str
) -> tuple[Any, list[tuple[int, int, bytes]]]:
    """Run the stream to the end of what is there now (Trigger.AvailableNow), collecting
    each micro-batch on the driver (a sink that restarts from a checkpoint); the query and
    the rows it read, as (partition, offset, value) in read order."""
    reader = (
        spark.readStream.format("fencing")
        .option("url", server.url)
        .option("namespace", namespace)
        .option("topic", "orders")
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    got: list[tuple[int, int, bytes]] = []

    def collect(df: Any, batch_id: int) -> None:
        got.extend((r.partition, r.offset, r.value) for r in df.collect())

    query = (
        reader.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(180)
    return query, got


def _error_line(query: Any, name: str) -> str:
    lines = [ln for ln in str(query.exception()).splitlines() if f"fencing.errors.{name}: " in ln]
    assert lines, str(query.exception())
    return lines[-1]


def test_every_record_is_read_once_across_batches_of_at_most_the_limit_and_a_restart(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    topic = client.topic("orders", partitions=2)
    send(topic, {0: [f"a{i}" for i in range(7)], 1: [f"b{i}" for i in range(3)]})
    query, got = run(spark, server, namespace, tmp_path / "ck", maxRecordsPerTrigger="4")
    assert query.exception() is None
    assert sorted(got) == sorted(
        [(0, i, f"a{i}".encode()) for i in range(7)] + [(1, i, f"b{i}".encode()) for i in range(3)]
    )
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [4, 4, 2]
    end = query.lastProgress["sources"][0]["endOffset"]
    assert '"offsets": {"0": 7, "1": 3}' in end

    # Restarted from its checkpoint, the query reads only what came after.
    send(topic, {0: ["a7"], 1: ["b3", "b4"]})
    again, more = run(spark, server, namespace, tmp_path / "ck", maxRecordsPerTrigger="4")
    assert again.exception() is None
    assert sorted(more) == [(0, 7, b"a7"), (1, 3, b"b3"), (1, 4, b"b4")]
    assert again.id == query.id


def test_starting_offsets_latest_and_per_partition(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    topic = client.topic("orders", partitions=2)
    send(topic, {0: ["a0", "a1", "a2"], 1: ["b0"]})
    _, got = run(spark, server, namespace, tmp_path / "a", startingOffsets='{"0": 2}')
    assert sorted(got) == [(0, 2, b"a2"), (1, 0, b"b0")]
    query, got = run(spark, server, namespace, tmp_path / "b", startingOffsets="latest")
    assert query.exception() is None and got == []


def test_a_topic_made_again_fails_the_query_from_its_checkpoint_with_state_lost(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    send(client.topic("orders", partitions=2), {0: ["a0"], 1: ["b0"]})
    _, got = run(spark, server, namespace, tmp_path / "ck")
    assert len(got) == 2
    client.delete_topic("orders", force=True)
    with fencing.Client.from_url(server.url, namespace=namespace) as again:
        send(again.topic("orders", partitions=2), {0: ["x0", "x1"], 1: ["y0", "y1"]})
    refused, got = run(spark, server, namespace, tmp_path / "ck")
    line = _error_line(refused, "StateLost")
    assert "partition 0 of topic 'orders' was made again" in line
    assert "new checkpoint location" in line
    # A new checkpoint reads the new history from its start.
    _, fresh = run(spark, server, namespace, tmp_path / "new")
    assert sorted(fresh) == [(0, 0, b"x0"), (0, 1, b"x1"), (1, 0, b"y0"), (1, 1, b"y1")]


def test_records_trimmed_before_the_query_read_them_fail_it_or_are_skipped(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    topic = client.topic("orders", partitions=1)
    send(topic, {0: ["a0", "a1"]})
    _, got = run(spark, server, namespace, tmp_path / "ck")
    assert [o for _, o, _ in got] == [0, 1]
    send(topic, {0: ["a2", "a3", "a4", "a5"]})
    topic.trim(0, before_offset=4)  # a2 and a3 go before the query read them
    refused, _ = run(spark, server, namespace, tmp_path / "ck")
    line = _error_line(refused, "OffsetOutOfRange")
    assert "still to read offsets 2 to 3 of partition 0 of topic 'orders'" in line
    assert "failOnTrim" in line
    assert [r.offset for r in read_records(client, "orders", 0)] == [4, 5]
    skipped, got = run(spark, server, namespace, tmp_path / "ck", failOnTrim="false")
    assert skipped.exception() is None
    assert got == [(0, 4, b"a4"), (0, 5, b"a5")]


def test_ending_offsets_are_refused_for_a_stream(
    spark: Any, client: fencing.Client, namespace: str, server: ServerInfo, tmp_path: Path
) -> None:
    client.topic("orders", partitions=1).open()
    refused, _ = run(spark, server, namespace, tmp_path / "ck", endingOffsets="latest")
    assert "endingOffsets applies to batch reads" in _error_line(refused, "InvalidArgument")

"""The Spark sinks' throughput on ``local[2]`` against naive foreachBatch sinks, one run.

Run from the repository root (needs the spark extra and Java 17)::

    .venv/bin/python -m bench.spark_sink            # 200,000 rows x 3 rounds
    .venv/bin/python -m bench.spark_sink --quick    # 50,000 rows x 2 rounds
    .venv/bin/python -m bench.spark_sink --stream   # also writeStream.format("fencing")

One throwaway local server, one SparkSession on ``local[2]``, one cached DataFrame of rows
(a 100-byte string value and a key) in 4 Spark partitions, written to topics of 4
partitions. Each round writes the same rows once through each sink, in an order that
alternates between rounds, each into a stream or topic of its own:

- ``ForeachBatchSink``: exactly once (dedupe state, chain hashes, begin/finish on the
  driver, the append script), chunks of 500 rows per call; one sink for the whole run, one
  micro-batch per round.
- ``write.format("fencing")``: the Data Source sink, the same scripts; each task begins the
  batch itself and the driver's commit finishes it. Rows reach it as Arrow batches.
- ``writeStream.format("fencing")`` (``--stream``): the same rows as a stream (parquet
  files read once with ``Trigger.AvailableNow``), against the pipelined sink below run as
  ``foreachBatch`` over the same stream.
- naive XADD: ``foreachPartition`` with one redis-py XADD per row (at least once: a retried
  task writes its rows again); ``--no-naive`` leaves it out.
- naive pipelined XADD: the same, pipelined 500 at a time (what a careful user writes).

The naive sinks write every row to one stream and route nothing; the exactly-once sinks
route each row to a topic partition by its key (Kafka's murmur2), as a keyed topic needs.
A warm-up write of a few rows through every sink comes first (Python workers started,
topics opened, the executors checked). Rows per second are the medians over rounds, wall
time of the whole write; ratios are of medians, against the pipelined sink of the same run.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import redis

import fencing.spark
from fencing.spark import ForeachBatchSink

from .common import server, spark_session, table


def naive_xadd(url: str, key: str, rows: Iterable[Any]) -> None:
    """One XADD per row."""
    r = redis.Redis.from_url(url)
    for row in rows:
        r.xadd(key, {"v": row[0], "k": row[1]})
    r.close()


def naive_pipelined(url: str, key: str, rows: Iterable[Any]) -> None:
    """XADD per row, pipelined 500 at a time."""
    r = redis.Redis.from_url(url)
    pipe = r.pipeline(transaction=False)
    for n, row in enumerate(rows, 1):
        pipe.xadd(key, {"v": row[0], "k": row[1]})
        if n % 500 == 0:
            pipe.execute()
    pipe.execute()
    r.close()


def stream_run(
    spark: Any, path: str, schema: Any, start: Callable[[Any], Any], checkpoint: str
) -> None:
    """Every row of the parquet files at ``path`` through the stream ``start`` begins,
    read once (``Trigger.AvailableNow``)."""
    stream = spark.readStream.schema(schema).parquet(path)
    query = start(stream.writeStream.option("checkpointLocation", checkpoint)).trigger(
        availableNow=True
    )
    query.start().awaitTermination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50,000 rows, 2 rounds")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--stream", action="store_true", help="also the streaming sinks")
    parser.add_argument("--no-naive", action="store_true", help="leave out XADD per row")
    args = parser.parse_args()
    n = args.rows or (50_000 if args.quick else 200_000)
    rounds = args.rounds or (2 if args.quick else 3)
    spark = spark_session()
    fencing.spark.register(spark)
    from pyspark.sql import functions as F  # noqa: PLC0415, N812

    def rows_of(count: int) -> Any:
        return spark.range(0, count, numPartitions=4).select(
            F.concat(F.col("id").cast("string"), F.lit(":"), F.lit("x" * 90)).alias("v"),
            (F.col("id") % 1000).cast("string").alias("k"),
        )

    df = rows_of(n).cache()
    df.count()
    warm = rows_of(400).cache()
    warm.count()
    tmp = tempfile.mkdtemp(prefix="bench-spark-sink-")
    as_kafka = df.select(F.col("v").alias("value"), F.col("k").alias("key"))
    if args.stream:
        as_kafka.write.parquet(f"{tmp}/rows")
    rates: dict[str, list[float]] = {}
    with server() as srv:
        url = srv.url
        namespace = "b" + uuid.uuid4().hex[:8]
        sink = ForeachBatchSink(
            url,
            "fenced",
            app_id="bench",
            value_col="v",
            key_col="k",
            namespace=namespace,
            partitions=4,
            query_id="bench",
        )
        batch_ids = iter(range(1 << 30))

        def fenced(batch: Any, rnd: int) -> None:
            sink(batch, next(batch_ids))

        def datasource(batch: Any, rnd: int) -> None:
            (
                batch.select(F.col("v").alias("value"), F.col("k").alias("key"))
                .write.format("fencing")
                .option("url", url)
                .option("namespace", namespace)
                .option("topic", f"ds{rnd}")
                .option("partitions", "4")
                .option("appId", "bench")
                .mode("append")
                .save()
            )

        def naive(batch: Any, rnd: int) -> None:
            key = f"naive{rnd}"
            batch.rdd.foreachPartition(lambda rows: naive_xadd(url, key, rows))

        def pipelined(batch: Any, rnd: int) -> None:
            key = f"pipe{rnd}"
            batch.rdd.foreachPartition(lambda rows: naive_pipelined(url, key, rows))

        def fenced_stream(batch: Any, rnd: int) -> None:
            stream_run(
                spark,
                f"{tmp}/rows",
                as_kafka.schema,
                lambda w: (
                    w.format("fencing")
                    .option("url", url)
                    .option("namespace", namespace)
                    .option("topic", f"st{rnd}")
                    .option("partitions", "4")
                    .option("appId", f"st{rnd}")
                ),
                f"{tmp}/ck-st{rnd}",
            )

        def pipelined_stream(batch: Any, rnd: int) -> None:
            stream_run(
                spark,
                f"{tmp}/rows",
                as_kafka.schema,
                lambda w: w.foreachBatch(lambda b, _i: pipelined(b, 1000 + rnd)),
                f"{tmp}/ck-ps{rnd}",
            )

        sinks: dict[str, Callable[[Any, int], None]] = {
            "fenced": fenced,
            "datasource": datasource,
            "pipelined": pipelined,
        }
        if not args.no_naive:
            sinks["naive"] = naive
        streams = {"stream": fenced_stream, "pipestream": pipelined_stream} if args.stream else {}
        for fn in sinks.values():
            fn(warm, -1)
        for rnd in range(rounds):
            order = list(sinks.items()) + list(streams.items())
            if rnd % 2:
                order.reverse()
            for name, fn in order:
                start = time.perf_counter()
                fn(df, rnd)
                rates.setdefault(name, []).append(n / (time.perf_counter() - start))
        check = redis.Redis.from_url(url)
        assert check.xlen("pipe0") == n
        sink.close()
    spark.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    base = med["pipelined"]
    print(f"Spark sinks, local[2], {n:,} rows of ~100 B in 4 partitions, {rounds} rounds (median)")
    rows: list[tuple[str, str, str, str, str]] = [
        (
            "ForeachBatchSink vs pipelined XADD (500)",
            f"{med['fenced']:,.0f} rows/s",
            f"{base:,.0f} rows/s",
            f"{med['fenced'] / base:.2f}x",
            ">= 1x",
        ),
        (
            'write.format("fencing") vs pipelined XADD (500)',
            f"{med['datasource']:,.0f} rows/s",
            f"{base:,.0f} rows/s",
            f"{med['datasource'] / base:.2f}x",
            ">= 1x",
        ),
    ]
    if "naive" in med:
        rows.append(
            (
                "ForeachBatchSink vs naive XADD per row",
                f"{med['fenced']:,.0f} rows/s",
                f"{med['naive']:,.0f} rows/s",
                f"{med['fenced'] / med['naive']:.2f}x",
                ">= 1x",
            )
        )
    if streams:
        rows.append(
            (
                'writeStream.format("fencing") vs pipelined foreachBatch',
                f"{med['stream']:,.0f} rows/s",
                f"{med['pipestream']:,.0f} rows/s",
                f"{med['stream'] / med['pipestream']:.2f}x",
                ">= 1x",
            )
        )
    print(table(rows))


if __name__ == "__main__":
    main()

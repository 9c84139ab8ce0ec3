"""The Spark sink's throughput on ``local[2]`` against naive foreachBatch sinks, one run.

Run from the repository root (needs the spark extra and Java 17)::

    .venv/bin/python -m bench.spark_sink            # 200,000 rows x 3 rounds (~1 min)
    .venv/bin/python -m bench.spark_sink --quick    # 50,000 rows x 2 rounds

One throwaway local server, one SparkSession on ``local[2]``, one cached DataFrame of rows
(a 100-byte string value and a key) in 4 Spark partitions. Each round writes the same rows
once through each sink, in alternating order, each into a stream of its own:

- ``ForeachBatchSink``: exactly once (dedupe state, chain hashes, begin/finish on the
  driver, the append script), batches of 500 rows per call.
- naive XADD: ``foreachPartition`` with one redis-py XADD per row (at least once: a retried
  task writes its rows again).
- naive pipelined XADD: the same, pipelined 500 at a time (what a careful user writes).

Rows per second are the medians over rounds, wall time of the whole ``foreachBatch`` call.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Iterable
from typing import Any

import redis

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50,000 rows, 2 rounds")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    n = args.rows or (50_000 if args.quick else 200_000)
    rounds = args.rounds or (2 if args.quick else 3)
    spark = spark_session()
    from pyspark.sql import functions as F  # noqa: PLC0415, N812

    df = (
        spark.range(0, n, numPartitions=4)
        .select(
            F.concat(F.col("id").cast("string"), F.lit(":"), F.lit("x" * 90)).alias("v"),
            (F.col("id") % 1000).cast("string").alias("k"),
        )
        .cache()
    )
    df.count()
    rates: dict[str, list[float]] = {"fenced": [], "naive": [], "pipelined": []}
    with server() as srv:
        url = srv.url
        namespace = "b" + uuid.uuid4().hex[:8]
        for rnd in range(rounds):
            sink = ForeachBatchSink(
                url,
                f"bench{rnd}",
                app_id="bench",
                value_col="v",
                key_col="k",
                namespace=namespace,
                partitions=4,
                query_id=f"q{rnd}",
            )

            def fenced(batch: Any, sink: ForeachBatchSink = sink) -> None:
                sink(batch, 0)

            def naive(batch: Any, key: str = f"naive{rnd}") -> None:
                batch.rdd.foreachPartition(lambda rows: naive_xadd(url, key, rows))

            def pipelined(batch: Any, key: str = f"pipe{rnd}") -> None:
                batch.rdd.foreachPartition(lambda rows: naive_pipelined(url, key, rows))

            order = [("fenced", fenced), ("naive", naive), ("pipelined", pipelined)]
            if rnd % 2:
                order.reverse()
            for name, fn in order:
                start = time.perf_counter()
                fn(df)
                rates[name].append(n / (time.perf_counter() - start))
            sink.close()
        check = redis.Redis.from_url(url)
        assert check.xlen("naive0") == n and check.xlen("pipe0") == n
    spark.stop()
    med = {k: statistics.median(v) for k, v in rates.items()}
    fenced_rate = med["fenced"]
    print(f"Spark sink, local[2], {n:,} rows of ~100 B in 4 partitions, {rounds} rounds (median)")
    print(
        table(
            [
                (
                    "ForeachBatchSink vs naive XADD per row",
                    f"{fenced_rate:,.0f} rows/s",
                    f"{med['naive']:,.0f} rows/s",
                    f"{fenced_rate / med['naive']:.2f}x",
                    ">= 1x",
                ),
                (
                    "ForeachBatchSink vs pipelined XADD (500)",
                    f"{fenced_rate:,.0f} rows/s",
                    f"{med['pipelined']:,.0f} rows/s",
                    f"{fenced_rate / med['pipelined']:.2f}x",
                    "-",
                ),
            ]
        )
    )


if __name__ == "__main__":
    main()

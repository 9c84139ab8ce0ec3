"""What the Spark sink's executor check costs: once per sink object, before its first write.

Run from the repository root (needs the spark extra and Java 17)::

    .venv/bin/python -m bench.spark_probe              # 10 rounds
    .venv/bin/python -m bench.spark_probe --rounds 3

One throwaway local server, one SparkSession on ``local[2]``. Measured:

- the check before any Python task has run (it starts the Python worker and
  imports the library there, which the first write job would otherwise do: workers are
  reused);
- the check again, median over rounds (a warm worker), next to a one-row job that runs no
  Python (what any Spark job costs here);
- the first micro-batch of a new sink (1,000 rows, 2 Spark partitions), with the check and
  with it skipped, alternating, median over rounds: the difference is what a query pays.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from fencing.spark import ForeachBatchSink
from fencing.spark.probe import check_executors

from .common import server, spark_session, table


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    spark = spark_session({"spark.python.worker.reuse": "true"})
    tiny = []
    for _ in range(args.rounds + 1):  # the first job warms up the JVM
        start = time.perf_counter()
        spark.range(0, 1, numPartitions=1).collect()
        tiny.append(time.perf_counter() - start)
    start = time.perf_counter()
    check_executors(spark)
    cold = time.perf_counter() - start
    warm = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        check_executors(spark)
        warm.append(time.perf_counter() - start)

    from pyspark.sql import functions as F  # noqa: PLC0415, N812

    df = spark.range(0, 1000, numPartitions=2).select(F.col("id").cast("string").alias("v"))
    df.cache().count()
    batches: dict[bool, list[float]] = {True: [], False: []}
    with server() as srv:
        namespace = "b" + uuid.uuid4().hex[:8]
        for rnd in range(args.rounds):
            for checked in (True, False) if rnd % 2 else (False, True):
                sink = ForeachBatchSink(
                    srv.url,
                    f"t{rnd}{int(checked)}",
                    app_id="bench",
                    value_col="v",
                    namespace=namespace,
                    partitions=2,
                    query_id=f"q{rnd}",
                )
                if not checked:
                    sink._executors_checked = True  # the baseline skips it
                start = time.perf_counter()
                sink(df, 0)
                batches[checked].append(time.perf_counter() - start)
                sink.close()
    spark.stop()
    with_check = statistics.median(batches[True])
    without = statistics.median(batches[False])
    print(f"Spark sink executor check, local[2], {args.rounds} rounds (median)")
    print(
        table(
            [
                ("the check, the first Python task of the app", _ms(cold), "-", "-", "-"),
                (
                    "the check, warm worker vs a one-row job without Python",
                    _ms(statistics.median(warm)),
                    _ms(statistics.median(tiny[1:])),
                    f"+{(statistics.median(warm) - statistics.median(tiny[1:])) * 1000:,.0f} ms",
                    "-",
                ),
                (
                    "first batch of a sink (1,000 rows): checked vs not",
                    _ms(with_check),
                    _ms(without),
                    f"+{(with_check - without) * 1000:,.0f} ms",
                    "once per sink",
                ),
            ]
        )
    )


if __name__ == "__main__":
    main()

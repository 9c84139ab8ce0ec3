"""The Spark source's read rate on ``local[2]`` against raw XRANGE paging from executors.

Run from the repository root (needs the spark extra and Java 17)::

    .venv/bin/python -m bench.spark_source            # 200,000 records x 5 rounds
    .venv/bin/python -m bench.spark_source --quick    # 50,000 records x 3 rounds

One throwaway local server, one SparkSession on ``local[2]``, one topic of 4 partitions
holding records of a 100-byte value and a short key, written with the library's producer.
Each round reads the whole topic once each way, in an order that alternates between
rounds, and sums the values' lengths (an action that touches every row):

- ``spark.read.format("fencing")``: the source (pages of the library's read pipeline: the
  partition's metadata, XRANGE and its incarnation again, checked page by page; Arrow
  batches of the source's nine columns).
- raw XRANGE: ``mapInArrow`` over one row per partition; each task pages XRANGE over its
  partition's stream with redis-py (COUNT as the source's largest page) and builds Arrow
  batches of the same nine columns, with no checks.

Rows per second are the medians over rounds, wall time of the whole action; the ratio is
of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

import fencing.spark
from fencing import Client, Record
from fencing._sync.context import context_of
from fencing.spark.scan import MAX_PAGE, arrow_schema

from .common import server, spark_session, table

PARTITIONS = 4


def raw_pages(url: str, topic: str, streams: list[str], batches: Iterator[Any]) -> Iterator[Any]:
    """For each partition number in ``batches``: its stream paged with XRANGE, as Arrow
    batches of the source's columns."""
    import pyarrow as pa  # noqa: PLC0415
    import redis  # noqa: PLC0415

    schema = arrow_schema()
    empty_headers = pa.array([[]] * 0, schema.field("headers").type)
    r = redis.Redis.from_url(url)
    for batch in batches:
        for p in batch.column(0).to_pylist():
            after = "-"
            while True:
                entries = r.xrange(streams[p], after, "+", count=MAX_PAGE)
                if not entries:
                    break
                n = len(entries)
                offsets = [int(e[0].split(b"-")[1]) - 1 for e in entries]
                fields = [e[1] for e in entries]
                headers = pa.MapArray.from_arrays(
                    pa.array([0] * (n + 1), pa.int32()),
                    empty_headers.keys,
                    empty_headers.items,
                ).cast(schema.field("headers").type)
                stamp = schema.field("timestamp").type
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array([topic] * n, pa.string()),
                        pa.array([p] * n, pa.int32()),
                        pa.array(offsets, pa.int64()),
                        pa.array([f.get(b"k") for f in fields], pa.binary()),
                        pa.array([f[b"v"] for f in fields], pa.binary()),
                        headers,
                        pa.array([int(f[b"e"]) for f in fields], pa.int64()),
                        pa.array([int(f[b"p"]) for f in fields], pa.int64()),
                        pa.array([int(f[b"t"]) * 1000 for f in fields], stamp),
                    ],
                    schema=schema,
                )
                after = f"({entries[-1][0].decode()}"
    r.close()


def fill(url: str, namespace: str, topic: str, n: int) -> None:
    """``n`` records of a 100-byte value and a key, spread evenly over the partitions."""
    with Client.from_url(url, namespace=namespace) as client:
        t = client.topic(topic, PARTITIONS).open()
        with t.producer() as producer:
            per = n // PARTITIONS
            for p in range(PARTITIONS):
                for start in range(0, per, 1000):
                    producer.send_batch(
                        [
                            Record(f"{i:09d}:".encode() + b"x" * 90, key=b"k%d" % (i % 1000))
                            for i in range(start, min(per, start + 1000))
                        ],
                        partition=p,
                    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50,000 records, 3 rounds")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    n = args.records or (50_000 if args.quick else 200_000)
    n -= n % PARTITIONS
    rounds = args.rounds or (3 if args.quick else 5)
    spark = spark_session()
    fencing.spark.register(spark)
    from pyspark.sql import functions as F  # noqa: PLC0415, N812

    rates: dict[str, list[float]] = {"source": [], "raw": []}
    with server() as srv:
        url = srv.url
        namespace = "b" + uuid.uuid4().hex[:8]
        fill(url, namespace, "src", n)
        with Client.from_url(url, namespace=namespace) as client:
            keys = context_of(client).keys
            streams = [keys.partition("src", p).stream for p in range(PARTITIONS)]

        def source() -> int:
            df = (
                spark.read.format("fencing")
                .option("url", url)
                .option("namespace", namespace)
                .option("topic", "src")
                .load()
            )
            return int(df.select(F.sum(F.length("value"))).collect()[0][0])

        schema = (
            spark.read.format("fencing")
            .option("url", url)
            .option("namespace", namespace)
            .option("topic", "src")
            .load()
            .schema
        )

        def raw() -> int:
            df = spark.range(0, PARTITIONS, numPartitions=PARTITIONS).mapInArrow(
                lambda batches: raw_pages(url, "src", streams, batches), schema
            )
            return int(df.select(F.sum(F.length("value"))).collect()[0][0])

        fns = {"source": source, "raw": raw}
        expected = n * 100
        for fn in fns.values():  # warm-up: Python workers started, the code imported
            assert fn() == expected
        for rnd in range(rounds):
            order = list(fns.items())
            if rnd % 2:
                order.reverse()
            for name, fn in order:
                start = time.perf_counter()
                assert fn() == expected
                rates[name].append(n / (time.perf_counter() - start))
    spark.stop()
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(
        f"Spark source, local[2], {n:,} records of 100 B in {PARTITIONS} partitions, "
        f"{rounds} rounds (median)"
    )
    print(
        table(
            [
                (
                    'read.format("fencing") vs raw XRANGE paging',
                    f"{med['source']:,.0f} rows/s",
                    f"{med['raw']:,.0f} rows/s",
                    f"{med['source'] / med['raw']:.2f}x",
                    ">= 0.8x",
                )
            ]
        )
    )


if __name__ == "__main__":
    main()

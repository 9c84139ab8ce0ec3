"""A Structured Streaming pipeline that writes into a topic exactly once (PySpark).

The source is a folder of JSON files (``{"order": 17, "user": "u3", "amount": 12.5}`` per
line), replayable as Spark's file source is: a restart from the checkpoint reads the same
files for the same micro-batch. The transformation keeps orders of at least ``--min-amount``
and adds a ``cents`` column; the sink writes each order as JSON, keyed by user (so one user's
orders stay in order on one partition), through ``fencing.spark.ForeachBatchSink``.

Kill it at any point (Ctrl-C, SIGKILL, a lost executor) and run it again with the same
``--checkpoint``: Spark replays the micro-batch it had not committed, and the sink writes
only what that batch had not written yet, so the topic holds every order once. With a new
``--checkpoint`` (a reset), the sink refuses to run under the same ``--app-id``
(``CheckpointReset``): pass a new app id to start a new lineage.

    pip install 'redis-fencing[spark]'      # and Java 17
    python examples/spark_pipeline.py --input /tmp/orders --checkpoint /tmp/orders-ck \\
        --topic orders --make-input 5

``--make-input N`` first writes N files of 1,000 orders to ``--input``. The program prints
the sink's metrics per micro-batch and, at the end, the number of records in the topic.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import fencing
from fencing.spark import ForeachBatchSink


def make_input(folder: Path, files: int, seed: int = 7) -> int:
    """Write ``files`` files of 1,000 orders each; returns how many orders exist in all."""
    folder.mkdir(parents=True, exist_ok=True)
    start = len(list(folder.glob("*.json")))
    rng = random.Random(seed + start)
    for f in range(start, start + files):
        with open(folder / f"orders-{f:05d}.json", "w") as out:
            for i in range(1000):
                order = {
                    "order": f * 1000 + i,
                    "user": f"u{rng.randrange(100)}",
                    "amount": rng.randrange(1, 10_000) / 100,
                }
                out.write(json.dumps(order) + "\n")
    return (start + files) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="Redis URL (default FENCING_REDIS_URL)")
    parser.add_argument("--input", required=True, type=Path, help="folder of JSON files")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint location")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--app-id", default="orders-pipeline")
    parser.add_argument("--min-amount", type=float, default=0.0)
    parser.add_argument("--make-input", type=int, default=0, metavar="N")
    parser.add_argument("--files-per-batch", type=int, default=1)
    args = parser.parse_args(argv)
    if args.make_input:
        make_input(args.input, args.make_input)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # noqa: PLC0415 - after PYSPARK_PYTHON is set
    from pyspark.sql import functions as sf  # noqa: PLC0415

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("fencing-spark-pipeline")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sink = ForeachBatchSink(
        args.url,
        args.topic,
        app_id=args.app_id,
        value_col="json",
        key_col="user",
        partitions=args.partitions,
    )

    def each_batch(df: Any, batch_id: int) -> None:
        sink(df, batch_id)
        assert sink.last_batch is not None
        print("batch:", json.dumps(dataclasses.asdict(sink.last_batch)), flush=True)

    orders = (
        spark.readStream.schema("order LONG, user STRING, amount DOUBLE")
        .option("maxFilesPerTrigger", args.files_per_batch)
        .json(str(args.input))
        .where(sf.col("amount") >= args.min_amount)
        .withColumn("cents", sf.round(sf.col("amount") * 100).cast("long"))
        .select("user", sf.to_json(sf.struct("order", "user", "cents")).alias("json"))
    )
    query = (
        orders.writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    client = fencing.Client.from_url(args.url)
    topic = client.topic(args.topic)
    total = sum(topic.offsets(p)[1] for p in range(topic.partitions))
    print(f"spark_pipeline: topic {args.topic!r} holds {total} records", flush=True)
    client.close()


if __name__ == "__main__":
    main()

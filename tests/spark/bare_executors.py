"""The Spark sink with executors that run an interpreter without the library, in a process of
its own (a SparkContext keeps the executors' interpreter it was started with).

    python -m tests.spark.bare_executors URL NAMESPACE INPUT CHECKPOINT EXECUTOR_PYTHON

Run it with PYTHONPATH naming the repository, from another working directory: make_session()
drops PYTHONPATH before the JVM starts, and its Python workers start in this working
directory, which ``python -m`` puts on their path.

1. A streaming query over the JSON files in INPUT, into topic ``events`` of NAMESPACE.
2. A sink whose executor check is skipped, called on one DataFrame (topic ``later``): its
   write tasks meet the executors themselves.

Prints one JSON object: what ``awaitTermination()`` raised and ``exception()`` returned for
1 (each as ``{"type": ..., "text": ...}``), the keys NAMESPACE held after 1, and what the
call raised for 2.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import redis

from fencing.spark import ForeachBatchSink

from ..support.spark import make_session


def described(exc: BaseException | None) -> dict[str, str] | None:
    if exc is None:
        return None
    return {"type": f"{type(exc).__module__}.{type(exc).__qualname__}", "text": str(exc)}


def main() -> None:
    url, namespace, source, checkpoint, python = sys.argv[1:6]
    spark = make_session(executor_python=python)
    sink = ForeachBatchSink(url, "events", app_id="etl", value_col="v", namespace=namespace)
    query = (
        spark.readStream.schema("id LONG, v STRING")
        .json(source)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    raised: BaseException | None = None
    try:
        query.awaitTermination(240)
    except Exception as exc:
        raised = exc
    with redis.Redis.from_url(url) as r:
        keys = sorted(k.decode() for k in r.scan_iter(f"{namespace}:*"))
    report: dict[str, Any] = {
        "raised": described(raised),
        "exception": described(query.exception()),
        "keys_after_query": keys,
    }

    unchecked = ForeachBatchSink(
        url, "later", app_id="etl", namespace=namespace, partitions=2, query_id="q"
    )
    unchecked._executors_checked = True  # as if another executor had been checked
    try:
        unchecked(spark.range(0, 100, numPartitions=2), 0)
        report["unchecked"] = None
    except Exception as exc:
        report["unchecked"] = described(exc)
    print(json.dumps(report), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()

"""A topic-to-topic pipeline in a process of its own, for the driver SIGKILL tests of the
``fencing`` connector.

    python -m tests.spark.pipeline_worker URL NAMESPACE CHECKPOINT MAX_RECORDS

Reads topic ``orders`` with ``readStream.format("fencing")`` (at most MAX_RECORDS records a
micro-batch) and writes each record's value, keyed by its partition, to topic ``events``
with ``writeStream.format("fencing")``, up to what ``orders`` held when it started
(``Trigger.AvailableNow``). Prints DONE at the end.
"""

from __future__ import annotations

import sys

import fencing.spark

from ..support.spark import make_session


def main() -> None:
    url, namespace, checkpoint, max_records = sys.argv[1:5]
    spark = make_session("local[2]")
    fencing.spark.register(spark)
    query = (
        spark.readStream.format("fencing")
        .option("url", url)
        .option("namespace", namespace)
        .option("topic", "orders")
        .option("maxRecordsPerTrigger", max_records)
        .load()
        .selectExpr("CAST(partition AS STRING) AS key", "value")
        .writeStream.format("fencing")
        .option("url", url)
        .option("namespace", namespace)
        .option("topic", "events")
        .option("partitions", "2")
        .option("appId", "pipeline")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()

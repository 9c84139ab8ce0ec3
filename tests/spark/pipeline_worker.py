"""A topic-to-topic pipeline in a process of its own, for the driver SIGKILL tests of the
``fencing`` connector.

    python -m tests.spark.pipeline_worker URL NAMESPACE CHECKPOINT MAX_RECORDS [recover] [MASTER]

Reads topic ``orders`` with ``readStream.format("fencing")`` (at most MAX_RECORDS records a
micro-batch) and writes each record's value, keyed by its partition, to topic ``events``
with ``writeStream.format("fencing")``, naming each row's source position
(``sourceColumns``), up to what ``orders`` held when it started (``Trigger.AvailableNow``).
With ``recover``, the documented recovery from a lost checkpoint: a new lineage whose source
starts after what the sink wrote. MASTER (``spark://...``): on that standalone cluster,
else ``local[2]``. Prints DONE at the end.
"""

from __future__ import annotations

import sys

import fencing.spark

from ..support.spark import make_session
from ..support.spark_cluster import cluster_session


def main() -> None:
    url, namespace, checkpoint, max_records = sys.argv[1:5]
    rest = sys.argv[5:]
    recover = "recover" in rest
    masters = [a for a in rest if a.startswith("spark://")]
    spark = cluster_session(masters[0]) if masters else make_session("local[2]")
    fencing.spark.register(spark)
    source = (
        spark.readStream.format("fencing")
        .option("url", url)
        .option("namespace", namespace)
        .option("topic", "orders")
        .option("maxRecordsPerTrigger", max_records)
    )
    if recover:
        source = source.option("startingOffsets", "afterSink:events/pipeline")
    sink = (
        source.load()
        .selectExpr(
            "CAST(partition AS STRING) AS key",
            "value",
            "topic AS source_topic",
            "partition AS source_partition",
            "offset AS source_offset",
        )
        .writeStream.format("fencing")
        .option("url", url)
        .option("namespace", namespace)
        .option("topic", "events")
        .option("partitions", "2")
        .option("appId", "pipeline")
        .option("sourceColumns", "source_topic,source_partition,source_offset")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )
    if recover:
        sink = sink.option("newLineage", "true")
    query = sink.start()
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()

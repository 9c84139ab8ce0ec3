"""A streaming query in a process of its own, for the SIGKILL test of the Spark sink.

    python -m tests.spark.spark_worker URL NAMESPACE INPUT CHECKPOINT TOPIC HANG_AFTER_BATCH MARKER

Reads JSON files one per micro-batch and writes them with ForeachBatchSink. After the sink
wrote batch HANG_AFTER_BATCH (-1: never), it creates MARKER and hangs before returning, so
Spark never commits that batch to the checkpoint: the parent then SIGKILLs the process
group. Prints one JSON line per batch the sink handled, and DONE at the end.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from fencing.spark import ForeachBatchSink

from ..support.spark import make_session


def main() -> None:
    url, namespace, source, checkpoint, topic, hang, marker = sys.argv[1:8]
    spark = make_session("local[2]")
    sink = ForeachBatchSink(
        url, topic, app_id="etl", value_col="v", key_col="k", namespace=namespace, partitions=3
    )

    def each(df: Any, batch_id: int) -> None:
        sink(df, batch_id)
        print(json.dumps(dataclasses.asdict(sink.last_batch)), flush=True)
        if batch_id == int(hang):
            Path(marker).touch()
            while True:
                time.sleep(60)

    query = (
        spark.readStream.schema("id LONG, v STRING, k STRING")
        .option("maxFilesPerTrigger", 1)
        .json(source)
        .repartition(2)
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()

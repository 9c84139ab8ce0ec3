"""A local PySpark session for the Spark sink's tests, and reading a topic back.

Executors are Python workers of this very interpreter (PYSPARK_PYTHON), on ``local[2,4]``:
two cores, and a failed task is retried up to 4 times, as on a cluster.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Any

import fencing

from .paths import ROOT

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.schemaInference": "true",
    "spark.driver.extraJavaOptions": "-Dlog4j.rootLogger=ERROR",
}


def make_session(master: str = "local[2,4]") -> Any:
    """A SparkSession whose executors run this interpreter."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession  # noqa: PLC0415 - after PYSPARK_PYTHON is set

    builder = SparkSession.builder.master(master).appName("fencing-tests")
    for k, v in SPARK_CONF.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def read_values(client: fencing.Client, topic: str) -> list[bytes]:
    """Every record value of every partition of ``topic``, partition by partition."""
    t = client.topic(topic)
    values: list[bytes] = []
    for p in range(t.partitions):
        reader = t.reader(partition=p, start_offset=0)
        while True:
            batch = reader.read(max_records=10_000)
            if not batch:
                break
            values.extend(r.value for r in batch)
    return values


def duplicates(values: list[bytes]) -> dict[bytes, int]:
    """Values present more than once."""
    return {v: n for v, n in Counter(values).items() if n > 1}

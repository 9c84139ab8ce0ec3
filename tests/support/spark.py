"""A local PySpark session for the Spark sink's tests, and the duplicates a read-back holds.

Executors are Python workers of this very interpreter (PYSPARK_PYTHON), on ``local[2,4]``:
two cores, and a failed task is retried up to 4 times, as on a cluster.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Any

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


def make_session(master: str = "local[2,4]", executor_python: str | None = None) -> Any:
    """A SparkSession whose executors run this interpreter, with the repository on their
    path; or ``executor_python``, with nothing of this process's path: PYTHONPATH, which
    the JVM and the workers would inherit, is dropped (this process keeps its sys.path).
    Its workers start in this process's working directory, which ``-m`` puts on their path.
    """
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if executor_python is not None:
        os.environ["PYSPARK_PYTHON"] = executor_python
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession  # noqa: PLC0415 - after PYSPARK_PYTHON is set

    builder = SparkSession.builder.master(master).appName("fencing-tests")
    for k, v in SPARK_CONF.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def duplicates(values: list[bytes]) -> dict[bytes, int]:
    """Values present more than once."""
    return {v: n for v, n in Counter(values).items() if n > 1}

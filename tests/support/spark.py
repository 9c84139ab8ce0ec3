"""The suite's local PySpark session (the ``spark`` fixture), the duplicates a read-back
holds, and the totals a fencing sink's state keeps.

Executors are Python workers of this very interpreter (PYSPARK_PYTHON), on ``local[2,4]``:
two cores, and a failed task is retried up to 4 times, as on a cluster. One session serves
every test and docs example that runs Spark in this process, started at first use with the
``fencing`` data source registered: a session costs seconds to start, and its JVM outlives
``stop()`` anyway. A test that changes a setting puts it back (:func:`spark_conf`).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from fencing._keys import Keys

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


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The suite's one local SparkSession (``local[2,4]``), ``fencing`` registered; skips
    where PySpark or Java is missing."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java (17) on PATH or JAVA_HOME")
    import fencing.spark  # noqa: PLC0415 - only where Spark is used

    session = make_session()
    fencing.spark.register(session)
    yield session
    session.stop()


@contextmanager
def spark_conf(session: Any, settings: dict[str, str]) -> Iterator[None]:
    """Set session settings (``spark.conf``) for a block, and put the earlier ones back."""
    earlier = {key: session.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        session.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in earlier.items():
            if value is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, value)


@dataclass(frozen=True)
class SinkTotals:
    """What a fencing sink's state holds for one app over a topic's partitions: rows
    written and skipped (``tw``, ``tk``) and the highest source offset per source."""

    written: int
    skipped: int
    positions: dict[str, int]


def sink_totals(
    raw: redis.Redis, namespace: str, topic: str, partitions: int, app_id: str
) -> SinkTotals:
    """The sink state of ``app_id`` on ``topic``, summed over its partitions."""
    written = skipped = 0
    positions: dict[str, int] = {}
    for p in range(partitions):
        state = {
            k.decode(): int(v)
            for k, v in raw.hgetall(Keys(namespace).partition(topic, p).sink(app_id)).items()
            if k in (b"tw", b"tk") or k.startswith(b"o:")
        }
        written += state.pop("tw", 0)
        skipped += state.pop("tk", 0)
        for field, offset in state.items():
            positions[field[2:]] = max(offset, positions.get(field[2:], -1))
    return SinkTotals(written, skipped, positions)

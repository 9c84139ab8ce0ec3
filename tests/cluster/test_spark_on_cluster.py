"""The Spark sink on a Redis Cluster: the executors' clients take the cluster URL, each
topic partition's chunks go to the primary of its slot, and a task retried after writing
part of its rows still writes every row once (the same test as on one server)."""

from __future__ import annotations

from ..spark.test_sink import (
    spark,
    test_a_task_failing_upstream_midway_on_its_first_attempt_writes_every_row_once,
)

__all__ = [
    "spark",
    "test_a_task_failing_upstream_midway_on_its_first_attempt_writes_every_row_once",
]

"""The Spark sink on a Redis Cluster: the executors' clients take the cluster URL, each
topic partition's chunks go to the primary of its slot, and a task retried after writing
part of its rows still writes every row once (the same test as on one server).

The routing is the cluster client's, the same for either kind, so the test runs on the
Redis cluster only (and on a single Redis server in ``tests/spark``).
"""

from __future__ import annotations

import pytest

from ..conftest import ServerInfo
from ..spark.test_sink import (
    test_a_task_failing_upstream_midway_on_its_first_attempt_writes_every_row_once,
)

__all__ = [
    "one_cluster_kind",
    "test_a_task_failing_upstream_midway_on_its_first_attempt_writes_every_row_once",
]


@pytest.fixture(autouse=True)
def one_cluster_kind(server: ServerInfo) -> None:
    if server.kind == "valkey-cluster":
        pytest.skip("one cluster kind is enough for the sink's routing (12,000 rows): redis")

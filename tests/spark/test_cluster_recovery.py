"""A topic-to-topic pipeline on a standalone cluster (a master and two workers, each
executor a JVM of its own) whose driver and executors are killed and whose checkpoint is
then deleted: recovered as a new lineage whose source starts after what its sink wrote."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import redis

pytest.importorskip("pyspark", reason="the spark extra is not installed")
if shutil.which("java") is None:
    pytest.skip("Spark needs Java", allow_module_level=True)

import fencing

from ..conftest import ServerInfo
from ..support.spark_cluster import StandaloneCluster
from .test_processes import check_recovery

pytestmark = [pytest.mark.timeout(600), pytest.mark.spark_cluster]


@pytest.mark.one_server
def test_a_pipeline_on_a_cluster_whose_checkpoint_is_deleted_resumes_after_its_sink(
    standalone: StandaloneCluster,
    server: ServerInfo,
    namespace: str,
    client: fencing.Client,
    raw: redis.Redis,
    tmp_path: Path,
) -> None:
    args = [server.url, namespace, str(tmp_path / "ck"), "200", standalone.master_url]
    check_recovery(client, raw, namespace, args, tmp_path, standalone.executor_pids)

"""A Redis Cluster that speaks only TLS (to clients, between nodes and to its replicas),
with a certificate made for the test, and part of the both-flavour suite run on it.

Valkey from the wheel is built without TLS, so only the Redis 7 cluster runs here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencing.embedded import EmbeddedCluster, TlsFiles

from ...conftest import ServerInfo
from ..conftest import EXTERNAL_CLUSTER


@pytest.fixture(scope="session")
def cluster() -> Iterator[EmbeddedCluster | None]:
    if EXTERNAL_CLUSTER:
        pytest.skip("FENCING_TEST_CLUSTER_URL points the cluster tests elsewhere")
    tls = TlsFiles.make(Path(tempfile.mkdtemp(prefix="fencing-tls-cluster-")))
    try:
        made = EmbeddedCluster.start("redis", tls=tls)
    except RuntimeError as exc:
        pytest.skip(f"redis here has no TLS: {str(exc)[:120]}")
    with made:
        yield made


@pytest.fixture(scope="session")
def server(cluster: EmbeddedCluster) -> Iterator[ServerInfo]:
    yield ServerInfo(url=cluster.url, kind="redis-tls-cluster", owned=True)

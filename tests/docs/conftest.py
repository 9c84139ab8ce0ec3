"""What the documentation's examples run against: one throwaway Redis 7 (the examples run on
one server kind), a local cluster only for pages that name one, the suite's Spark only for
pages that use it. ``FENCING_TEST_REDIS_URL`` / ``FENCING_TEST_CLUSTER_URL`` point them at
servers of yours instead, as for the rest of the suite.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from fencing.embedded import EmbeddedCluster, EmbeddedServer, TlsFiles

from ..conftest import EXTERNAL_URL, ServerInfo

EXTERNAL_CLUSTER = os.environ.get("FENCING_TEST_CLUSTER_URL")


@pytest.fixture(scope="session")
def docs_server() -> Iterator[ServerInfo]:
    """The server every example's ``redis://localhost:6379/0`` becomes."""
    if EXTERNAL_URL:
        yield ServerInfo(url=EXTERNAL_URL, kind="external", owned=False)
        return
    with EmbeddedServer.start("redis") as embedded:
        yield ServerInfo(url=embedded.url, kind="redis", owned=True, embedded=embedded)


@pytest.fixture(scope="module")
def docs_cluster() -> Iterator[ServerInfo]:
    """The cluster every example's ``redis+cluster://localhost:7000`` becomes (started on the
    first page that names one)."""
    if EXTERNAL_CLUSTER:
        yield ServerInfo(url=EXTERNAL_CLUSTER, kind="external", owned=False)
        return
    with EmbeddedCluster.start("redis") as made:
        yield ServerInfo(url=made.url, kind="redis-cluster", owned=True)


@pytest.fixture(scope="module")
def docs_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerInfo]:
    """The server every example's ``rediss://localhost:6380/0?ssl_ca_certs=...`` becomes:
    Redis over TLS only, with a certificate made for it (started on the first page that
    names one)."""
    tls = TlsFiles.make(tmp_path_factory.mktemp("docs-tls"))
    try:
        made = EmbeddedServer.start("redis", tls=tls)
    except RuntimeError as exc:
        pytest.skip(f"redis-server here has no TLS: {str(exc)[:120]}")
    with made:
        yield ServerInfo(url=made.url, kind="redis-tls", owned=True, embedded=made)

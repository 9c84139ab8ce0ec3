"""A real local Redis Cluster per server kind (3 masters, 3 replicas, from the same binaries
as the rest of the suite; Redis 8 for the tests marked ``server_specific``), and the both-flavour
behaviour suite run on it.

``FENCING_TEST_CLUSTER_URL`` (``redis+cluster://host:port``) points these tests at an
external cluster instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from fencing.embedded import EmbeddedCluster

from ..conftest import ALL_KINDS, ServerInfo, require_binary

EXTERNAL_CLUSTER = os.environ.get("FENCING_TEST_CLUSTER_URL")


@pytest.fixture(scope="session", params=["external"] if EXTERNAL_CLUSTER else ALL_KINDS)
def cluster(request: pytest.FixtureRequest) -> Iterator[EmbeddedCluster | None]:
    """One cluster of each kind for the whole session."""
    if request.param == "external":
        yield None
        return
    require_binary(request.param)
    with EmbeddedCluster.start(request.param) as made:
        yield made


@pytest.fixture(scope="session")
def server(cluster: EmbeddedCluster | None) -> Iterator[ServerInfo]:
    """The cluster, as the rest of the suite sees a server (its URL names the cluster)."""
    if cluster is None:
        assert EXTERNAL_CLUSTER is not None
        yield ServerInfo(url=EXTERNAL_CLUSTER, kind="external", owned=False)
        return
    yield ServerInfo(url=cluster.url, kind=f"{cluster.kind}-cluster", owned=True)


@pytest.fixture
def fresh_server() -> Iterator[ServerInfo]:
    pytest.skip("a server of its own is a single-node matter (the cluster tests FLUSHALL apart)")
    yield  # pragma: no cover


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[EmbeddedCluster]:
    """A Redis cluster of the test module's own, for tests that kill, stop or reconfigure its
    nodes (the module orders them so that the one that kills a master runs last)."""
    if EXTERNAL_CLUSTER:
        pytest.skip("kills or reconfigures nodes: needs a cluster the suite starts")
    with EmbeddedCluster.start("redis") as made:
        yield made

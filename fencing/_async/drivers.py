"""Connections: one :class:`Driver` per socket timeout, over pools cloned from the user's
redis-py client.

Each clone keeps the connection settings of the client it was given (host, port, TLS,
credentials...) and adds the safety rails: redis-py retries off (the library retries
itself, within a budget below each lease), and socket and connect timeouts of at most an
eighth of the lease they protect. One pool per timeout value, made on demand.

>>> drivers = Drivers(redis.asyncio.Redis())
>>> driver = drivers.driver(0.5)          # the driver whose sockets time out after 0.5 s
"""

from __future__ import annotations

from typing import Any

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from .._runtime.tasks import cluster as runtime_cluster
from .._runtime.tasks import primitives as runtime
from .driver import Driver
from .routes import ClusterRoutes

# Connection kwargs tied to the original pool's runtime state: never copied to a clone.
_POOL_BOUND_KWARGS = (
    "maint_notifications_pool_handler",
    "maint_notifications_config",
    "oss_cluster_maint_notifications_handler",
    "redis_connect_func",
    "retry",
)
#: A cluster node's own address: each clone of its settings connects where it is told.
_NODE_ADDRESS = ("host", "port")
#: The connection classes of TLS clients (sync and asyncio).
_TLS_CONNECTIONS = (redis.connection.SSLConnection, redis.asyncio.connection.SSLConnection)
#: Connection settings a cluster client takes as they are (credentials, TLS, naming).
_CLUSTER_KWARGS = frozenset(
    (
        "username",
        "password",
        "credential_provider",
        "client_name",
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_cert_reqs",
        "ssl_check_hostname",
        "ssl_ca_data",
        "ssl_min_version",
        "ssl_ciphers",
        "protocol",
    )
)


class Drivers:
    """The drivers of one client, cloned from ``base`` (a ``redis.asyncio.Redis`` or a
    cluster client), one per socket timeout."""

    def __init__(self, base: Any) -> None:
        #: A ``redis.asyncio.Redis``, or a cluster client.
        self.base = base
        self._lock = runtime.state_lock()
        self._drivers: dict[float, Driver] = {}

    def after_fork_in_child(self) -> None:
        """Fresh lock and pools: the parent's connections stay the parent's (and a thread
        of the parent may have held the lock at the fork)."""
        self._lock = runtime.state_lock()
        self._drivers = {}

    @property
    def is_cluster(self) -> bool:
        """Whether the base client talks to a Redis Cluster."""
        return runtime_cluster.is_cluster(self.base)

    def where(self) -> str:
        """Where the base client connects: ``host:port``, a socket path, or the seeds."""
        if self.is_cluster:
            seeds = ",".join(f"{h}:{p}" for h, p in runtime_cluster.seeds(self.base))
            return f"cluster {seeds}"
        kw = self.base.connection_pool.connection_kwargs
        return str(kw.get("path") or f"{kw.get('host')}:{kw.get('port')}")

    def driver(self, timeout: float) -> Driver:
        """The driver whose socket timeouts are ``timeout`` seconds (one pool per value)."""
        driver = self._drivers.get(timeout)
        if driver is None:
            with self._lock:
                driver = self._drivers.get(timeout)
                if driver is None:
                    if self.is_cluster:
                        driver = self._cluster_driver(timeout)
                    else:
                        scripts = self.clone(timeout).connection_pool  # the script path's own
                        driver = Driver(self.clone(timeout, blocking=True), scripts)
                    self._drivers[timeout] = driver
        return driver

    def clone(
        self,
        timeout: float,
        *,
        pubsub: bool = False,
        blocking: bool = False,
        node: tuple[str, int] | None = None,
    ) -> redis.asyncio.Redis:
        """A client of one server with the base client's settings and the safety rails
        (``pubsub``: no socket timeout; ``node``: on a cluster, that node)."""
        connection_class, kwargs, limit = self._settings_of_base()
        if self.is_cluster:
            # One node's connection: ``node`` (the notifier's, to the primary serving a
            # channel's slot), else the first seed.
            host, port = node or runtime_cluster.seeds(self.base)[0]
            kwargs.update(host=host, port=port)
        kwargs.update(
            socket_timeout=None if pubsub else timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            retry_on_error=[],
            decode_responses=False,
        )
        clone: redis.asyncio.ConnectionPool
        if blocking:
            # Reads and other commands: once max_connections are out (redis-py's default is
            # 100), a further one waits up to a socket timeout for a free connection
            # instead of failing at once. The script path waits the same way in
            # ScriptConnections, over a pool of its own.
            clone = redis.asyncio.BlockingConnectionPool(  # type: ignore[no-untyped-call, unused-ignore]
                connection_class=connection_class,
                max_connections=limit or 100,
                timeout=timeout,
                **kwargs,
            )
        else:
            clone = redis.asyncio.ConnectionPool(
                connection_class=connection_class, max_connections=limit, **kwargs
            )
        client = redis.asyncio.Redis(connection_pool=clone)
        # Stream replies are parsed by fencing._protocol.topic, straight from the wire format:
        # redis-py's per-entry dicts would cost more than the rest of a read.
        for command in ("XRANGE", "XREAD"):
            client.set_response_callback(command, _raw_reply)
        return client

    async def close(self) -> None:
        """Close every driver made so far (a later :meth:`driver` makes new ones)."""
        with self._lock:
            drivers, self._drivers = list(self._drivers.values()), {}
        for driver in drivers:
            await driver.close()

    def _settings_of_base(self) -> tuple[type, dict[str, Any], int | None]:
        """The base client's connection class, connection settings and connection limit."""
        if self.is_cluster:
            connection_class, raw = runtime_cluster.node_settings(self.base)
            raw = {k: v for k, v in raw.items() if k not in _NODE_ADDRESS}
            limit = None
        else:
            pool = self.base.connection_pool
            connection_class, raw, limit = (
                pool.connection_class,
                pool.connection_kwargs,
                (pool.max_connections),
            )
        kwargs = {
            k: v
            for k, v in raw.items()
            if k not in _POOL_BOUND_KWARGS and not k.startswith("orig_")
        }
        return connection_class, kwargs, limit

    def _cluster_driver(self, timeout: float) -> Driver:
        """A driver over a cluster: scripts go to the primary of their slot, each on a
        script path of its own; reads and plain commands through a cluster client."""
        connection_class, kwargs, _ = self._settings_of_base()
        kwargs.update(
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            retry_on_error=[],
            decode_responses=False,
        )
        cluster_kwargs = {k: v for k, v in kwargs.items() if k in _CLUSTER_KWARGS}
        if issubclass(connection_class, _TLS_CONNECTIONS):
            cluster_kwargs["ssl"] = True  # a cluster client picks its class from this flag
        cluster = runtime_cluster.new_cluster(
            runtime_cluster.seeds(self.base),
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            **cluster_kwargs,
        )
        for command in ("XRANGE", "XREAD"):
            cluster.set_response_callback(command, _raw_reply)  # type: ignore[no-untyped-call, unused-ignore]

        def pool_for(host: str, port: int) -> redis.asyncio.ConnectionPool:
            return redis.asyncio.ConnectionPool(
                connection_class=connection_class, host=host, port=port, **kwargs
            )

        # The slot map is the base client's, shared by every driver (mapped once).
        return Driver(cluster, routes=ClusterRoutes(self.base, pool_for, wait=timeout))


def _raw_reply(response: Any, **options: Any) -> Any:
    return response

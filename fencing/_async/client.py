"""``fencing.Client``: the entry point. Holds connections; opens handles.

The constructor never touches Redis. On first use the client checks that the server's
``maxmemory-policy`` is ``noeviction`` (an eviction is a silent reset of coordination
state), unless told ``allow_eviction=True``.

The client talks to Redis through its own connection pools, cloned from the connection
settings of the redis-py client it was given (host, port, TLS, credentials...) with the
safety rails: redis-py retries off (the library retries itself, within a
budget below each lease), and socket and connect timeouts of at most a quarter of the
lease they protect. One pool per timeout value, created on demand.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from .. import _forks as forks
from .._durability import Durability
from .._keys import Keys
from .._record import DEFAULT_LIMITS
from .._retry import TRANSIENT_ERRORS, RetryBudget
from .._runtime.tasks import cluster as runtime_cluster
from .._runtime.tasks import primitives as runtime
from .._runtime.tasks.keeper import Keeper
from .._runtime.tasks.notify import Notifier
from .._settings import FencingSettings, load_settings
from .._text import text as _text
from .._urls import redis_from_url
from ..errors import (
    ConfigurationError,
    InvalidArgumentType,
    OutcomeUnknown,
    StateLost,
    Unavailable,
)
from .driver import Driver
from .election import Election, Leadership
from .ownership import Ownership
from .routes import ClusterRoutes
from .topic import Topic

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
#: Connection settings a cluster client takes as they are (credentials, TLS, naming).
#: The connection classes of TLS clients (sync and asyncio).
_TLS_CONNECTIONS = (redis.connection.SSLConnection, redis.asyncio.connection.SSLConnection)

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


class Client:
    """A connection to one Redis (or Valkey) server for redis-fencing.

    >>> import fencing.aio
    >>> client = fencing.aio.Client.from_url("redis://localhost:6379/0", namespace="demo")
    >>> owner = client.ownership("journal", owner_id="host-a", ttl=10.0)  # no I/O yet
    >>> grants = await owner.claim(["orders/0"])                          # doctest: +SKIP
    """

    def __init__(
        self,
        redis_client: redis.asyncio.Redis | None = None,
        *,
        namespace: str | None = None,
        socket_timeout: float | None = None,
        allow_eviction: bool | None = None,
        settings: FencingSettings | None = None,
    ) -> None:
        overrides: dict[str, Any] = {}
        if namespace is not None:
            overrides["namespace"] = namespace
        if socket_timeout is not None:
            overrides["socket_timeout"] = socket_timeout
        if allow_eviction is not None:
            overrides["allow_eviction"] = allow_eviction
        self.settings = load_settings(settings, **overrides)
        #: Whether the base client was made here (from a URL): close() then closes it too.
        self._owns_base = redis_client is None
        if redis_client is None:
            redis_client = redis_from_url(
                self.settings.redis_url, redis.asyncio.Redis, runtime_cluster.Cluster
            )
        elif not isinstance(redis_client, redis.asyncio.Redis) and not runtime_cluster.is_cluster(
            redis_client
        ):
            raise InvalidArgumentType(
                "fencing.aio.Client needs a redis.asyncio.Redis client, got "
                f"{type(redis_client).__name__}: use fencing.aio.Client.from_url(url) or pass "
                "redis.asyncio.Redis(...)"
            )
        #: A ``redis.asyncio.Redis``, or a cluster client.
        self._base: Any = redis_client
        self.keys = Keys(self.settings.namespace)
        self._lock = runtime.state_lock()
        self._safe_lock = runtime.io_lock()
        self._drivers: dict[float, Driver] = {}
        self._safe_checked = False
        #: The acks levels this server was checked for (``_check_durability``).
        self._durable_ok: set[str] = set()
        self._keeper = Keeper()
        #: Elections made by this client: close() resigns their terms.
        self._elections: weakref.WeakSet[Election] = weakref.WeakSet()
        # Sharded pub/sub: on a cluster, one connection per primary serving a channel's slot.
        self._notifier = Notifier(
            lambda node=None: self._clone(self.settings.socket_timeout, pubsub=True, node=node),
            cluster=self._base if self.is_cluster else None,
        )
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        # A client made before a fork works in the child for new handles: fresh locks (a
        # thread of the parent may have held one at the fork) and fresh pools (the parent's
        # connections stay the parent's). The keeper and the notifier reset themselves.
        self._lock = runtime.state_lock()
        self._safe_lock = runtime.io_lock()
        self._drivers = {}

    @classmethod
    def from_url(
        cls,
        url: str | None = None,
        *,
        namespace: str | None = None,
        socket_timeout: float | None = None,
        allow_eviction: bool | None = None,
    ) -> Client:
        """A client for ``url`` (default: ``FENCING_REDIS_URL``, else localhost:6379).

        >>> client = Client.from_url("redis://localhost:6379/0", namespace="billing")
        """
        settings = load_settings() if url is None else load_settings(redis_url=url)
        client = cls(
            redis_from_url(settings.redis_url, redis.asyncio.Redis, runtime_cluster.Cluster),
            namespace=namespace,
            socket_timeout=socket_timeout,
            allow_eviction=allow_eviction,
            settings=settings,
        )
        client._owns_base = True
        return client

    @property
    def namespace(self) -> str:
        """The prefix of every key this client writes."""
        return self.keys.namespace

    # -- handles --------------------------------------------------------------------------

    def ownership(
        self, group: str, owner_id: str, ttl: float = 10.0, *, acks: str = "leader"
    ) -> Ownership:
        """A handle on the ownership table for ``group`` (the generation rules are in the README).

        ``owner_id`` is a label for people and logs; the handle's identity is a random
        session drawn now, so two handles never share a grant. No I/O happens here.

        >>> owner = client.ownership("journal", owner_id="host-a", ttl=10.0)
        >>> (await owner.claim(["orders/0"]))["orders/0"].token         # doctest: +SKIP
        1
        """
        return Ownership(self, group, owner_id, ttl, acks=acks)

    def election(
        self,
        name: str,
        candidate_id: str,
        ttl: float = 10.0,
        renew_deadline: float | None = None,
        *,
        retry_period: float | None = None,
        on_elected: Callable[[Leadership], None] | None = None,
        on_revoked: Callable[[Leadership], None] | None = None,
        exit_on_loss: bool = False,
        acks: str = "leader",
    ) -> Election:
        """A candidate in the election ``name`` (on the ownership row
        ``("__election__", name)``). No I/O happens here: see :class:`~fencing.Election`.

        >>> election = client.election("scheduler", candidate_id="host-a", ttl=10.0)
        >>> async with election.campaign() as leadership:             # doctest: +SKIP
        ...     leadership.token
        1
        """
        election = Election(
            self,
            name,
            candidate_id,
            ttl,
            renew_deadline,
            retry_period=retry_period,
            on_elected=on_elected,
            on_revoked=on_revoked,
            exit_on_loss=exit_on_loss,
            acks=acks,
        )
        self._elections.add(election)
        return election

    def topic(
        self,
        name: str,
        partitions: int | None = None,
        *,
        max_len: int | None = None,
        max_record_bytes: int = DEFAULT_LIMITS.max_record_bytes,
        max_batch_records: int = DEFAULT_LIMITS.max_batch_records,
        max_batch_bytes: int = DEFAULT_LIMITS.max_batch_bytes,
        producer_state_ttl: float | None = None,
        dedup_window: int | None = None,
    ) -> Topic:
        """A topic (created with ``partitions`` partitions on first use). No I/O happens here.

        ``producer_state_ttl`` (seconds) and ``dedup_window`` (batches, default 5) are fixed
        when the topic is created: see :class:`~fencing.Topic`.

        >>> topic = client.topic("orders", partitions=4)
        >>> producer = await topic.producer()                           # doctest: +SKIP
        >>> (await producer.send(b"hello", key=b"user-1")).offset        # doctest: +SKIP
        0
        """
        return Topic(
            self,
            name,
            partitions,
            max_len=max_len,
            max_record_bytes=max_record_bytes,
            max_batch_records=max_batch_records,
            max_batch_bytes=max_batch_bytes,
            producer_state_ttl=producer_state_ttl,
            dedup_window=dedup_window,
        )

    # -- internals used by handles ----------------------------------------------------------

    async def _allocate_producer_id(self) -> int:
        """A new producer id from the namespace's counter (ids grow; never reused)."""
        budget = self._budget_default()
        await self._ensure_safe(budget)
        r = self._driver(budget.timeout).redis
        try:
            async for attempt in budget.retrying_async():
                with attempt:
                    mark = runtime.cancel_mark()
                    issued = int(await r.incr(self.keys.producer_ids()))
                    runtime.check_cancel(mark)
                    return issued
        except TRANSIENT_ERRORS as exc:
            raise OutcomeUnknown(f"could not allocate a producer id: {exc}") from exc
        raise AssertionError("unreachable")

    async def _check_producer_id(self, pid: int) -> None:
        """Refuse a saved producer id this namespace's counter has not handed out yet: the
        state comes from another namespace or server, or the counter went backwards (a
        failover lost its INCR), and a new producer could be given the same id."""
        budget = self._budget_default()
        await self._ensure_safe(budget)
        try:
            mark = runtime.cancel_mark()
            raw = await self._driver(budget.timeout).redis.get(self.keys.producer_ids())
            runtime.check_cancel(mark)
        except redis.exceptions.ResponseError as exc:
            raise StateLost(
                f"the producer-id counter {self.keys.producer_ids()!r} is not a number "
                f"({exc}): another program wrote it",
                reason="pid-counter",
                key=self.keys.producer_ids(),
            ) from exc
        except TRANSIENT_ERRORS as exc:
            raise Unavailable(f"cannot reach Redis to check the producer id: {exc}") from exc
        issued = int(raw) if raw is not None else 0
        if issued < pid:
            raise StateLost(
                f"the saved state names producer id {pid}, but namespace {self.namespace!r} "
                f"has handed out ids up to {issued} only: the state was saved against another "
                "namespace or server, or the producer-id counter lost writes (FLUSHALL, a "
                "restart without persistence, a failover). Nothing was written; resuming "
                "could let a new producer get the same id. Open a new producer without resume=",
                reason="pid-counter",
                key=self.keys.producer_ids(),
            )

    @property
    def is_cluster(self) -> bool:
        """Whether this client talks to a Redis Cluster."""
        return runtime_cluster.is_cluster(self._base)

    def _settings_of_base(self) -> tuple[type, dict[str, Any], int | None]:
        """The base client's connection class, connection settings and connection limit."""
        if self.is_cluster:
            connection_class, raw = runtime_cluster.node_settings(self._base)
            raw = {k: v for k, v in raw.items() if k not in _NODE_ADDRESS}
            limit = None
        else:
            pool = self._base.connection_pool
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

    def _clone(
        self,
        timeout: float,
        *,
        pubsub: bool = False,
        blocking: bool = False,
        node: tuple[str, int] | None = None,
    ) -> redis.asyncio.Redis:
        connection_class, kwargs, limit = self._settings_of_base()
        if self.is_cluster:
            # One node's connection: ``node`` (the notifier's, to the primary serving a
            # channel's slot), else the first seed.
            host, port = node or runtime_cluster.seeds(self._base)[0]
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

    def _driver(self, timeout: float) -> Driver:
        """The driver whose socket timeouts are ``timeout`` seconds (one pool per value)."""
        driver = self._drivers.get(timeout)
        if driver is None:
            with self._lock:
                driver = self._drivers.get(timeout)
                if driver is None:
                    if self.is_cluster:
                        driver = self._cluster_driver(timeout)
                    else:
                        scripts = self._clone(timeout).connection_pool  # the script path's own
                        driver = Driver(self._clone(timeout, blocking=True), scripts)
                    self._drivers[timeout] = driver
        return driver

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
            runtime_cluster.seeds(self._base),
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
        return Driver(cluster, routes=ClusterRoutes(self._base, pool_for, wait=timeout))

    async def _ensure_safe(self, budget: RetryBudget) -> None:
        """Check ``maxmemory-policy`` once per client (an eviction is a silent reset, G9)."""
        if self._safe_checked or self.settings.allow_eviction:
            return
        async with self._safe_lock:
            if self._safe_checked:
                return
            driver_redis = self._driver(budget.timeout).redis
            try:
                mark = runtime.cancel_mark()
                values = await _config_values(driver_redis, "maxmemory-policy")
                runtime.check_cancel(mark)
            except _UNREACHABLE as exc:
                raise Unavailable(f"cannot reach Redis to check its configuration: {exc}") from exc
            except redis.exceptions.ResponseError as exc:
                raise ConfigurationError(
                    "redis-fencing could not read the server's maxmemory-policy "
                    f"(CONFIG GET refused: {exc}). Make sure it is 'noeviction', then pass "
                    "allow_eviction=True (or FENCING_ALLOW_EVICTION=1) to skip this check"
                ) from exc
            for where, value in values.items():
                if value == "noeviction":
                    continue
                raise ConfigurationError(
                    f"the Redis server{where}'s maxmemory-policy is {value!r}: an eviction would "
                    "silently erase leases, epochs and offsets. Run CONFIG SET "
                    "maxmemory-policy noeviction, or pass allow_eviction=True (or "
                    "FENCING_ALLOW_EVICTION=1) if you accept that risk"
                )
            self._safe_checked = True

    async def _check_durability(self, durability: Durability) -> None:
        """Refuse at open an ``acks`` this server cannot give (``fsync`` needs WAITAOF,
        Redis/Valkey 7.2+, and ``appendonly yes``), once per client and level."""
        if durability.acks != "fsync" or durability.acks in self._durable_ok:
            return
        budget = self._budget_default()
        r = self._driver(budget.timeout).redis
        try:
            try:
                await r.execute_command("WAITAOF", 0, 0, 0)  # waits for nothing
                has_waitaof = True
            except redis.exceptions.ResponseError:
                has_waitaof = False
            appendonly = await _config_values(r, "appendonly")
        except _UNREACHABLE as exc:
            raise Unavailable(f"cannot reach Redis to check acks='fsync': {exc}") from exc
        if not has_waitaof:
            raise ConfigurationError(
                "acks='fsync' waits with WAITAOF, which this server does not have (Redis and "
                "Valkey 7.2+ do): use acks='replicated' or 'leader', or upgrade the server"
            )
        for where, value in appendonly.items():
            if value == "yes":
                continue
            raise ConfigurationError(
                f"acks='fsync' needs the append-only file: the server{where} runs with "
                f"appendonly {value!r}. Run CONFIG SET appendonly yes (and appendfsync as "
                "you need), or use acks='replicated' or 'leader'"
            )
        self._durable_ok.add(durability.acks)

    def _budget_default(self) -> RetryBudget:
        """The retry budget of calls that protect no lease (reads, topic metadata)."""
        timeout = self.settings.socket_timeout
        return RetryBudget(timeout=timeout, deadline=2 * timeout)

    def _budget_for_ttl(self, ttl: float) -> RetryBudget:
        """The retry budget of calls that protect a lease of ``ttl`` seconds."""
        return RetryBudget.for_ttl(ttl, cap=self.settings.socket_timeout)

    @property
    def _notifications(self) -> Notifier:
        return self._notifier

    # -- lifecycle -----------------------------------------------------------------------

    async def close(self) -> None:
        """Resign the terms of this client's elections, stop lease renewals and the
        notification listener, and close this client's own connections."""
        for election in list(self._elections):
            await election.close()
        self._keeper.close()
        await self._notifier.close()
        with self._lock:
            drivers, self._drivers = list(self._drivers.values()), {}
        for driver in drivers:
            await driver.close()
        if self._owns_base and self.is_cluster:
            await runtime_cluster.close(self._base)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        if self.is_cluster:
            seeds = ",".join(f"{h}:{p}" for h, p in runtime_cluster.seeds(self._base))
            where = f"cluster {seeds}"
        else:
            kw = self._base.connection_pool.connection_kwargs
            where = kw.get("path") or f"{kw.get('host')}:{kw.get('port')}"
        return f"<fencing.Client {where} namespace={self.namespace!r}>"


#: Errors of a configuration check that mean "Redis could not be asked" (a cluster between
#: states: "All slots are not covered", a node down mid-failover).
_UNREACHABLE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.RedisClusterException,
)


async def _config_values(r: Any, name: str) -> dict[str, str]:
    """A CONFIG GET value of the server, or of every primary of a cluster, as
    ``{" <node>": value}`` (the key is empty on one server; it names the node in errors)."""
    if not runtime_cluster.is_cluster(r):
        return {"": _text(_config_value(await r.config_get(name), name))}
    reply = await r.config_get(name, target_nodes=r.PRIMARIES)
    if _config_value(reply, name) is not None:  # one primary: its reply as is
        return {"": _text(_config_value(reply, name))}
    return {f" {node}": _text(_config_value(each, name)) for node, each in sorted(reply.items())}


def _config_value(reply: Any, name: str) -> Any:
    """A CONFIG GET value, whatever the client's decoding settings."""
    if not isinstance(reply, dict):
        return None
    return reply.get(name, reply.get(name.encode()))


def _raw_reply(response: Any, **options: Any) -> Any:
    return response

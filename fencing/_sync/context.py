# GENERATED from fencing/_async/context.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""What the handles of one client share: the :class:`Context`.

A :class:`~fencing.Client` builds one Context and hands it to every handle it makes
(topics, producers, consumers, readers, ownership handles, elections). A handle takes from
it what it needs (drivers, retry budgets, the keeper that renews leases, the notifier
that wakes waiters, the producer-id counter, the server checks) and never reaches back
into the client.

Code given a user's client from outside (the Spark sink, :mod:`fencing.verify`, the CLI)
gets its context through one bridge, :func:`context_of`:

>>> context = context_of(client)
>>> budget = context.budget_default()
>>> value = context.driver(budget.timeout).read(call, budget)     # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING, Any

import redis.exceptions

from .. import _forks as forks
from .._durability import Durability, fsync_refusal
from .._keys import Keys
from .._protocol.refusals import AUTH_ERRORS, auth_refusal
from .._retry import TRANSIENT_ERRORS, RetryBudget
from .._runtime.threads import cluster as runtime_cluster
from .._runtime.threads import primitives as runtime
from .._runtime.threads.keeper import Keeper
from .._runtime.threads.notify import Notifier
from .._text import text as _text
from ..errors import (
    ConfigurationError,
    FencingError,
    InvalidArgumentType,
    OutcomeUnknown,
    StateLost,
    Unavailable,
    WrongKeyType,
)
from .driver import Driver
from .drivers import Drivers

if TYPE_CHECKING:
    from .._settings import FencingSettings

#: Errors of a configuration check that mean "Redis could not be asked" (a cluster between
#: states: "All slots are not covered", a node down mid-failover).
_UNREACHABLE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.RedisClusterException,
)


class Context:
    """The settings, connections and background services of one client, shared by its
    handles.

    >>> context = Context(settings, redis.Redis())
    >>> budget = context.budget_for_ttl(10.0)        # the retry budget under a 10 s lease
    >>> driver = context.driver(budget.timeout)
    """

    def __init__(self, settings: FencingSettings, base: Any) -> None:
        self.settings = settings
        self.keys = Keys(settings.namespace)
        #: The drivers, cloned from ``base`` (a ``redis.Redis`` or a cluster client).
        self.drivers = Drivers(base)
        #: Renews leases in the background.
        self.keeper = Keeper()
        # Sharded pub/sub: on a cluster, one connection per primary serving a channel's slot.
        #: Wakes waiters (released rows, severed grants) by pub/sub.
        self.notifier = Notifier(
            lambda node=None: self.drivers.clone(settings.socket_timeout, pubsub=True, node=node),
            cluster=base if self.drivers.is_cluster else None,
        )
        self._safe_lock = runtime.io_lock()
        self._safe_checked = False
        #: The durabilities this server was checked for (:meth:`check_durability`).
        self._durable_ok: set[Durability] = set()
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        # A client made before a fork works in the child for new handles: fresh locks (a
        # thread of the parent may have held one at the fork) and fresh pools (the parent's
        # connections stay the parent's). The keeper and the notifier reset themselves.
        self._safe_lock = runtime.io_lock()
        self.drivers.after_fork_in_child()

    @property
    def namespace(self) -> str:
        """The prefix of every key the client writes."""
        return self.keys.namespace

    def driver(self, timeout: float) -> Driver:
        """The driver whose socket timeouts are ``timeout`` seconds (one pool per value)."""
        return self.drivers.driver(timeout)

    def budget_default(self) -> RetryBudget:
        """The retry budget of calls that protect no lease (reads, topic metadata)."""
        timeout = self.settings.socket_timeout
        return RetryBudget(timeout=timeout, deadline=2 * timeout)

    def budget_for_ttl(self, ttl: float) -> RetryBudget:
        """The retry budget of calls that protect a lease of ``ttl`` seconds."""
        return RetryBudget.for_ttl(ttl, cap=self.settings.socket_timeout)

    # -- checks of the server ----------------------------------------------------------------

    def ensure_safe(self, budget: RetryBudget) -> None:
        """Check ``maxmemory-policy`` once per client (an eviction is a silent reset, G9)."""
        if self._safe_checked or self.settings.allow_eviction:
            return
        with self._safe_lock:
            if self._safe_checked:
                return
            driver_redis = self.driver(budget.timeout).redis
            try:
                mark = runtime.cancel_mark()
                values = _config_values(driver_redis, "maxmemory-policy")
                runtime.check_cancel(mark)
            except AUTH_ERRORS as exc:
                raise auth_refusal(exc) from exc
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

    def check_durability(self, durability: Durability) -> None:
        """Refuse at open an ``acks`` this server cannot give, once per client and durability:
        ``fsync`` needs WAITAOF (Redis/Valkey 7.2+), ``appendonly yes``, and an
        ``appendfsync`` whose fsync the handle's wait can see (:func:`fsync_refusal`):
        ``always``; ``everysec`` on Valkey (it fsyncs for a waiting WAITAOF), or on Redis with
        a wait of over a second (Redis answers only at its once-a-second fsync); never
        ``no`` (the server leaves the fsync to the operating system: no wait confirms one)."""
        if durability.acks != "fsync" or durability in self._durable_ok:
            return
        budget = self.budget_default()
        r = self.driver(budget.timeout).redis
        # What the server does not let this user read (CONFIG renamed, INFO not granted by
        # the library's own ACL rule) is not checked here: each write's wait is the judge
        # (NotEnoughReplicas when it falls short or is refused).
        appendonly: dict[str, str] = {}
        appendfsync: dict[str, str] = {}
        on_demand = True
        try:
            try:
                r.execute_command("WAITAOF", 0, 0, 0)  # waits for nothing
                has_waitaof = True
            except redis.exceptions.NoPermissionError as exc:
                raise ConfigurationError(
                    f"acks='fsync' waits with WAITAOF, which this user may not run ({exc}): "
                    "grant it (+waitaof, as fencing.acl.acl_rule does), or use "
                    "acks='replicated' or 'leader'"
                ) from exc
            except redis.exceptions.ResponseError:
                has_waitaof = False
            with contextlib.suppress(redis.exceptions.ResponseError):
                appendonly = _config_values(r, "appendonly")
                appendfsync = _config_values(r, "appendfsync")
            with contextlib.suppress(redis.exceptions.ResponseError):
                on_demand = all("valkey_version" in info for info in _server_infos(r))
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
                f"appendonly {value!r}. Run CONFIG SET appendonly yes and CONFIG SET "
                "appendfsync always, or use acks='replicated' or 'leader'"
            )
        for where, value in appendfsync.items():
            refusal = fsync_refusal(value, durability.timeout_ms, on_demand=on_demand)
            if refusal is not None:
                raise ConfigurationError(f"acks='fsync': the server{where} {refusal}")
        self._durable_ok.add(durability)

    # -- producer ids ------------------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        """A new producer id from the namespace's counter (ids grow; never reused)."""
        budget = self.budget_default()
        self.ensure_safe(budget)
        r = self.driver(budget.timeout).redis
        try:
            for attempt in budget.retrying():
                with attempt:
                    mark = runtime.cancel_mark()
                    issued = int(r.incr(self.keys.producer_ids()))
                    runtime.check_cancel(mark)
                    return issued
        except redis.exceptions.ResponseError as exc:
            raise self._pid_counter_error(exc) from exc
        except TRANSIENT_ERRORS as exc:
            raise OutcomeUnknown(f"could not allocate a producer id: {exc}") from exc
        raise AssertionError("unreachable")

    def _pid_counter_error(self, exc: Exception) -> FencingError:
        """What a refused read or INCR of the producer-id counter means: a key of another
        type (WrongKeyType), or a string that is not a number; another program wrote it."""
        key = self.keys.producer_ids()
        if "WRONGTYPE" in str(exc):
            try:
                key_type = _text(self.driver(1.0).redis.type(key))
            except (redis.exceptions.RedisError, OSError):
                key_type = "unknown"
            return WrongKeyType(
                f"the producer-id counter {key!r} holds a {key_type}, not a number: another "
                "program uses this name; choose another namespace or remove that key",
                key=key,
                key_type=key_type,
            )
        return StateLost(
            f"the producer-id counter {key!r} is not a number ({exc}): another program "
            "wrote it; choose another namespace or remove that key",
            reason="pid-counter",
            key=key,
        )

    def check_producer_id(self, pid: int) -> None:
        """Refuse a saved producer id this namespace's counter has not handed out yet: the
        state comes from another namespace or server, or the counter went backwards (a
        failover lost its INCR), and a new producer could be given the same id."""
        budget = self.budget_default()
        self.ensure_safe(budget)
        try:
            mark = runtime.cancel_mark()
            raw = self.driver(budget.timeout).redis.get(self.keys.producer_ids())
            runtime.check_cancel(mark)
        except redis.exceptions.ResponseError as exc:
            raise self._pid_counter_error(exc) from exc
        except TRANSIENT_ERRORS as exc:
            raise Unavailable(f"cannot reach Redis to check the producer id: {exc}") from exc
        try:
            issued = int(raw) if raw is not None else 0
        except ValueError as exc:
            raise self._pid_counter_error(exc) from exc
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

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop lease renewals and the notification listener; close the connections."""
        self.keeper.close()
        self.notifier.close()
        self.drivers.close()


#: The context of each client that made one (see :func:`context_of`).
_CONTEXTS: weakref.WeakKeyDictionary[object, Context] = weakref.WeakKeyDictionary()


def bind(client: object, context: Context) -> None:
    """Make ``context`` what :func:`context_of` gives for ``client`` (its maker)."""
    _CONTEXTS[client] = context


def context_of(client: object) -> Context:
    """The context behind a user's client (``fencing.Client`` or ``fencing.Client``; a
    context is its own): the one way in for code given a client from outside.

    >>> driver = context_of(client).driver(0.5)
    """
    if isinstance(client, Context):
        return client
    context = _CONTEXTS.get(client)
    if context is None:
        raise InvalidArgumentType(f"expected a fencing Client, got {type(client).__name__}")
    return context


def _config_values(r: Any, name: str) -> dict[str, str]:
    """A CONFIG GET value of the server, or of every primary of a cluster, as
    ``{" <node>": value}`` (the key is empty on one server; it names the node in errors)."""
    if not runtime_cluster.is_cluster(r):
        return {"": _text(_config_value(r.config_get(name), name))}
    reply = r.config_get(name, target_nodes=r.PRIMARIES)
    if _config_value(reply, name) is not None:  # one primary: its reply as is
        return {"": _text(_config_value(reply, name))}
    return {f" {node}": _text(_config_value(each, name)) for node, each in sorted(reply.items())}


def _server_infos(r: Any) -> list[dict[str, Any]]:
    """INFO server of the server, or of every primary of a cluster."""
    if not runtime_cluster.is_cluster(r):
        return [r.info("server")]
    reply = r.info("server", target_nodes=r.PRIMARIES)
    if "redis_version" in reply:  # one primary: its reply as is
        return [reply]
    return [each for each in reply.values() if isinstance(each, dict)]


def _config_value(reply: Any, name: str) -> Any:
    """A CONFIG GET value, whatever the client's decoding settings."""
    if not isinstance(reply, dict):
        return None
    return reply.get(name, reply.get(name.encode()))

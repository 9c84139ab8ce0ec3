# GENERATED from fencing/_async/client.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""``fencing.Client``: the entry point. Holds connections; opens handles.

The constructor never touches Redis. On first use the client checks that the server's
``maxmemory-policy`` is ``noeviction`` (an eviction is a silent reset of coordination
state), unless told ``allow_eviction=True``.

The client talks to Redis through its own connection pools, cloned from the connection
settings of the redis-py client it was given (host, port, TLS, credentials...) with the
safety rails: redis-py retries off (the library retries itself, within a
budget below each lease), and socket and connect timeouts of at most an eighth of the
lease they protect. One pool per timeout value, created on demand. What its handles share
(those pools, the lease keeper, the notifier, the retry budgets) is its
:class:`~fencing._async.context.Context`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from .._record import DEFAULT_LIMITS
from .._runtime.threads import cluster as runtime_cluster
from .._urls import redis_from_url
from ..errors import InvalidArgumentType
from . import admin
from .context import Context, bind
from .ownership import Ownership
from .topic import Topic

if TYPE_CHECKING:
    from .._settings import FencingSettings
    from .election import Election
    from .leadership import Leadership


class Client:
    """A connection to one Redis (or Valkey) server for redis-fencing.

    >>> import fencing
    >>> client = fencing.Client.from_url("redis://localhost:6379/0", namespace="demo")
    >>> owner = client.ownership("journal", owner_id="host-a", ttl=10.0)  # no I/O yet
    >>> grants = owner.claim(["orders/0"])                          # doctest: +SKIP
    """

    def __init__(
        self,
        redis_client: redis.Redis | None = None,
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
        from .._settings import load_settings  # noqa: PLC0415 - lazy: pydantic loads when used

        self.settings = load_settings(settings, **overrides)
        #: Whether the base client was made here (from a URL): close() then closes it too.
        self._owns_base = redis_client is None
        if redis_client is None:
            redis_client = redis_from_url(
                self.settings.redis_url, redis.Redis, runtime_cluster.Cluster
            )
        elif not isinstance(redis_client, redis.Redis) and not runtime_cluster.is_cluster(
            redis_client
        ):
            raise InvalidArgumentType(
                "fencing.Client needs a redis.Redis client, got "
                f"{type(redis_client).__name__}: use fencing.Client.from_url(url) or pass "
                "redis.Redis(...)"
            )
        #: A ``redis.Redis``, or a cluster client.
        self._base: Any = redis_client
        self._context = Context(self.settings, redis_client)
        bind(self, self._context)
        self.keys = self._context.keys
        #: Elections made by this client: close() resigns their terms.
        self._elections: weakref.WeakSet[Election] = weakref.WeakSet()

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
        from .._settings import load_settings  # noqa: PLC0415 - lazy: pydantic loads when used

        settings = load_settings() if url is None else load_settings(redis_url=url)
        client = cls(
            redis_from_url(settings.redis_url, redis.Redis, runtime_cluster.Cluster),
            namespace=namespace,
            socket_timeout=socket_timeout,
            allow_eviction=allow_eviction,
            settings=settings,
        )
        client._owns_base = True
        return client

    @property
    def namespace(self) -> str:
        """The prefix of every key this client writes.

        >>> client.namespace
        'billing'
        """
        return self.keys.namespace

    # -- handles --------------------------------------------------------------------------

    def ownership(
        self, group: str, owner_id: str, ttl: float = 10.0, *, acks: str = "leader"
    ) -> Ownership:
        """A handle on the ownership table for ``group`` (the generation rules:
        docs/explanation/design.md, "The ownership table").

        ``owner_id`` is a label for people and logs; the handle's identity is a random
        session drawn now, so two handles never share a grant. No I/O happens here.

        >>> owner = client.ownership("journal", owner_id="host-a", ttl=10.0)
        >>> (owner.claim(["orders/0"]))["orders/0"].token         # doctest: +SKIP
        1
        """
        return Ownership(self._context, group, owner_id, ttl, acks=acks)

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
        >>> with election.campaign() as leadership:             # doctest: +SKIP
        ...     leadership.token
        1
        """
        # Elections (their terms, callbacks and term producers) load when first used.
        from .election import Election  # noqa: PLC0415

        election = Election(
            self._context,
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
        message_id_window: int | None = None,
        message_id_ttl: float | None = None,
    ) -> Topic:
        """A topic (created with ``partitions`` partitions on first use). No I/O happens here.

        ``producer_state_ttl`` (seconds), ``dedup_window`` (batches, default 5) and the
        message id window (``message_id_window`` ids per partition, default 10,000, kept
        ``message_id_ttl`` seconds, default 3,600) are fixed when the topic is created: see
        :class:`~fencing.Topic`.

        >>> topic = client.topic("orders", partitions=4)
        >>> producer = topic.producer()                           # doctest: +SKIP
        >>> (producer.send(b"hello", key=b"user-1")).offset        # doctest: +SKIP
        0
        """
        return Topic(
            self._context,
            name,
            partitions,
            max_len=max_len,
            max_record_bytes=max_record_bytes,
            max_batch_records=max_batch_records,
            max_batch_bytes=max_batch_bytes,
            producer_state_ttl=producer_state_ttl,
            dedup_window=dedup_window,
            message_id_window=message_id_window,
            message_id_ttl=message_id_ttl,
        )

    # -- administration ------------------------------------------------------------------

    def topics(self) -> list[str]:
        """The names of this namespace's topics, sorted (found with ``SCAN`` in bounded
        steps; a topic being deleted is left out).

        >>> client.topics()                                        # doctest: +SKIP
        ['orders', 'payments']
        """
        return admin.list_topics(self._context)

    def delete_topic(
        self, name: str, force: bool = False, *, mark_ttl: float | None = None
    ) -> None:
        """Delete topic ``name``: its records, offsets, producer state, consumer groups'
        rows and the Spark sink's dedupe state, in bounded steps (no step stalls the
        server). A topic of the same name created afterwards starts afresh, and no handle
        of the deleted one ever writes or reads it.

        Refused with :class:`~fencing.OwnershipConflict` while the topic is in use (a live
        producer, shared or exclusive, a waiting one, a consumer's live grant, or a Spark
        sink lineage with a micro-batch begun and not finished), unless ``force``: then
        every live handle's next call raises :class:`~fencing.StateLost` with
        ``reason="deleted"``, naming the delete and its time, for ``mark_ttl`` seconds
        (None: the topic's producer state expiry; a handle idle longer is told its
        partition is gone, as after lost writes). Raises
        :class:`~fencing.UnknownTopic` if there is no such topic. A delete cut short (the
        process died) leaves the topic refusing opens: run it again to finish.

        >>> client.delete_topic("orders")                          # doctest: +SKIP
        """
        admin.delete_topic(self._context, name, force=force, mark_ttl=mark_ttl)

    @property
    def is_cluster(self) -> bool:
        """Whether this client talks to a Redis Cluster.

        >>> client.is_cluster
        False
        """
        return self._context.drivers.is_cluster

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Resign the terms of this client's elections, stop lease renewals and the
        notification listener, and close this client's own connections.

        >>> client.close()          # or leave ``with Client.from_url(...) as client``
        """
        for election in list(self._elections):
            election.close()
        self._context.close()
        if self._owns_base and self.is_cluster:
            runtime_cluster.close(self._base)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self._context.drivers.where()
        return f"<fencing.Client {where} namespace={self.namespace!r}>"

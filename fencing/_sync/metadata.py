# GENERATED from fencing/_async/metadata.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""A topic's metadata as its handles use it: :class:`TopicMetadata`.

The metadata of a topic (its partition count and incarnation) and of each partition
(next offset, first retained offset, retention) are created on first use and read back
here: the partitions' keys, the incarnation each was opened at, and the highest next
offset any handle of the topic saw on each (G9). A :class:`~fencing.Topic` shows users
what they may call; its producers, consumers and readers are handed this object.

>>> meta = metadata_of(topic)
>>> meta.open()
>>> pk = meta.partition_keys(0)
>>> meta.saw_next(0, 42)              # a handle saw next offset 42: never accept less
"""

from __future__ import annotations

import logging
import secrets
import weakref
from typing import Protocol

from .. import _forks as forks
from .. import _protocol as protocol
from .._keys import PartitionKeys, slot_of
from .._partitioner import partition_for_key
from .._protocol.topic import (
    DEFAULT_DEDUP_WINDOW,
    DEFAULT_MESSAGE_ID_TTL_MS,
    DEFAULT_MESSAGE_ID_WINDOW,
    PartitionInfo,
    TopicInfo,
)
from .._record import Limits
from .._runtime.threads import primitives as runtime
from .._validate import check_int
from ..errors import InvalidArgument, InvalidArgumentType, StateLost
from .context import Context
from .driver import Driver

log = logging.getLogger(__name__)


class TopicMetadata:
    """The metadata of one topic handle: opened (and the topic created) by :meth:`open`.

    ``partitions``, ``max_len``, ``producer_state_ttl`` and ``dedup_window`` are what the
    topic was asked for (validated by :class:`~fencing.Topic`); what the server holds wins,
    or the open is refused (see :class:`~fencing.Topic`).
    """

    def __init__(
        self,
        context: Context,
        name: str,
        limits: Limits,
        *,
        partitions: int | None,
        max_len: int | None,
        producer_state_ttl: float | None,
        dedup_window: int | None,
        message_id_window: tuple[int | None, int | None] = (None, None),
    ) -> None:
        self.context = context
        self.name = name
        self.limits = limits
        #: The retry budget of this topic's calls.
        self.budget = context.budget_default()
        self.meta_key = context.keys.topic_meta(name)
        self._requested = partitions
        self._max_len = max_len
        self._state_ttl_requested = producer_state_ttl
        self._window_requested = dedup_window
        self._ids_requested = message_id_window
        self._lock = runtime.io_lock()
        self._info: TopicInfo | None = None
        self._parts: list[PartitionKeys] = []
        self._incs: list[str] = []
        self._seen_next: list[int] = []
        self._seen_lock = runtime.state_lock()
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        # A topic is a factory of handles, usable in a child: its locks must not be ones a
        # thread of the parent held at the fork.
        self._lock = runtime.io_lock()
        self._seen_lock = runtime.state_lock()

    @property
    def opened(self) -> bool:
        """Whether the metadata was read (the topic exists)."""
        return self._info is not None

    def open(self) -> None:
        """Create or check the topic's metadata now (once: later calls return at once)."""
        if self._info is None:
            with self._lock:
                if self._info is None:
                    self._open()

    def _open(self) -> None:
        context = self.context
        context.ensure_safe(self.budget)
        driver = self.driver()
        wanted = self._state_ttl_requested
        configured = context.settings.producer_state_ttl if wanted is None else wanted
        info = driver.execute(
            protocol.topic.topic_open(
                self.meta_key,
                self.name,
                partitions=self._requested,
                new_incarnation=secrets.token_hex(8),
                seen="",
                pid_expiry_ms=round(configured * 1000),
                dedup_window=self._window_requested or DEFAULT_DEDUP_WINDOW,
                message_id_window=self._ids_requested[0] or DEFAULT_MESSAGE_ID_WINDOW,
                message_id_ttl_ms=self._ids_requested[1] or DEFAULT_MESSAGE_ID_TTL_MS,
            ),
            self.budget,
        )
        self._check_state_ttl(info.pid_expiry_ms, configured, explicit=wanted is not None)
        if self._window_requested not in (None, info.dedup_window):
            raise InvalidArgument(
                f"topic {self.name!r} keeps a duplicate window of {info.dedup_window} batches, "
                f"fixed when it was created; dedup_window={self._window_requested} cannot change "
                "it for the producers of other clients: omit dedup_window, or use another topic"
            )
        self._check_id_window(info)
        parts = [context.keys.partition(self.name, p) for p in range(info.partitions)]
        incs = [""] * info.partitions
        nexts = [0] * info.partitions
        # One script per partition, in ascending slot order (cluster-ready).
        for pk in sorted(parts, key=lambda k: (slot_of(k.meta), k.partition)):
            part = driver.execute(
                protocol.topic.partition_open(
                    pk,
                    topic_incarnation=info.incarnation,
                    new_incarnation=secrets.token_hex(8),
                    create=not info.ready,
                    seen="",
                    max_len=self._max_len,
                    pid_expiry_ms=info.pid_expiry_ms,
                    dedup_window=info.dedup_window,
                    message_id_window=info.message_id_window,
                    message_id_ttl_ms=info.message_id_ttl_ms,
                ),
                self.budget,
            )
            incs[pk.partition] = part.incarnation
            nexts[pk.partition] = part.next_offset
        if not info.ready:
            driver.execute(
                protocol.topic.topic_ready(self.meta_key, self.name, info.incarnation),
                self.budget,
            )
        self._parts, self._incs, self._seen_next = parts, incs, nexts
        self._info = info

    def _check_id_window(self, info: TopicInfo) -> None:
        window, ttl_ms = self._ids_requested
        if window not in (None, info.message_id_window) or ttl_ms not in (
            None,
            info.message_id_ttl_ms,
        ):
            raise InvalidArgument(
                f"topic {self.name!r} remembers {info.message_id_window} message ids per "
                f"partition for {info.message_id_ttl_ms / 1000:g}s, fixed when it was created; "
                "message_id_window and message_id_ttl cannot change that for the producers of "
                "other clients: omit them, or use another topic"
            )

    def _check_state_ttl(self, stored_ms: int, configured: float, *, explicit: bool) -> None:
        if stored_ms == round(configured * 1000):
            return
        stored = stored_ms / 1000.0
        if explicit:
            raise InvalidArgument(
                f"topic {self.name!r} keeps producer state for {stored:g}s after its last "
                f"write, fixed when it was created; producer_state_ttl={configured:g} cannot "
                "change it for the producers of other clients: omit producer_state_ttl, or "
                "use another topic"
            )
        if "producer_state_ttl" not in self.context.settings.model_fields_set:
            return  # the default: nobody asked for it, nothing to warn about
        log.warning(
            "redis-fencing: FENCING_PRODUCER_STATE_TTL=%gs does not apply to topic %r, which "
            "keeps producer state for %gs (fixed when it was created)",
            configured,
            self.name,
            stored,
        )

    # -- what was opened (the topic must be open) ----------------------------------------------

    @property
    def _opened(self) -> bool:
        return self._info is not None

    @property
    def info(self) -> TopicInfo:
        """The topic's metadata as opened (the sync flavour opens it here)."""
        if self._info is None:
            runtime.require_open(self)
            assert self._info is not None
        return self._info

    @property
    def partitions(self) -> int:
        """The number of partitions."""
        return self.info.partitions

    @property
    def incarnation(self) -> str:
        """The random id created with the topic."""
        return self.info.incarnation

    @property
    def producer_state_ttl(self) -> float:
        """Seconds after its last write that a producer's state is kept on this topic."""
        return self.info.pid_expiry_ms / 1000.0

    def partition_keys(self, partition: object) -> PartitionKeys:
        """The keys of a partition; refuses a partition the topic does not have."""
        n = self.partitions
        p = check_int("partition", partition)
        if p >= n:
            raise InvalidArgument(
                f"topic {self.name!r} has partitions 0 to {n - 1}; there is no partition {p}"
            )
        return self._parts[p]

    def partition_for(self, key: bytes | str) -> int:
        """The partition of a key: Kafka's murmur2, so keys land where Kafka puts them."""
        raw = key.encode("utf-8") if isinstance(key, str) else key
        return partition_for_key(raw, self.partitions)

    def incarnation_of(self, partition: int) -> str:
        """The incarnation of a partition, as opened."""
        return self._incs[partition]

    def seen_next(self, partition: int) -> int:
        """The highest next offset any handle of this topic saw on a partition (G9)."""
        return self._seen_next[partition]

    def saw_next(self, partition: int, next_offset: int) -> None:
        """Record a next offset seen on a partition (keeps the highest)."""
        if next_offset > self._seen_next[partition]:
            with self._seen_lock:
                self._seen_next[partition] = max(self._seen_next[partition], next_offset)

    def check_partition(
        self, pk: PartitionKeys, info: PartitionInfo | None, seen_before: int
    ) -> None:
        """G9 on reads: the partition must be there, of the same incarnation, and not behind
        ``seen_before``, the highest next offset seen before the read was sent (a send on
        another thread may have moved it since the server answered)."""
        inc = self._incs[pk.partition]
        reason = ""
        if info is None:
            reason = "missing"
        elif info.incarnation != inc:
            reason = "incarnation"
        elif info.next_offset < seen_before:
            reason = "offset"
        if reason:
            where = f"partition {pk.partition} of topic {self.name!r}"
            raise StateLost(
                f"{where} {'is gone' if reason == 'missing' else 'went back in history'} "
                f"({reason}): the Redis server lost writes (FLUSHALL, restart without "
                "persistence, eviction or a failover). Open the topic again to read the new "
                "history",
                reason=reason,
                key=pk.meta,
            )
        assert info is not None
        self.saw_next(pk.partition, info.next_offset)

    def explain(self, pk: PartitionKeys, lost: StateLost) -> StateLost:
        """``lost`` of a handle on partition ``pk`` (its log, or a row in its slot gone or
        replaced) as the operator's delete it was, when the partition's delete marks hold
        the incarnation this topic opened; otherwise ``lost`` as it is."""
        if lost.reason not in ("missing", "incarnation"):
            return lost
        inc = self._incs[pk.partition] if pk.partition < len(self._incs) else ""
        return self.driver().deleted((pk.meta,), inc, lost)

    # -- calls -------------------------------------------------------------------------------

    def driver(self) -> Driver:
        """The driver of this topic's calls (its budget's timeout)."""
        return self.context.driver(self.budget.timeout)

    def offsets(self, partition: int) -> tuple[int, int]:
        """``(start, next)``: the first retained offset and the next offset to be written."""
        self.open()
        pk = self.partition_keys(partition)
        seen = self.seen_next(pk.partition)
        info = self.driver().read(protocol.reads.partition_info(pk), self.budget)
        try:
            self.check_partition(pk, info, seen)
        except StateLost as lost:
            raise self.explain(pk, lost) from None
        assert info is not None
        return info.start_offset, info.next_offset


class TopicFace(Protocol):
    """What a handle shows of the user's topic it was made from (``handle.topic``)."""

    @property
    def name(self) -> str: ...

    @property
    def partitions(self) -> int: ...

    def partition_for(self, key: bytes | str) -> int: ...


#: The metadata of each topic handle (see :func:`metadata_of`).
_METADATA: weakref.WeakKeyDictionary[object, TopicMetadata] = weakref.WeakKeyDictionary()


def bind(topic: object, metadata: TopicMetadata) -> None:
    """Make ``metadata`` what :func:`metadata_of` gives for ``topic`` (its maker)."""
    _METADATA[topic] = metadata


def metadata_of(topic: object) -> TopicMetadata:
    """The metadata behind a user's topic (``fencing.Topic`` or ``fencing.Topic``;
    metadata is its own): the one way in for a handle given a topic, and for code given
    one from outside (the Spark sink).

    >>> pk = metadata_of(topic).partition_keys(0)
    """
    if isinstance(topic, TopicMetadata):
        return topic
    metadata = _METADATA.get(topic)
    if metadata is None:
        raise InvalidArgumentType(f"expected a fencing Topic, got {type(topic).__name__}")
    return metadata

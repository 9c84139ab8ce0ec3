# GENERATED from fencing/_async/topic.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""``client.topic(name, partitions=N)``: a partitioned log over Redis Streams.

A topic's metadata (its partition count and incarnation) and each partition's metadata
(next offset, first retained offset, retention) are created on first use. The partition
count is fixed at creation. Offsets are 0-based, contiguous and never reused; the record
at offset ``o`` is the stream entry ``0-(o+1)`` (G6), so seeking is one O(log n) XRANGE.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from .. import _forks as forks
from .. import _protocol as protocol
from .._keys import PartitionKeys, slot_of, validate_name
from .._modes import AccessMode
from .._partitioner import partition_for_key
from .._protocol.topic import DEFAULT_DEDUP_WINDOW, MAX_DEDUP_WINDOW, PartitionInfo, TopicInfo
from .._record import DEFAULT_LIMITS, Limits
from .._runtime.threads import primitives as runtime
from .._state import ProducerState
from .._validate import check_int, validate_state_ttl
from ..errors import InvalidArgument, StateLost
from .consumer import Consumer
from .producer import Producer
from .reader import Reader

if TYPE_CHECKING:
    from .._retry import RetryBudget
    from .client import Client
    from .driver import Driver

StartOffset = int | Literal["earliest", "latest"]

log = logging.getLogger(__name__)


class Topic:
    """A topic of ``partitions`` partitions. Opened (and created) on first use.

    >>> topic = client.topic("orders", partitions=4)
    >>> with topic.producer() as producer:
    ...     md = producer.send(b"hello", key=b"user-1")
    >>> reader = topic.reader(md.partition, md.offset)
    >>> [r.value for r in reader.read()]                       # doctest: +SKIP
    [b'hello']

    ``partitions=None`` opens an existing topic (and raises :class:`~fencing.UnknownTopic`
    if there is none). ``producer_state_ttl`` (seconds, default: the client's
    ``FENCING_PRODUCER_STATE_TTL``, 7 days) is how long after its last write an idempotent
    producer's state is kept; it is fixed when the topic is created, for every producer of
    every client: opening the topic with another explicit value raises
    :class:`~fencing.InvalidArgument`, and a client configured otherwise is told in the log
    that its setting does not apply. ``dedup_window`` (batches, default 5, up to 10,000) is
    how many of each idempotent producer's last batches per partition a resend is answered
    from with its original offsets; also fixed at creation (another explicit value for an
    existing topic raises :class:`~fencing.InvalidArgument`). A resend older than the window
    is refused with :class:`~fencing.DuplicateSequence` (``reason="older-than-window"``),
    writing nothing. ``max_len`` keeps at most that many records per
    partition (older ones are trimmed on append; offsets never change). ``max_record_bytes``,
    ``max_batch_records`` and ``max_batch_bytes`` bound what one send may carry.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        partitions: int | None = None,
        *,
        max_len: int | None = None,
        max_record_bytes: int = DEFAULT_LIMITS.max_record_bytes,
        max_batch_records: int = DEFAULT_LIMITS.max_batch_records,
        max_batch_bytes: int = DEFAULT_LIMITS.max_batch_bytes,
        producer_state_ttl: float | None = None,
        dedup_window: int | None = None,
    ) -> None:
        self._client = client
        self.name = validate_name("topic", name)
        if partitions is not None:
            check_int("partitions", partitions, minimum=1)
            if partitions > 100_000:
                raise InvalidArgument(f"partitions={partitions} is over the limit of 100000")
        if max_len is not None:
            check_int("max_len", max_len, minimum=0)
        self._requested = partitions
        self._max_len = max_len
        self._state_ttl_requested = (
            None if producer_state_ttl is None else validate_state_ttl(producer_state_ttl)
        )
        if dedup_window is not None:
            check_int("dedup_window", dedup_window, minimum=1)
            if dedup_window > MAX_DEDUP_WINDOW:
                raise InvalidArgument(
                    f"dedup_window={dedup_window} is over the limit of {MAX_DEDUP_WINDOW} "
                    "batches: a window that large costs every producer "
                    "that much memory per partition"
                )
        self._window_requested = dedup_window
        self.limits = Limits(max_record_bytes, max_batch_records, max_batch_bytes)
        self._meta_key = client.keys.topic_meta(self.name)
        self._budget = client._budget_default()
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

    # -- metadata ---------------------------------------------------------------------------

    def open(self) -> Topic:
        """Create or check the topic's metadata now (otherwise done on first use)."""
        if self._info is None:
            with self._lock:
                if self._info is None:
                    self._open()
        return self

    @property
    def _opened(self) -> bool:
        return self._info is not None

    def _open(self) -> None:
        client = self._client
        client._ensure_safe(self._budget)
        driver = self._driver()
        wanted = self._state_ttl_requested
        configured = client.settings.producer_state_ttl if wanted is None else wanted
        info = driver.execute(
            protocol.topic.topic_open(
                self._meta_key,
                self.name,
                partitions=self._requested,
                new_incarnation=secrets.token_hex(8),
                seen="",
                pid_expiry_ms=round(configured * 1000),
                dedup_window=self._window_requested or DEFAULT_DEDUP_WINDOW,
            ),
            self._budget,
        )
        self._check_state_ttl(info.pid_expiry_ms, configured, explicit=wanted is not None)
        if self._window_requested not in (None, info.dedup_window):
            raise InvalidArgument(
                f"topic {self.name!r} keeps a duplicate window of {info.dedup_window} batches, "
                f"fixed when it was created; dedup_window={self._window_requested} cannot change "
                "it for the producers of other clients: omit dedup_window, or use another topic"
            )
        parts = [client.keys.partition(self.name, p) for p in range(info.partitions)]
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
                ),
                self._budget,
            )
            incs[pk.partition] = part.incarnation
            nexts[pk.partition] = part.next_offset
        if not info.ready:
            driver.execute(
                protocol.topic.topic_ready(self._meta_key, self.name, info.incarnation),
                self._budget,
            )
        self._parts, self._incs, self._seen_next = parts, incs, nexts
        self._info = info

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
        if "producer_state_ttl" not in self._client.settings.model_fields_set:
            return  # the default: nobody asked for it, nothing to warn about
        log.warning(
            "redis-fencing: FENCING_PRODUCER_STATE_TTL=%gs does not apply to topic %r, which "
            "keeps producer state for %gs (fixed when it was created)",
            configured,
            self.name,
            stored,
        )

    @property
    def producer_state_ttl(self) -> float:
        """Seconds after its last write that a producer's state is kept on this topic (fixed
        at creation; the topic must be open)."""
        runtime.require_open(self)
        assert self._info is not None
        return self._info.pid_expiry_ms / 1000.0

    @property
    def dedup_window(self) -> int:
        """How many of an idempotent producer's last batches per partition a resend is
        answered from (fixed at creation; the topic must be open)."""
        runtime.require_open(self)
        assert self._info is not None
        return self._info.dedup_window

    @property
    def partitions(self) -> int:
        """The number of partitions (the topic must be open: the sync flavour opens it here)."""
        runtime.require_open(self)
        assert self._info is not None
        return self._info.partitions

    @property
    def incarnation(self) -> str:
        """The random id created with the topic (the topic must be open)."""
        runtime.require_open(self)
        assert self._info is not None
        return self._info.incarnation

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

    def offsets(self, partition: int) -> tuple[int, int]:
        """``(start, next)``: the first retained offset and the next offset to be written."""
        self.open()
        pk = self.partition_keys(partition)
        seen = self.seen_next(pk.partition)
        info = self._driver().read(protocol.topic.partition_info(pk), self._budget)
        self._check_partition(pk, info, seen)
        assert info is not None
        return info.start_offset, info.next_offset

    def trim(self, partition: int, *, before_offset: int) -> int:
        """Drop the records before ``before_offset``; returns the first retained offset.

        Offsets of the records kept never change (G6). Trimming past the end raises
        :class:`~fencing.OffsetOutOfRange`; trimming below the current start does nothing.
        """
        self.open()
        pk = self.partition_keys(partition)
        before = check_int("before_offset", before_offset)
        info = self._driver().execute(
            protocol.topic.trim(pk, incarnation=self._incs[pk.partition], before_offset=before),
            self._budget,
        )
        self.saw_next(pk.partition, info.next_offset)
        return info.start_offset

    # -- handles -----------------------------------------------------------------------------

    def producer(
        self,
        access_mode: AccessMode = AccessMode.SHARED,
        name: str | None = None,
        lease_ttl: float = 10.0,
        wait_timeout: float | None = None,
        *,
        idempotent: bool = True,
        resume: ProducerState | None = None,
        acks: str = "leader",
        linger_ms: float = 0.0,
        batch_size: int = 16384,
    ) -> Producer:
        """Open a producer on every partition of this topic in ``access_mode``.

        EXCLUSIVE raises :class:`~fencing.ProducerBusy` at once if another producer lives;
        WAIT_FOR_EXCLUSIVE blocks until it is exclusive (up to ``wait_timeout`` seconds,
        None = forever). The lease (``lease_ttl`` seconds, by server time) is renewed in
        the background every ttl/3; closing the producer releases it at once.

        Producers are idempotent (G5): each batch carries the producer's PID and sequence,
        so a retry after a lost reply returns the original offsets instead of appending
        twice. ``name=`` or ``resume=`` (a saved :class:`~fencing.ProducerState`) open a new
        incarnation that fences the older one on every partition; the sequence carries over.

        ``acks`` is what a send waits for before it returns: "leader" (the primary applied
        it), "replicated" (a replica acknowledged it too: WAIT) or "fsync" (the primary
        fsynced it: WAITAOF, Redis/Valkey 7.2+ with appendonly yes). A wait that falls
        short raises :class:`~fencing.NotEnoughReplicas`; see the README's "Durability".

        Sends to one partition while a call is in flight there go together in the next
        call (group commit). ``linger_ms`` and ``batch_size`` (bytes) are for
        :meth:`Producer.send_async`, as in Kafka: its sender waits up to ``linger_ms`` for
        more records unless ``batch_size`` bytes are queued.

        >>> with topic.producer(fencing.AccessMode.EXCLUSIVE) as p:
        ...     p.send(b"v", key=b"k")
        """
        producer = Producer(
            self,
            access_mode,
            name,
            lease_ttl=lease_ttl,
            wait_timeout=wait_timeout,
            idempotent=idempotent,
            resume=resume,
            acks=acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
        )
        return producer.open()

    def consumer(
        self,
        group: str,
        member_id: str,
        partitions: int | Iterable[int],
        start: int | str = "committed",
        *,
        ttl: float = 10.0,
        wait: bool = False,
        timeout: float | None = None,
        acks: str = "leader",
    ) -> Consumer:
        """A single reader of ``partitions`` in consumer ``group``: it owns each partition
        through the ownership row (group, "<topic>/<partition>") until it is closed.

        ``start`` is where to begin on each partition: "committed" (the group's committed
        offset, or the first retained record if it never committed), "earliest", "latest"
        or an offset. A partition held by another member raises
        :class:`~fencing.OwnershipConflict`, or with ``wait=True`` waits (up to ``timeout``
        seconds, None = forever) and is woken when it is released or its lease lapses.
        ``acks`` is what its claims and commits wait for, as for producers ("leader",
        "replicated" or "fsync"; see the README's "Durability"). A commit that a failover
        lost is reported: the next ``commit()`` raises :class:`~fencing.StateLost`.

        >>> with topic.consumer("billing", "host-a", partitions=[0]) as c:
        ...     records = c.poll(max_records=100, block_ms=1000)
        ...     c.commit()
        """
        self.open()
        consumer = Consumer(self, group, member_id, partitions, start=start, ttl=ttl, acks=acks)
        consumer._open(start, wait=wait, timeout=timeout)
        return consumer

    def reader(self, partition: int, start_offset: StartOffset = "earliest") -> Reader:
        """A reader of one partition from ``start_offset`` (an int, "earliest" or "latest").

        Raises :class:`~fencing.OffsetOutOfRange` for an offset below the first retained
        record or past the next offset.
        """
        self.open()
        reader = Reader(self, partition)
        reader._start(start_offset)
        return reader

    # -- internals shared by producers and readers ---------------------------------------------

    def _driver(self, timeout: float | None = None) -> Driver:
        return self._client._driver(self._budget.timeout if timeout is None else timeout)

    @property
    def budget(self) -> RetryBudget:
        """The retry budget of this topic's calls."""
        return self._budget

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

    def _check_partition(
        self, pk: PartitionKeys, info: PartitionInfo | None, seen_before: int
    ) -> None:
        """G9 on reads: the partition must be there, of the same incarnation, and not behind
        ``seen_before``, the highest next offset seen before the read was sent (a send on
        another thread may have moved it since the server answered)."""
        where = f"partition {pk.partition} of topic {self.name!r}"
        inc = self._incs[pk.partition]
        reason = ""
        if info is None:
            reason = "missing"
        elif info.incarnation != inc:
            reason = "incarnation"
        elif info.next_offset < seen_before:
            reason = "offset"
        if reason:
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

    def __repr__(self) -> str:
        n = self._info.partitions if self._info else self._requested
        return f"<fencing.Topic {self.name!r} partitions={n}>"

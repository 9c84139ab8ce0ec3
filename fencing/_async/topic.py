"""``client.topic(name, partitions=N)``: a partitioned log over Redis Streams.

A topic's metadata (its partition count and incarnation) and each partition's metadata
(next offset, first retained offset, retention) are created on first use. The partition
count is fixed at creation. Offsets are 0-based, contiguous and never reused; the record
at offset ``o`` is the stream entry ``0-(o+1)`` (G6), so seeking is one O(log n) XRANGE.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import _protocol as protocol
from .._keys import validate_name
from .._modes import AccessMode
from .._protocol.topic import MAX_DEDUP_WINDOW
from .._record import DEFAULT_LIMITS, Limits
from .._runtime.tasks import primitives as runtime
from .._state import ProducerState
from .._validate import check_int, message_id_window_arg, validate_state_ttl
from ..errors import InvalidArgument
from .consumer import Consumer, open_consumer
from .context import Context
from .metadata import TopicMetadata, bind
from .producer import Producer
from .reader import EndOffset, Reader, StartOffset, open_reader


class Topic:
    """A topic of ``partitions`` partitions. Opened (and created) on first use.

    >>> topic = client.topic("orders", partitions=4)
    >>> async with topic.producer() as producer:
    ...     md = await producer.send(b"hello", key=b"user-1")
    >>> reader = await topic.reader(md.partition, md.offset)
    >>> [r.value for r in await reader.read()]                       # doctest: +SKIP
    [b'hello']

    Its handles (:meth:`producer`, :meth:`consumer`, :meth:`reader`) are entered,
    ``async with topic.producer() as p``, and closed when the block ends, or taken as
    ``p = await topic.producer()`` and closed with ``await p.close()``.

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
    writing nothing. ``message_id_window`` (ids per partition, default 10,000, up to
    1,000,000) and ``message_id_ttl`` (seconds, default 3,600, up to 7 days, by server
    time) bound how long a record's ``message_id`` is remembered: a record whose id was
    appended within both is not appended again. Fixed at creation likewise; a topic
    created before they were kept has the defaults. ``max_len`` keeps at most that many records per
    partition (older ones are trimmed on append; offsets never change). ``max_record_bytes``,
    ``max_batch_records`` and ``max_batch_bytes`` bound what one send may carry.
    """

    def __init__(
        self,
        context: Context,
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
    ) -> None:
        self.name = validate_name("topic", name)
        if partitions is not None:
            check_int("partitions", partitions, minimum=1)
            if partitions > 100_000:
                raise InvalidArgument(f"partitions={partitions} is over the limit of 100000")
        if max_len is not None:
            check_int("max_len", max_len, minimum=0)
        state_ttl = None if producer_state_ttl is None else validate_state_ttl(producer_state_ttl)
        if dedup_window is not None:
            check_int("dedup_window", dedup_window, minimum=1)
            if dedup_window > MAX_DEDUP_WINDOW:
                raise InvalidArgument(
                    f"dedup_window={dedup_window} is over the limit of {MAX_DEDUP_WINDOW} "
                    "batches: a window that large costs every producer "
                    "that much memory per partition"
                )
        id_window = message_id_window_arg(message_id_window, message_id_ttl)
        self._requested = partitions
        self.limits = Limits(max_record_bytes, max_batch_records, max_batch_bytes)
        self._meta = TopicMetadata(
            context,
            self.name,
            self.limits,
            partitions=partitions,
            max_len=max_len,
            producer_state_ttl=state_ttl,
            dedup_window=dedup_window,
            message_id_window=id_window,
        )
        bind(self, self._meta)

    # -- metadata ---------------------------------------------------------------------------

    async def open(self) -> Topic:
        """Create or check the topic's metadata now (otherwise done on first use).

        >>> topic = await client.topic("orders", partitions=4).open()    # created here if new
        """
        await self._meta.open()
        return self

    @property
    def _opened(self) -> bool:
        return self._meta.opened

    @property
    def producer_state_ttl(self) -> float:
        """Seconds after its last write that a producer's state is kept on this topic (fixed
        at creation; the topic must be open).

        >>> (await client.topic("orders").open()).producer_state_ttl      # doctest: +SKIP
        604800.0
        """
        runtime.require_open(self)
        return self._meta.producer_state_ttl

    @property
    def dedup_window(self) -> int:
        """How many of an idempotent producer's last batches per partition a resend is
        answered from (fixed at creation; the topic must be open).

        >>> (await client.topic("orders").open()).dedup_window           # doctest: +SKIP
        5
        """
        runtime.require_open(self)
        return self._meta.info.dedup_window

    @property
    def message_id_window(self) -> tuple[int, float]:
        """How many message ids per partition are remembered, and for how many seconds
        (fixed at creation; the topic must be open).

        >>> (await client.topic("orders").open()).message_id_window      # doctest: +SKIP
        (10000, 3600.0)
        """
        runtime.require_open(self)
        info = self._meta.info
        return info.message_id_window, info.message_id_ttl_ms / 1000.0

    @property
    def partitions(self) -> int:
        """The number of partitions (the topic must be open: the sync flavour opens it here).

        >>> (await client.topic("orders", partitions=4).open()).partitions
        4
        """
        runtime.require_open(self)
        return self._meta.partitions

    @property
    def incarnation(self) -> str:
        """The random id created with the topic (the topic must be open).

        >>> (await client.topic("orders").open()).incarnation           # doctest: +SKIP
        '5f0c9a1e2b7d4c3a'
        """
        runtime.require_open(self)
        return self._meta.incarnation

    def partition_for(self, key: bytes | str) -> int:
        """The partition of a key: Kafka's murmur2, so keys land where Kafka puts them.

        >>> topic.partition_for(b"user-1")                               # doctest: +SKIP
        2
        """
        runtime.require_open(self)
        return self._meta.partition_for(key)

    async def offsets(self, partition: int) -> tuple[int, int]:
        """``(start, next)``: the first retained offset and the next offset to be written.

        >>> start, next_offset = await topic.offsets(0)
        """
        return await self._meta.offsets(partition)

    async def trim(self, partition: int, *, before_offset: int) -> int:
        """Drop the records before ``before_offset``; returns the first retained offset.

        Offsets of the records kept never change (G6). Trimming past the end raises
        :class:`~fencing.OffsetOutOfRange`; trimming below the current start does nothing.

        >>> await topic.trim(0, before_offset=1000)                      # doctest: +SKIP
        1000
        """
        meta = self._meta
        await meta.open()
        pk = meta.partition_keys(partition)
        before = check_int("before_offset", before_offset)
        info = await meta.driver().execute(
            protocol.topic.trim(
                pk, incarnation=meta.incarnation_of(pk.partition), before_offset=before
            ),
            meta.budget,
        )
        meta.saw_next(pk.partition, info.next_offset)
        return info.start_offset

    # -- handles -----------------------------------------------------------------------------

    @runtime.opening
    async def producer(
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
        short raises :class:`~fencing.NotEnoughReplicas` (design.md, "Durability").

        Sends to one partition while a call is in flight there go together in the next
        call (group commit). ``linger_ms`` and ``batch_size`` (bytes) are for
        :meth:`Producer.send_async`, as in Kafka: its sender waits up to ``linger_ms`` for
        more records unless ``batch_size`` bytes are queued.

        >>> async with topic.producer(fencing.AccessMode.EXCLUSIVE) as p:
        ...     await p.send(b"v", key=b"k")
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
        return await producer.open()

    @runtime.opening
    async def consumer(
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
        "replicated" or "fsync"; design.md, "Durability"). A commit that a failover
        lost is reported: the next ``commit()`` raises :class:`~fencing.StateLost`.

        >>> async with topic.consumer("billing", "host-a", partitions=[0]) as c:
        ...     records = await c.poll(max_records=100, block_ms=1000)
        ...     await c.commit()
        """
        await self._meta.open()
        return await open_consumer(
            self,
            group,
            member_id,
            partitions,
            start,
            ttl=ttl,
            wait=wait,
            timeout=timeout,
            acks=acks,
        )

    @runtime.opening
    async def reader(
        self,
        partition: int,
        start_offset: StartOffset = "earliest",
        end_offset: EndOffset = None,
    ) -> Reader:
        """A reader of one partition from ``start_offset`` (an int, "earliest" or "latest").

        ``end_offset`` makes it stop before that offset (exclusive) instead of tailing:
        an int, or "latest" (the end as it is now, when ``reader()`` is called: a
        snapshot); once there, ``read()`` returns ``[]`` at once and iterating ends. None
        (the default) tails for ever.

        Raises :class:`~fencing.OffsetOutOfRange` for an offset below the first retained
        record or past the next offset.

        >>> async with topic.reader(0, "earliest", end_offset="latest") as reader:
        ...     snapshot = [record async for record in reader]            # doctest: +SKIP
        """
        await self._meta.open()
        return await open_reader(self, partition, start_offset, end_offset)

    async def end_offsets(self) -> dict[int, int]:
        """``{partition: next offset}`` for every partition: the end of each log now (what
        a reader made with ``end_offset="latest"`` stops at).

        >>> await topic.end_offsets()                                     # doctest: +SKIP
        {0: 12, 1: 0}
        """
        meta = self._meta
        await meta.open()
        return {p: (await meta.offsets(p))[1] for p in range(meta.partitions)}

    def __repr__(self) -> str:
        n = self._meta.partitions if self._meta.opened else self._requested
        return f"<fencing.Topic {self.name!r} partitions={n}>"

# GENERATED from fencing/_async/producer.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""Producers: ``topic.producer(access_mode=...)`` (Pulsar's access modes and PIP-68 on Redis).

Every send is one script call (one round trip) that checks, before writing, that this
producer still holds its epoch on the partition (G2), then appends the batch whole or not
at all (G4), at ``expected_offset`` if given (G3). Leases are renewed in the background
every ttl/3 by the client's keeper thread, off the hot path.

The access modes (``SHARED``, ``EXCLUSIVE``, ``WAIT_FOR_EXCLUSIVE``,
``EXCLUSIVE_WITH_FENCING``: Pulsar's) are told in :mod:`.lease`.

A superseded producer's sends raise :class:`~fencing.ProducerFenced`, and every later send
on that object fails without a round trip.

The :class:`Producer` is the face over objects of one job each: the lease on each
partition (:mod:`.lease`), the producer id over its life (:mod:`.producer_ids`), each
partition's queue (:mod:`.partition_queue`) and the call that carries its head
(:mod:`.group_send`), the outcomes of calls and pending batches (:mod:`.outcomes`), the
sender of ``send_async`` (:mod:`.sender`), and the calls made on a held partition outside
its queue (:mod:`.held_calls`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from .. import _group_commit as group_commit
from .. import _protocol as protocol
from .. import _telemetry as telemetry
from .._durability import Durability
from .._fixed import FixedSettings
from .._group_commit import Entry
from .._keys import slot_of, validate_name
from .._modes import AccessMode
from .._partitioner import Placement, as_records, batch_partition
from .._process import ProcessBound
from .._protocol.topic import Writer
from .._record import Record, RecordMetadata
from .._runtime.threads import primitives as runtime
from .._state import ProducerState
from .._validate import check_expected_offset, producer_args, validate_ttl, wait_timeout_arg
from ..errors import (
    FencingError,
    InvalidArgument,
)
from .held_calls import HeldCalls
from .lease import Lease
from .metadata import TopicFace, metadata_of
from .outcomes import Outcomes
from .partition_queue import PartitionQueue
from .producer_ids import ProducerIds
from .sender import Sender
from .standing import Answers, Calls, Resolution, Standing, Status, Wakeup

if TYPE_CHECKING:
    from .._runtime.threads.keeper import Task

T = TypeVar("T")


class Producer(ProcessBound, FixedSettings):
    """Appends records to a topic. Thread-safe; bound to the process that made it.

    Made by :meth:`Topic.producer`, which opens it (registers, claims or waits).

    >>> mode = fencing.AccessMode.WAIT_FOR_EXCLUSIVE
    >>> with topic.producer(access_mode=mode) as producer:
    ...     md = producer.send(b"v", key=b"k")           # partition by murmur2(key)
    ...     mds = producer.send_batch([fencing.Record(b"a"), fencing.Record(b"b")],
    ...                               partition=0, expected_offset=md.offset + 1)
    """

    #: The arguments a producer is made with, handed to its parts then.
    _FIXED = frozenset(
        {"access_mode", "name", "lease_ttl", "wait_timeout", "idempotent", "resume",
         "durability", "linger_ms", "batch_size", "topic", "session"}
    )  # fmt: skip
    _KIND = "producer"

    def __init__(
        self,
        topic: TopicFace,
        access_mode: AccessMode = AccessMode.SHARED,
        name: str | None = None,
        *,
        lease_ttl: float = 10.0,
        wait_timeout: float | None = None,
        idempotent: bool = True,
        resume: ProducerState | None = None,
        acks: str = "leader",
        linger_ms: float = 0.0,
        batch_size: int = 16384,
    ) -> None:
        meta = metadata_of(topic)  # InvalidArgumentType for anything but a topic
        producer_args(
            topic.name,
            access_mode,
            wait_timeout=wait_timeout,
            idempotent=idempotent,
            resume=resume,
            linger_ms=linger_ms,
            batch_size=batch_size,
        )
        #: The topic it appends to.
        self.topic = topic
        self.access_mode = access_mode
        self.name = None if name is None else validate_name("producer", name)
        self.lease_ttl = validate_ttl(lease_ttl, "lease_ttl")
        self.wait_timeout = wait_timeout_arg(wait_timeout)
        self.idempotent = idempotent
        self.resume = resume
        #: The producer's identity: drawn now, never shared with another producer object.
        self.session = secrets.token_hex(16)
        self._meta = meta
        context = meta.context
        calls = self._calls = Calls(context, context.budget_for_ttl(self.lease_ttl))
        #: What each send waits for (``acks``): at most half a socket timeout, so the wait
        #: ends (short, and says so) before the read of its reply could time out.
        self.durability = Durability.of(acks, timeout=calls.budget.timeout / 2)
        #: send_async(): how long the sender lingers for more records, and how many bytes
        #: end the linger early (Kafka's linger.ms and batch.size).
        self.linger_ms = float(linger_ms)
        self.batch_size = batch_size
        self._context = context
        self._lock = runtime.io_lock()
        self._placement = Placement(topic)
        status = self._status = Status()
        answers = self._answers = Answers()
        wakeup = self._wakeup = Wakeup()
        self._ids = ProducerIds(context, meta, calls, self.session, name=self.name, resume=resume)
        self._lease = Lease(
            context,
            meta,
            calls,
            status=status,
            session=self.session,
            access_mode=access_mode,
            name=self.name,
            lease_ttl=self.lease_ttl,
            wait_timeout=self.wait_timeout,
        )
        self._outcomes = Outcomes(
            meta, calls, session=self.session, status=status, answers=answers, fence=self._fence
        )
        #: Each partition's queue, filled as the producer opens.
        self._queues: dict[int, PartitionQueue] = {}
        self._sender = Sender(
            self._queues,
            status,
            answers,
            wakeup,
            linger_ms=self.linger_ms,
            batch_size=batch_size,
            name=f"fencing-sender-{self.session[:8]}",
        )
        self._held = HeldCalls(
            calls, self.durability, renew_call=self._lease.renew_call, fence=self._fence
        )
        self._renewal: Task | None = None
        self._bind_process()

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> Producer:
        """Register on every partition in the access mode (blocks in WAIT_FOR_EXCLUSIVE).

        Partitions are taken one by one in ascending slot order; if one is refused, those
        already taken are released and the error (:class:`~fencing.ProducerBusy`) raised.

        >>> producer = topic.producer(access_mode=fencing.AccessMode.EXCLUSIVE)  # opens
        >>> producer.open()                     # again: nothing more to do
        """
        self._check_process()
        status = self._status
        if status.closed:
            raise InvalidArgument("this producer is closed: make a new one with topic.producer()")
        with self._lock:
            if status.opened:
                return self
            meta, ids = self._meta, self._ids
            meta.open()
            self._context.check_durability(self.durability)
            ticket = ids.open()
            parts = [meta.partition_keys(p) for p in range(meta.partitions)]
            ordered = sorted(parts, key=lambda k: (slot_of(k.owner), k.partition))
            deadline = None if self.wait_timeout is None else time.monotonic() + self.wait_timeout
            try:
                # A new incarnation (name or resume=) bumps the PID generation everywhere
                # first, so the older one is fenced on every partition before we return.
                opened = [ids.incarnation(pk, ticket) for pk in ordered]
                ids.current = opened[0].pid  # a known name keeps its PID
                for pk, pid_opened in zip(ordered, opened, strict=True):
                    standing = self._lease.register(pk, deadline, pid_opened, ids.current)
                    self._queues[pk.partition] = self._queue_for(standing)
                    if self._renewal is None:
                        self._renewal = self._context.keeper.schedule(
                            self.lease_ttl / 3.0, self._renew_all
                        )
            except BaseException:
                if self._renewal is not None:
                    self._renewal.cancel()
                    self._renewal = None
                self._lease.release(self._standings())
                raise
            status.opened = True
        return self

    def _queue_for(self, standing: Standing) -> PartitionQueue:
        return PartitionQueue(
            standing,
            self._meta,
            self._calls,
            outcomes=self._outcomes,
            ids=self._ids,
            status=self._status,
            answers=self._answers,
            wakeup=self._wakeup,
            durability=self.durability,
            idempotent=self.idempotent,
            name=self.name,
        )

    def _standings(self) -> list[Standing]:
        return [queue.standing for queue in list(self._queues.values())]

    def _renew_all(self) -> bool:
        """Keeper task: renew every partition's lease. False stops the task."""
        status = self._status
        if status.closed or status.fenced is not None or not self._in_own_process():
            return False
        fenced = self._lease.renew_all(self._standings())
        if fenced is not None:
            self._fence(fenced)
            self._answers.deliver()  # (no partition's call is held here)
            return False
        return True

    def _fence(self, exc: FencingError) -> None:
        """Fenced for good: stop renewing and leave every partition, so that a successor
        waiting for it (say, the incarnation that fenced it through resume=) gets it now,
        not when the lease lapses."""
        status = self._status
        if status.fenced is None:
            status.fenced = exc
            self._lease.meter.lost()
        if self._renewal is not None:
            self._renewal.cancel()
        for queue in list(self._queues.values()):
            queue.sending.fail_all(status.fenced)
        self._wakeup.set()  # the sender, if any, ends
        self._lease.release(self._standings())

    def close(self) -> None:
        """Leave every partition at once (waiters are woken). Idempotent.

        Every partition is left, then :class:`~fencing.StateLost` is raised if one showed
        that the store lost writes this producer saw (its last sends may be gone) and no
        earlier call told it so (not for an operator's delete of the topic, which removed
        them on purpose). In a forked child this does nothing at all: the lease is the
        parent's.

        >>> producer.close()        # or leave ``with topic.producer() as producer``
        """
        status = self._status
        if (status.closed and self._lease.released) or not self._in_own_process():
            return
        flush = status.opened and status.fenced is None and not status.closed
        status.closed = True  # no new send from now on; an open() waiting gives up on it
        self._wakeup.set()  # the sender, if any, ends
        if flush:
            self.flush()  # what was queued before is sent (or fails) first
        self._lease.wake_waiter()  # an open() waiting gives up now, not at its next turn
        with self._lock:
            if self._renewal is not None:
                self._renewal.cancel()
            closed = InvalidArgument("the producer was closed before this record was sent")
            for queue in list(self._queues.values()):
                queue.sending.fail_all(closed)
            self._answers.deliver()
            lost = self._lease.release(self._standings())
        # (A producer already fenced was told by the call that fenced it; an operator's
        # delete removed the writes on purpose: the close does not raise for it.)
        if lost is not None and status.fenced is None and lost.reason != "deleted":
            raise lost

    def __enter__(self) -> Producer:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state -------------------------------------------------------------------------------

    @property
    def _opened(self) -> bool:
        return self._status.opened

    @property
    def producer_id(self) -> int:
        """The producer id written with every record (the producer must be open).

        >>> producer.producer_id                                         # doctest: +SKIP
        42
        """
        if not self._status.opened:
            runtime.require_open(self)
        assert self._ids.current is not None
        return self._ids.current

    def epoch(self, partition: int) -> int:
        """The epoch this producer holds (or registered under) on ``partition``.

        >>> producer.epoch(0)                                            # doctest: +SKIP
        3
        """
        if not self._status.opened:
            runtime.require_open(self)
        pk = self._meta.partition_keys(partition)
        return self._queues[pk.partition].standing.writer.epoch

    @property
    def fenced(self) -> bool:
        """True once the producer was superseded (permanent).

        >>> try:
        ...     producer.send(b"v", partition=0)
        ... except fencing.ProducerFenced:
        ...     assert producer.fenced            # every later send fails at once
        """
        return self._status.fenced is not None

    @property
    def last_resolution(self) -> tuple[int, Resolution] | None:
        """How the last pending batch was resolved: (partition, its metadata if it landed,
        the :class:`~fencing.DuplicateSequence` that refused it if its sequences were
        written before - its records are in the log, offsets forgotten - or None if it did
        not land and never will).

        >>> producer.send(b"next", partition=0)   # settles a pending batch first
        >>> producer.last_resolution                                     # doctest: +SKIP
        (0, None)
        """
        return self._status.last_resolution

    @last_resolution.setter
    def last_resolution(self, value: tuple[int, Resolution] | None) -> None:
        self._status.last_resolution = value

    @property
    def state(self) -> ProducerState:
        """PID, generations and next sequence per partition: save it to resume later (the
        producer must be open).

        >>> saved = producer.state.to_json()          # keep it with your checkpoint
        >>> state = fencing.ProducerState.from_json(saved)
        >>> producer = topic.producer(resume=state)                # same PID, sequences
        """
        if not self._status.opened:
            runtime.require_open(self)
        return self._ids.state({p: q.standing for p, q in self._queues.items()})

    # -- sending -----------------------------------------------------------------------------

    def send(
        self,
        value: bytes | str,
        key: bytes | str | None = None,
        headers: Mapping[str, bytes | str] | None = None,
        partition: int | None = None,
        expected_offset: int | None = None,
        *,
        message_id: str | None = None,
    ) -> RecordMetadata:
        """Append one record; returns where it landed.

        Without ``partition`` the key picks one (Kafka's murmur2); records without a key go
        round-robin, or by their ``message_id`` if they have one. ``expected_offset`` needs
        an explicit partition unless the topic has one.

        ``message_id`` is the application's own id of the record: if a record with that id
        was appended to the partition within the topic's id window, this one is not, and
        the original's metadata is returned with ``duplicate`` set, whoever sent it. So a
        send whose outcome is unknown (a timeout, a cancelled task, a crash) is simply sent
        again with the same id.

        >>> md = producer.send(b"hello", key=b"user-1")
        >>> md.partition, md.offset                                      # doctest: +SKIP
        (2, 0)
        >>> md = producer.send(b"order 17", message_id="order-17")
        >>> (producer.send(b"order 17", message_id="order-17")).duplicate
        True
        """
        entry = group_commit.encode_one(
            value, key, headers, self._meta.limits, expected_offset, message_id=message_id
        )
        partition = self._placement.partition(
            partition, entry.parts, key, message_id, expected_offset
        )
        return (self._send(entry, partition))[0]

    def send_batch(
        self,
        records: Iterable[Record | bytes | str],
        partition: int | None = None,
        expected_offset: int | None = None,
    ) -> list[RecordMetadata]:
        """Append a batch to one partition, all or nothing, in one round trip.

        With ``expected_offset=k`` the batch lands at offsets k, k+1, ... or not at all
        (:class:`~fencing.OffsetMismatch` carries the real next offset). Sends queued on
        the partition meanwhile may travel in the same call (group commit); a batch with
        ``expected_offset`` always goes alone.

        >>> mds = producer.send_batch([b"a", b"b"], partition=0, expected_offset=10)
        >>> [md.offset for md in mds]                                    # doctest: +SKIP
        [10, 11]
        """
        if self._status.fenced is None and (not self._status.opened or self._status.closed):
            self.open()  # opens, or raises for a closed producer
        records_list = as_records(records)
        batch = protocol.topic.encode_batch(records_list, self._meta.limits, checksum=False)
        if partition is None:
            partition = batch_partition(self.topic, records_list, expected_offset)
        return self._send(Entry.of(batch, expected_offset), partition)

    def _send(self, entry: Entry, partition: int) -> list[RecordMetadata]:
        """Queue an entry on its partition and wait for its answer (group commit)."""
        fenced = self._ready()
        queue = self._queue_of(partition)
        check_expected_offset(entry.expected_offset)
        if not telemetry.enabled():  # (nothing to record: no provider was set)
            if fenced is not None:
                raise fenced
            return queue.submit(entry)
        return queue.submit_measured(entry, fenced)

    def _ready(self) -> FencingError | None:
        """The fence this producer is under, or None once it is open (opened now if need
        be: a closed producer raises) and used in its own process."""
        status = self._status
        fenced = status.fenced
        if fenced is None:
            if not status.opened or status.closed:
                self.open()  # opens, or raises for a closed producer
            self._check_process()
        return fenced

    def _queue_of(self, partition: object) -> PartitionQueue:
        """The queue of ``partition`` (refused if the topic has no such partition)."""
        queue = self._queues.get(partition) if type(partition) is int else None
        if queue is None:
            queue = self._queues[self._meta.partition_keys(partition).partition]
        return queue

    def send_async(
        self,
        value: bytes | str,
        key: bytes | str | None = None,
        headers: Mapping[str, bytes | str] | None = None,
        partition: int | None = None,
        *,
        message_id: str | None = None,
    ) -> runtime.Future[RecordMetadata]:
        """Queue one record and return at once with a future of its metadata (Kafka's
        ``send()``): records queued while a call is in flight go together in the next one.

        A sender in the background sends them, after ``linger_ms`` (or once ``batch_size``
        bytes are queued); :meth:`flush` sends what is queued and waits; ``close()``
        flushes. Each future gets its record's metadata or its batch's error; once the
        producer is fenced, every queued future fails with :class:`~fencing.ProducerFenced`.

        >>> futures = [producer.send_async(b"v%d" % i) for i in range(1000)]
        >>> producer.flush()
        >>> offsets = [f.result().offset for f in futures]

        ``message_id`` is as for :meth:`send`: each record with an id is judged on its own
        (one caller's known id never fails another's records in the same call).
        """
        fenced = self._ready()
        future: runtime.Future[RecordMetadata] = runtime.new_future()
        entry = group_commit.encode_one(
            value, key, headers, self._meta.limits, future=future, message_id=message_id
        )
        partition = self._placement.partition(partition, entry.parts, key, message_id)
        queue = self._queue_of(partition)
        if fenced is not None:
            queue.standing.meter.records("fenced", 1)  # (counted as the queued ones are)
            raise fenced
        self._sender.enqueue(queue, entry)
        return future

    def flush(self) -> None:
        """Send every record queued by :meth:`send_async` and wait until each is answered
        (errors go to their futures, not here).

        >>> producer.flush()
        """
        self._check_process()
        self._sender.flush()

    def resolve(self, partition: int) -> list[RecordMetadata] | None:
        """Settle a batch whose send raised OutcomeUnknown on ``partition``, in one script.

        Returns the batch's metadata if it landed (once), or None if it did not — and then
        it never will: the PID generation was bumped so no copy still in flight can land.
        Also returns None when nothing is pending. Raises
        :class:`~fencing.UnknownProducerId` if the producer state expired meanwhile. With
        ``acks`` above "leader", a batch that landed is also waited for (a lease renewal
        written on the same connection carries the wait, which then covers the batch):
        :class:`~fencing.NotEnoughReplicas` if that falls short.

        >>> try:
        ...     producer.send(b"v", partition=0)
        ... except fencing.OutcomeUnknown:
        ...     landed = producer.resolve(0)    # its metadata, or None: never lands
        """
        self._check_process()
        return self._held.resolve(
            self._queues[self._meta.partition_keys(partition).partition]
        )

    def _fenced_call(
        self, partition: int, build: Callable[[Writer], protocol.ScriptCall[T]]
    ) -> T:
        """Run a call fenced by this producer's standing on ``partition`` (the Spark sink's
        appends), holding the partition; a fence ends the producer as for a send."""
        fenced = self._ready()
        if fenced is not None:
            raise fenced
        queue = self._queues[self._meta.partition_keys(partition).partition]
        return self._held.run(queue, build, lambda: self._status.fenced)

    def __repr__(self) -> str:
        return (
            f"<fencing.Producer topic={self.topic.name!r} mode={self.access_mode.name} "
            f"id={self._ids.current} session={self.session[:8]}…>"
        )


def fenced_call(
    producer: Producer, partition: int, build: Callable[[Writer], protocol.ScriptCall[T]]
) -> T:
    """Run the call ``build(writer)`` makes, fenced by ``producer``'s standing on
    ``partition``: the hook of the Spark sink, whose appends go through a producer.

    >>> done = fenced_call(producer, 0, lambda writer: protocol.sink.append(...))
    """
    return producer._fenced_call(partition, build)

"""Producers: ``topic.producer(access_mode=...)`` (Pulsar's access modes and PIP-68 on Redis).

Every send is one script call (one round trip) that checks, before writing, that this
producer still holds its epoch on the partition (G2), then appends the batch whole or not
at all (G4), at ``expected_offset`` if given (G3). Leases are renewed in the background
every ttl/3 by the client's keeper thread, off the hot path.

Access modes:

- ``SHARED`` (default): many producers append; refused while an exclusive producer or a
  waiter lives; fenced once an exclusive producer moves the epoch.
- ``EXCLUSIVE``: refused at once (:class:`~fencing.ProducerBusy`) while any other producer
  lives; otherwise epoch + 1 and nobody else may append.
- ``WAIT_FOR_EXCLUSIVE``: queues (FIFO, each waiter holding its own lease) until it can be
  exclusive; woken by pub/sub when the holder closes, or when its lease lapses.
- ``EXCLUSIVE_WITH_FENCING``: always takes over: epoch + 1; the holder, the shared
  producers and the waiters are fenced.

A superseded producer's sends raise :class:`~fencing.ProducerFenced`, and every later send
on that object fails without a round trip.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from .. import _group_commit as group_commit
from .. import _protocol as protocol
from .._durability import Durability
from .._group_commit import Entry
from .._keys import PartitionKeys, slot_of, validate_name
from .._modes import AccessMode, Pending
from .._process import ProcessBound
from .._protocol.producer import OPEN_MODES
from .._protocol.topic import Appended, EncodedBatch, Sequenced, Writer
from .._record import Record, RecordMetadata, to_bytes
from .._runtime.tasks import primitives as runtime
from .._state import ProducerState
from .._validate import MAX_OFFSET, check_int, validate_ttl
from ..errors import (
    DuplicateSequence,
    FencingError,
    InvalidArgument,
    InvalidArgumentType,
    OutcomeUnknown,
    ProducerBusy,
    ProducerFenced,
    StateLost,
    Unavailable,
    UnknownProducerId,
)
from .metadata import TopicFace, metadata_of

if TYPE_CHECKING:
    from .._runtime.tasks.keeper import Task
    from .._runtime.tasks.notify import Subscription

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Calls a sender makes for others once its own records are answered, before it lets the
#: partition's lock go and wakes the next queued caller to go on (bounds its latency).
_SERVE_AFTER_OWN = 8
#: DuplicateSequence reasons for sequences that were written before: the producer goes on
#: after them (a batch that straddles the last written sequence is refused, not skipped).
_WRITTEN_BEFORE = frozenset({"older-than-window", "other-records"})
#: How long a queued send sleeps before it looks at the lock again on its own.
_RECHECK_SECONDS = 0.5
#: How long a sender waits for the callers it answered to run (threads: see
#: _let_answered_run) before it sends what is queued anyway.
_CHAIN_WAIT = 0.002


class _Standing:
    """What this producer holds on one partition. Mutated only under ``lock``."""

    __slots__ = (
        "errors",
        "floor",
        "generation",
        "guard",
        "left",
        "lock",
        "next_sequence",
        "pending",
        "pid",
        "pk",
        "queue",
        "to_wake",
        "writer",
    )

    def __init__(
        self,
        pk: PartitionKeys,
        writer: Writer,
        pid: int,
        generation: int,
        seq: int,
        *,
        floor: int = 0,
    ):
        self.pk = pk
        self.writer = writer
        self.lock = runtime.io_lock()
        self.pid = pid
        self.generation = generation
        self.next_sequence = seq
        #: Sequences from here on were never sent by an older incarnation of this PID: the
        #: first attempt of a batch at or past it is fresh (may start the PID's state anew).
        #: Below it a batch may be a resend (a resumed state behind the server's).
        self.floor = floor
        self.pending: Pending | None = None
        #: Set once this producer left the partition (closed or gave up opening).
        self.left = False
        self.errors = protocol.producer.producer_errors(pk)  # built once, not per send
        #: Sends waiting for the call in flight (group commit): taken by the lock's holder.
        self.queue: deque[Entry] = deque()
        #: Guards the queue's head (taking, withdrawing), never held across I/O.
        self.guard = runtime.state_lock()
        #: The first of the callers last answered, not woken yet (see group_commit.settle):
        #: woken as the next call leaves, or as the lock is let go.
        self.to_wake: Entry | None = None


class _Progress:
    """How far one group's call got (what an interrupt must still answer)."""

    __slots__ = ("appended", "batch", "counted", "failed", "sent_at", "sequenced")

    def __init__(self) -> None:
        self.batch: EncodedBatch | None = None
        self.sequenced: Sequenced | None = None
        self.sent_at: float | None = None
        self.appended: Appended | None = None
        self.counted = False
        self.failed = False


def _settled(entry: Entry) -> bool:
    """Whether a queued entry needs nothing more (answered, or given up by its caller)."""
    return entry.done or entry.abandoned or (entry.future is not None and entry.future.cancelled())


def _as_record(item: Record | bytes | str) -> Record:
    return item if isinstance(item, Record) else Record(to_bytes("record", item))


class Producer(ProcessBound):
    """Appends records to a topic. Thread-safe; bound to the process that made it.

    Made by :meth:`Topic.producer`, which opens it (registers, claims or waits).

    >>> mode = fencing.AccessMode.WAIT_FOR_EXCLUSIVE
    >>> async with await topic.producer(access_mode=mode) as producer:
    ...     md = await producer.send(b"v", key=b"k")           # partition by murmur2(key)
    ...     mds = await producer.send_batch([fencing.Record(b"a"), fencing.Record(b"b")],
    ...                               partition=0, expected_offset=md.offset + 1)
    """

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
        if isinstance(linger_ms, bool) or not isinstance(linger_ms, (int, float)):
            raise InvalidArgumentType(
                f"linger_ms must be a number of milliseconds, got {type(linger_ms).__name__}"
            )
        if not math.isfinite(linger_ms) or not 0 <= linger_ms <= 60_000:
            raise InvalidArgument(
                f"linger_ms must be between 0 and 60000 milliseconds, got {linger_ms!r}"
            )
        check_int("batch_size", batch_size, minimum=1)
        if not isinstance(idempotent, bool):
            raise InvalidArgumentType("idempotent must be a bool")
        if resume is not None:
            if not isinstance(resume, ProducerState):
                raise InvalidArgumentType(
                    f"resume must be a fencing.ProducerState, got {type(resume).__name__}"
                )
            if resume.topic != topic.name:
                raise InvalidArgument(
                    f"resume= holds the state of topic {resume.topic!r}, not {topic.name!r}"
                )
            if not idempotent:
                raise InvalidArgument("resume= needs an idempotent producer")
        if not isinstance(access_mode, AccessMode):
            raise InvalidArgumentType(
                f"access_mode must be a fencing.AccessMode, got {type(access_mode).__name__}"
            )
        #: The topic it appends to.
        self.topic = topic
        self._meta = metadata_of(topic)
        self._context = self._meta.context
        self.access_mode = access_mode
        self.name = None if name is None else validate_name("producer name", name)
        self.lease_ttl = validate_ttl(lease_ttl, "lease_ttl")
        if wait_timeout is not None:
            if isinstance(wait_timeout, bool) or not isinstance(wait_timeout, (int, float)):
                raise InvalidArgumentType("wait_timeout must be None or seconds")
            if not math.isfinite(wait_timeout) or wait_timeout < 0:
                raise InvalidArgument(
                    f"wait_timeout must be None (wait for ever) or a finite number of seconds "
                    f">= 0, got {wait_timeout!r}"
                )
        self.wait_timeout = wait_timeout
        self.idempotent = idempotent
        self.resume = resume
        #: How the last pending batch was resolved: (partition, its metadata or None).
        self.last_resolution: tuple[int, list[RecordMetadata] | None] | None = None
        #: The producer's identity: drawn now, never shared with another producer object.
        self.session = secrets.token_hex(16)
        self._ttl_ms = max(1, round(self.lease_ttl * 1000))
        self._budget = self._context.budget_for_ttl(self.lease_ttl)
        #: What each send waits for (``acks``): at most half a socket timeout, so the wait
        #: ends (short, and says so) before the read of its reply could time out.
        self.durability = Durability.of(acks, timeout=self._budget.timeout / 2)
        self._lock = runtime.io_lock()
        self._round_robin = itertools.count()
        self._producer_id: int | None = None
        #: PIDs this producer gave up for a fresh one (state expired while idle): a
        #: partition still on one moves to the current PID before its next send.
        self._retired: frozenset[int] = frozenset()
        #: Held while a fresh PID is drawn (one draw, whichever partitions find out).
        self._rekey = runtime.io_lock()
        self._standing: dict[int, _Standing] = {}
        self._fenced: FencingError | None = None
        self._renewal: Task | None = None
        self._opened = False
        self._closed = False
        self._released = False
        #: The subscription an open() waiting in a queue sleeps on (close() wakes it).
        self._wait_sub: Subscription | None = None
        #: send_async(): how long the sender lingers for more records, and how many bytes
        #: end the linger early (Kafka's linger.ms and batch.size).
        self.linger_ms = float(linger_ms)
        self.batch_size = batch_size
        self._sender: object | None = None
        self._to_send = runtime.Event()
        #: Bytes send_async() queued since the sender last took the queues: while it
        #: lingers, only a send that brings this to batch_size wakes it. (A count kept
        #: without a lock: a lost update only ends one linger early or at its deadline.)
        self._queued_bytes = 0
        #: The sender is lingering (only a send that fills batch_size wakes it then).
        self._lingering = False
        self._flushing = False
        #: Answers of send_async() futures, given once no partition lock is held.
        self._answers: list[tuple[list[runtime.Future[RecordMetadata]], list[object]]] = []
        self._answers_guard = runtime.state_lock()
        self._delivering = runtime.state_lock()
        self._bind_process()

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> Producer:
        """Register on every partition in the access mode (blocks in WAIT_FOR_EXCLUSIVE).

        Partitions are taken one by one in ascending slot order; if one is refused, those
        already taken are released and the error (:class:`~fencing.ProducerBusy`) raised.
        """
        self._check_process()
        if self._closed:
            raise InvalidArgument("this producer is closed: make a new one with topic.producer()")
        async with self._lock:
            if self._opened:
                return self
            meta = self._meta
            await meta.open()
            await self._context.check_durability(self.durability)
            if self.resume is not None:
                self._check_history(self.resume)
                await self._context.check_producer_id(self.resume.producer_id)
                self._producer_id = self.resume.producer_id
            else:
                self._producer_id = await self._context.allocate_producer_id()
            ticket = None
            if self.name is not None or self.resume is not None:
                # One ticket for the whole topic orders this open against any other of the
                # same name (or saved state) racing it over the partitions.
                # (A saved state of a named producer is an open of that name: both take the
                # name's tickets, or a resume racing an open of the name would go unordered.)
                named = self.name if self.resume is None else self.name or self.resume.name
                ticket = await self._execute(
                    protocol.producer.producer_ticket(
                        meta.meta_key,
                        meta.name,
                        incarnation=meta.incarnation,
                        name=named,
                        pid=self._producer_id,
                    )
                )
                if self.resume is None:
                    self._producer_id = ticket.pid  # a name's racing first opens agree
            parts = [meta.partition_keys(p) for p in range(meta.partitions)]
            ordered = sorted(parts, key=lambda k: (slot_of(k.owner), k.partition))
            deadline = None if self.wait_timeout is None else time.monotonic() + self.wait_timeout
            try:
                # A new incarnation (name or resume=) bumps the PID generation everywhere
                # first, so the older one is fenced on every partition before we return.
                ids = [await self._incarnation(pk, ticket) for pk in ordered]
                self._producer_id = ids[0].pid  # a known name keeps its PID
                for pk, opened in zip(ordered, ids, strict=True):
                    self._standing[pk.partition] = await self._register(pk, deadline, opened)
                    if self._renewal is None:
                        self._renewal = self._context.keeper.schedule(
                            self.lease_ttl / 3.0, self._renew_all
                        )
            except BaseException:
                if self._renewal is not None:
                    self._renewal.cancel()
                    self._renewal = None
                await self._release_all()
                raise
            self._opened = True
        return self

    def _check_history(self, resume: ProducerState) -> None:
        """Refuse, before any write, a saved state of another store history (G9): one whose
        partitions were recreated since it was saved (FLUSHALL, a restart without
        persistence), where its PID may now be another producer's."""
        topic = self._meta
        if resume.topic != topic.name:
            return  # (refused with its own message by the producer's argument checks)
        for p, saved in sorted(resume.incarnations.items()):
            if p >= topic.partitions:
                continue
            current = topic.incarnation_of(p)
            if saved != current:
                raise StateLost(
                    f"the saved producer state was taken on partition {p} of topic "
                    f"{topic.name!r} as it was before the store lost its data (incarnation "
                    f"{saved}, now {current}): its producer id may belong to another producer "
                    "now. Nothing was written and nobody was fenced; open a producer without "
                    "resume= and restart the job from a position you can trust",
                    reason="incarnation",
                    key=topic.partition_keys(p).meta,
                )

    async def _incarnation(
        self, pk: PartitionKeys, ticket: protocol.producer.Ticket | None
    ) -> protocol.producer.PidOpened:
        """PID, generation, next sequence and floor of this producer on a partition."""
        assert self._producer_id is not None
        if self.name is None and self.resume is None:
            return protocol.producer.PidOpened(self._producer_id, 0, 0, 0)
        resume = self.resume
        call = protocol.producer.pid_open(
            pk,
            pid=self._producer_id,
            name=self.name,
            resume_generation=None if resume is None else resume.generations.get(pk.partition, 0),
            resume_next_sequence=None if resume is None else resume.next_sequence(pk.partition),
            session=self.session,
            incarnation=self._meta.incarnation_of(pk.partition),
            ticket=ticket,
        )
        return await self._execute(call)

    async def _register(
        self, pk: PartitionKeys, deadline: float | None, pid_opened: protocol.producer.PidOpened
    ) -> _Standing:
        mode = OPEN_MODES[self.access_mode.name]
        call = self._open_call(pk, mode, None)
        try:
            opened = await self._execute(call)
            if opened.status == "waiting":
                opened = await self._wait(pk, opened, deadline)
        except BaseException as exc:
            if not isinstance(exc, FencingError) or isinstance(exc, OutcomeUnknown):
                # Interrupted (a cancelled task, KeyboardInterrupt) or a lost reply: the
                # open may have registered this session in any of the three ways. Leave
                # them all, or a queue entry or a lease would outlive the producer.
                for left_mode, epoch in (("w", 0), ("s", 0), ("x", -1)):
                    await self._leave(pk, left_mode, epoch)
            raise
        writer = Writer(
            producer_id=str(pid_opened.pid),
            session=self.session,
            mode="s" if opened.status == "shared" else "x",
            epoch=opened.epoch,
            ttl_ms=self._ttl_ms,
            row_incarnation=opened.incarnation,
        )
        return _Standing(
            pk,
            writer,
            pid_opened.pid,
            pid_opened.generation,
            pid_opened.next_sequence,
            floor=pid_opened.written_next,
        )

    def _open_call(
        self, pk: PartitionKeys, mode: str, wgen: int | None, seen: str = ""
    ) -> protocol.ScriptCall[protocol.producer.Opened]:
        return protocol.producer.producer_open(
            pk,
            session=self.session,
            label=self.name or f"producer-{self._producer_id}",
            mode=mode,
            ttl_ms=self._ttl_ms,
            new_incarnation=secrets.token_hex(8),
            seen_incarnation=seen,
            wgen=wgen,
            session_channel_prefix=pk.session_prefix,
            partition_incarnation=self._meta.incarnation_of(pk.partition),
            named=self.name is not None,
        )

    async def _wait(
        self, pk: PartitionKeys, opened: protocol.producer.Opened, deadline: float | None
    ) -> protocol.producer.Opened:
        # Queued. Each attempt also renews this waiter's own lease, so attempts come at
        # least every ttl/3; between them sleep until the lease in the way ends (server
        # time, told by the script) or a release notification arrives.
        wgen, inc = opened.wgen, opened.incarnation
        notifier = self._context.notifier
        try:
            async with notifier.subscribe(pk.released) as sub:
                self._wait_sub = sub
                while True:
                    if self._closed:
                        raise ProducerBusy(
                            f"partition {pk.partition} of topic {self._meta.name!r}: the "
                            "producer was closed while it waited",
                            topic=self._meta.name,
                            partition=pk.partition,
                            reason="closed",
                            remaining=0.0,
                        )
                    opened = await self._execute(self._open_call(pk, "wait", wgen, inc))
                    if opened.status != "waiting":
                        return opened
                    pause = min(opened.remaining_ms / 1000.0 + 0.002, self.lease_ttl / 3.0)
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise ProducerBusy(
                                f"partition {pk.partition} of topic {self._meta.name!r}: still "
                                f"queued (position {opened.position}) after wait_timeout="
                                f"{self.wait_timeout}s",
                                topic=self._meta.name,
                                partition=pk.partition,
                                reason="waiting",
                                remaining=opened.remaining_ms / 1000.0,
                            )
                        pause = min(pause, left)
                    await sub.wait(pause)
        except BaseException:
            await self._leave(pk, "w", 0)
            raise
        finally:
            self._wait_sub = None

    async def _renew_all(self) -> bool:
        """Keeper task: renew every partition's lease. False stops the task."""
        if self._closed or self._fenced is not None or not self._in_own_process():
            return False
        for standing in list(self._standing.values()):
            call = self._renew_call(standing)
            try:
                await self._execute(call)
            except (ProducerFenced, StateLost) as exc:
                await self._fence(exc)
                self._deliver()  # (no partition lock is held here)
                return False
            except Unavailable:
                log.warning(
                    "redis-fencing: renewing %s partition %d failed; trying again",
                    self._meta.name,
                    standing.pk.partition,
                )
        return True

    def _renew_call(self, standing: _Standing) -> protocol.ScriptCall[int]:
        w = standing.writer
        return protocol.producer.producer_renew(
            standing.pk,
            session=self.session,
            mode=w.mode,
            epoch=w.epoch,
            ttl_ms=self._ttl_ms,
            incarnation=w.row_incarnation,
            pid=standing.pid,
            pid_generation=standing.generation,
            name=self.name,
            partition_incarnation=self._meta.incarnation_of(standing.pk.partition),
        )

    async def _fence(self, exc: FencingError) -> None:
        """Fenced for good: stop renewing and leave every partition, so that a successor
        waiting for it (say, the incarnation that fenced it through resume=) gets it now,
        not when the lease lapses."""
        if self._fenced is None:
            self._fenced = exc
        if self._renewal is not None:
            self._renewal.cancel()
        for standing in list(self._standing.values()):
            self._fail_queue(standing, self._fenced)
        self._to_send.set()  # the sender, if any, ends
        await self._release_all()

    async def close(self) -> None:
        """Leave every partition at once (waiters are woken). Idempotent.

        In a forked child this does nothing at all: the lease is the parent's.
        """
        if (self._closed and self._released) or not self._in_own_process():
            return
        flush = self._opened and self._fenced is None and not self._closed
        self._closed = True  # no new send from now on; an open() waiting gives up on it
        self._to_send.set()  # the sender, if any, ends
        if flush:
            await self.flush()  # what was queued before is sent (or fails) first
        waiting = self._wait_sub
        if waiting is not None:
            waiting._event.set()  # and is woken now, not at its next turn
        async with self._lock:
            if self._renewal is not None:
                self._renewal.cancel()
            closed = InvalidArgument("the producer was closed before this record was sent")
            for standing in list(self._standing.values()):
                self._fail_queue(standing, closed)
            self._deliver()
            await self._release_all()

    async def _release_all(self) -> None:
        for standing in list(self._standing.values()):
            if not standing.left:
                await self._leave(standing.pk, standing.writer.mode, standing.writer.epoch)
                standing.left = True
        # Only once every partition was left: an interrupted close() can run again.
        self._released = True
        # The standings stay: a closed producer's state (to save) and epochs can be read.

    async def _leave(self, pk: PartitionKeys, mode: str, epoch: int) -> None:
        call = protocol.producer.producer_close(pk, session=self.session, mode=mode, epoch=epoch)
        try:
            await self._execute(call)
        except FencingError:
            log.warning(
                "redis-fencing: leaving %s partition %d failed; the lease lapses in %.3fs",
                pk.topic,
                pk.partition,
                self.lease_ttl,
            )

    async def __aenter__(self) -> Producer:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- state -------------------------------------------------------------------------------

    @property
    def producer_id(self) -> int:
        """The producer id written with every record (the producer must be open)."""
        if not self._opened:
            runtime.require_open(self)
        assert self._producer_id is not None
        return self._producer_id

    def epoch(self, partition: int) -> int:
        """The epoch this producer holds (or registered under) on ``partition``."""
        if not self._opened:
            runtime.require_open(self)
        pk = self._meta.partition_keys(partition)
        return self._standing[pk.partition].writer.epoch

    @property
    def fenced(self) -> bool:
        """True once the producer was superseded (permanent)."""
        return self._fenced is not None

    # -- sending -----------------------------------------------------------------------------

    async def send(
        self,
        value: bytes | str,
        key: bytes | str | None = None,
        headers: Mapping[str, bytes | str] | None = None,
        partition: int | None = None,
        expected_offset: int | None = None,
    ) -> RecordMetadata:
        """Append one record; returns where it landed.

        Without ``partition`` the key picks one (Kafka's murmur2); records without a key go
        round-robin. ``expected_offset`` needs an explicit partition unless the topic has one.
        """
        entry = group_commit.encode_one(value, key, headers, self._meta.limits, expected_offset)
        if partition is None:
            partition = self._choose_partition(
                None if key is None else entry.parts[1], expected_offset
            )
        return (await self._send(entry, partition))[0]

    async def send_batch(
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
        """
        if self._fenced is not None:
            raise self._fenced
        if not self._opened or self._closed:
            await self.open()  # opens, or raises for a closed producer
        records_list = self._batch(records)
        batch = protocol.topic.encode_batch(records_list, self._meta.limits, checksum=False)
        if partition is None:
            partition = self._batch_partition(records_list, expected_offset)
        return await self._send(Entry.of(batch, expected_offset), partition)

    async def _send(self, entry: Entry, partition: int) -> list[RecordMetadata]:
        """Queue an entry on its partition and wait for its answer (group commit)."""
        if self._fenced is not None:
            raise self._fenced
        if not self._opened or self._closed:
            await self.open()  # opens, or raises for a closed producer
        self._check_process()
        standing = self._standing_of(partition)
        expected_offset = entry.expected_offset
        if expected_offset is not None:
            check_int("expected_offset", expected_offset)
            if expected_offset > MAX_OFFSET:
                raise InvalidArgument(
                    f"expected_offset {expected_offset} is beyond any offset a partition can "
                    f"reach ({MAX_OFFSET})"
                )
        entry.event = runtime.Signal()
        standing.queue.append(entry)
        lock = standing.lock
        try:
            while not entry.done:
                if await runtime.try_lock(lock):
                    entry.leading = True
                    try:
                        await self._lead(standing, entry)
                    finally:
                        entry.leading = False
                        try:
                            self._wake_answered(standing)
                        finally:  # (an interrupt as it wakes them never keeps the lock)
                            lock.release()
                            self._wake_head(standing)
                else:
                    # A call is in flight: its sender takes this entry in a next call, or
                    # wakes us to send the queue ourselves (group commit). Never wait on
                    # the lock itself: a caller already answered would still have to get
                    # it, one after the other, before the next call could start. (The
                    # timeout only bounds a wake-up that never came: it looks again.)
                    await entry.event.wait(_RECHECK_SECONDS)
        except BaseException:
            with standing.guard:
                entry.abandoned = True  # not sent if it was not taken yet
            self._wake_head(standing)
            raise
        finally:
            # Wake the next caller of its chain, in a finally: an interrupt as this one
            # wakes up strands nobody behind it. Under the guard, as settle links the chain
            # (see there): a caller that gave up is either left out of it, or passes it on.
            with standing.guard:
                group_commit.pass_on(entry)
        return entry.answer()

    def _standing_of(self, partition: object) -> _Standing:
        """This producer's standing on ``partition`` (refused if the topic has no such
        partition)."""
        standing = self._standing.get(partition) if type(partition) is int else None
        if standing is None:
            standing = self._standing[self._meta.partition_keys(partition).partition]
        return standing

    async def _lead(self, standing: _Standing, entry: Entry) -> None:
        """Send the queue's head (holding the partition's lock) until ``entry`` is
        answered; then go on for the sends queued meanwhile, a few calls more, so the
        next call leaves without waiting for another thread or task to wake up (only for
        the callers just answered to run: see :meth:`_let_answered_run`)."""
        extra = 0
        while True:
            if entry.done:
                if extra >= _SERVE_AFTER_OWN:
                    break
                if standing.to_wake is not None:
                    await self._let_answered_run(standing)
                if not standing.queue:
                    break
                extra += 1
            elif not standing.queue:
                # Taken by a call that did not answer it: cannot happen (an interrupted call
                # answers or requeues what it took), but never spin on an empty queue.
                group_commit.fail([entry], self._carried_unknown(standing.pk.partition), self._give)
                break
            await self._send_next(standing)

    async def _let_answered_run(self, standing: _Standing) -> None:
        """Wake the callers answered last and wait until each has run (or ``_CHAIN_WAIT``)
        before the next call (threads only: under asyncio nobody waits to be woken).

        Those callers are the ones that send next: sending at once, the call would leave
        with the few of them that were quick enough, and the rest would make calls of
        their own. Waiting while their threads take turns with the interpreter lock makes
        one call of them all: measured with 8 threads, groups of 6-7 instead of 3-4, and a
        third less CPU per send (bench.coalesce)."""
        head = standing.to_wake
        assert head is not None
        standing.to_wake = None
        end = group_commit.ChainEnd(runtime.Signal())
        with standing.guard:
            chain, tail = [head], head
            while tail.then is not None:
                tail = tail.then
                chain.append(tail)
            tail.then = end
        group_commit.wake(head)
        if not await end.event.wait(_CHAIN_WAIT):
            # Not all of them ran in time: slow to be scheduled, or one was interrupted
            # (Ctrl-C) before it passed the chain on. Wake them all now (a caller woken
            # twice only finds its answer at once), never leaving one to its re-check.
            with standing.guard:
                for entry in chain:
                    entry.event.set()

    @contextlib.asynccontextmanager
    async def _holding(self, standing: _Standing) -> AsyncIterator[None]:
        """Hold the partition's lock (no send in flight there); on letting it go, wake the
        next queued send."""
        try:
            async with standing.lock:
                try:
                    yield
                finally:
                    self._wake_answered(standing)
        finally:
            self._wake_head(standing)

    def _wake_answered(self, standing: _Standing) -> None:
        """Wake the callers answered last (the lock's holder calls this as its next call
        leaves, or before it lets the lock go)."""
        head = standing.to_wake
        if head is not None:
            standing.to_wake = None
            group_commit.wake(head)

    def _wake_head(self, standing: _Standing) -> None:
        """After the partition's lock is let go: give the send_async() answers kept, and
        have the first queued send's caller (or the sender, for send_async records) take
        the queue, so it never waits for nobody."""
        if self._answers:
            self._deliver()
        if standing.lock.locked():
            return  # its holder sends the queue (or wakes the head when it lets go)
        with standing.guard:
            sender_woken = False
            for queued in standing.queue:
                if queued.abandoned:
                    continue
                if queued.event is not None:
                    queued.event.set()
                    return
                if not sender_woken:
                    self._to_send.set()
                    sender_woken = True
                if not self._lingering:
                    return
                # A lingering sender waits on: the first send() caller queued behind
                # send_async() records takes the queue (theirs go with it) instead.

    async def _send_next(self, standing: _Standing) -> None:
        """Send the head of the partition's queue as one batch and answer its entries
        (the caller holds the partition's lock). Raises only an interrupt of this caller
        (KeyboardInterrupt, a cancelled task), after answering the entries it took, or
        putting them back at the head of the queue if they were not sent."""
        if self._fenced is not None:
            self._fail_queue(standing, self._fenced)
            return
        if standing.pending is not None:
            try:
                await self._resolve(standing)
            except DuplicateSequence:
                pass  # settled: the batch was a resend of sequences written before
            except FencingError as exc:
                # Nothing queued was sent: each caller learns why (fenced, unreachable).
                self._fail_queue(standing, exc)
                return
        if self._moves(standing):
            self._adopt_pid(standing)  # a fresh PID was taken on another partition
        with standing.guard:
            group = group_commit.take_group(standing.queue, self._meta.limits, runtime.claim_future)
        if not group:
            return
        done = _Progress()
        try:
            await self._send_group(standing, group, done)
        except BaseException:
            # Interrupted outside the call's own handling (before the request left, or
            # while the answers were being given): no entry it took is left unanswered.
            self._interrupted(standing, group, done)
            raise

    async def _send_group(self, standing: _Standing, group: list[Entry], done: _Progress) -> None:
        topic = self._meta
        batch = group_commit.merge_batches(group)
        p = standing.pk.partition
        idempotent = self.idempotent
        fresh_pid = False
        while True:
            sequenced = Sequenced(
                pid_generation=standing.generation,
                first_sequence=standing.next_sequence if idempotent else None,
                checksum=None,
                name=self.name or "",
                fresh=standing.next_sequence >= standing.floor,
                fresh_for=topic.producer_state_ttl / 2,
            )
            call = protocol.topic.append(
                standing.pk,
                batch,
                incarnation=topic.incarnation_of(p),
                seen_next=topic.seen_next(p),
                expected_offset=group[0].expected_offset,
                writer=standing.writer,
                sequenced=sequenced,
                errors=standing.errors,
            )
            sent_at = time.monotonic()
            done.batch, done.sequenced, done.sent_at = batch, sequenced, sent_at
            self._wake_answered(standing)  # the callers of the last call run while it is out
            try:
                appended = await self._execute(call, self.durability)
            except BaseException as exc:
                if fresh_pid or not self._idle_expired(exc):
                    await self._refused(standing, group, done, exc)
                    if not isinstance(exc, FencingError):
                        raise
                    return
                # Its state expired while it was idle, and nothing was written: the
                # producer takes a fresh PID and sends the same group as that PID's first
                # batch (KIP-360). Once.
                fresh_pid = True
                done.sent_at = None  # (interrupted now, the group goes back to the queue)
                try:
                    await self._take_fresh_pid(standing)
                except FencingError as failed:
                    # Refused, and no fresh PID (the server was unreachable): nothing was
                    # written and nothing is pending.
                    done.sequenced = None
                    unavailable = Unavailable(
                        f"partition {p} of topic {topic.name!r}: this producer's state expired "
                        f"while it was idle and a fresh producer id could not be drawn "
                        f"({failed}); nothing was written. Send again"
                    )
                    await self._refused(standing, group, done, unavailable)
                    return
                continue
            break
        done.appended = appended
        if idempotent:
            standing.next_sequence += batch.count
        topic.saw_next(p, appended.first_offset + batch.count)
        done.counted = True
        self._answer(standing, group, appended)

    async def _refused(
        self, standing: _Standing, group: list[Entry], done: _Progress, exc: BaseException
    ) -> None:
        """Answer a group whose call raised ``exc`` (the caller re-raises an interrupt)."""
        p = standing.pk.partition
        done.failed = True
        # A refusal (a typed error other than OutcomeUnknown) wrote nothing. Anything
        # else - OutcomeUnknown, or an interrupt (KeyboardInterrupt, a signal
        # handler's exception, a cancelled task) after the request may have left -
        # leaves the batch pending: resolved before the next send, so its sequences are
        # never reused blindly.
        unknown = isinstance(exc, OutcomeUnknown) or not isinstance(exc, FencingError)
        if unknown:
            self._set_pending(standing, done)
            if isinstance(exc, OutcomeUnknown):
                exc.args = (
                    f"{exc.args[0]}. The producer resolves it before its next send on "
                    f"partition {p} (or call producer.resolve({p})): it either landed "
                    "once, or can never land",
                )
        elif (
            isinstance(exc, DuplicateSequence)
            and exc.reason in _WRITTEN_BEFORE
            and done.sequenced is not None
            and done.sequenced.first_sequence == standing.next_sequence
            and done.batch is not None
        ):
            # Those sequences were written before (by these records or others): the caller
            # is told, and the producer goes on after them instead of resending them for
            # ever (a copy job resumed from an older state skips what the error names).
            standing.next_sequence += done.batch.count
        error = exc if isinstance(exc, FencingError) else self._carried_unknown(p)
        group_commit.fail(group, error, self._give)
        if isinstance(exc, (ProducerFenced, StateLost)):
            await self._fence(exc)

    def _answer(self, standing: _Standing, group: list[Entry], appended: Appended) -> None:
        # A resend answered from the window reports the epoch the records carry.
        epoch = appended.epoch if appended.epoch >= 0 else standing.writer.epoch
        with standing.guard:  # (as pass_on: a caller giving up now is chained or not)
            head = group_commit.settle(
                group,
                topic=self._meta.name,
                partition=standing.pk.partition,
                first_offset=appended.first_offset,
                epoch=epoch,
                give=self._give,
                chain=not runtime.IS_ASYNC,
            )
        if head is not None:
            self._wake_answered(standing)  # (none left: woken as this call left)
            standing.to_wake = head

    @staticmethod
    def _idle_expired(exc: BaseException) -> bool:
        """Whether a call was refused because this producer's state expired while it was
        idle (nothing was written): UnknownProducerId ``idle``, which only a fresh batch's
        first attempt gets (a resend may have landed: it is settled by a resolve)."""
        return isinstance(exc, UnknownProducerId) and exc.reason == "idle"

    def _moves(self, standing: _Standing) -> bool:
        """Whether a partition still sends under a PID the producer gave up."""
        pid = standing.pid
        return pid != self._producer_id and pid in self._retired

    async def _take_fresh_pid(self, standing: _Standing) -> None:
        """Give up this partition's PID for the producer's current one, drawing a fresh one
        first unless another partition did since (called holding the partition's lock).

        Each step leaves a state an interrupt may stop at: the old PID is retired before the
        fresh one is published (no partition moves until both are), and a partition takes
        its new writer before its new PID (an interrupted move is made again)."""
        async with self._rekey:
            old = standing.pid
            if old == self._producer_id:
                fresh = await self._context.allocate_producer_id()
                log.info(
                    "redis-fencing: producer %d of topic %r was idle past its state's expiry "
                    "on partition %d: it goes on as producer %d",
                    old,
                    self._meta.name,
                    standing.pk.partition,
                    fresh,
                )
                self._retired = self._retired | {old}
                self._producer_id = fresh
        self._adopt_pid(standing)

    def _adopt_pid(self, standing: _Standing) -> None:
        """Move a partition to the producer's current PID: its first batch, generation 0."""
        pid = self._producer_id
        assert pid is not None and pid not in self._retired
        writer = dataclasses.replace(standing.writer, producer_id=str(pid))
        standing.writer = writer
        # The PID last: until it is stored, a reader of ``state`` sees the retired one (so
        # reports this partition moved, at 0), and an interrupted move is made again.
        standing.generation, standing.next_sequence, standing.floor = 0, 0, 0
        standing.pid = pid

    def _interrupted(self, standing: _Standing, group: list[Entry], done: _Progress) -> None:
        """Leave no entry of an interrupted group unanswered (see :meth:`_send_next`)."""
        left = [entry for entry in group if not entry.done]
        if done.sent_at is None:
            with standing.guard:  # never sent: they go first in the next call
                standing.queue.extendleft(reversed(left))
            return
        if done.appended is not None:
            if not done.counted:
                assert done.batch is not None
                if self.idempotent:
                    standing.next_sequence += done.batch.count
                self._meta.saw_next(
                    standing.pk.partition, done.appended.first_offset + done.batch.count
                )
            self._answer(standing, group, done.appended)  # it landed: every answer is known
            return
        if not done.failed:
            self._set_pending(standing, done)
        group_commit.fail(left, self._carried_unknown(standing.pk.partition), self._give)

    def _set_pending(self, standing: _Standing, done: _Progress) -> None:
        sequenced, batch = done.sequenced, done.batch
        if sequenced is None or batch is None or sequenced.first_sequence is None:
            return
        standing.pending = Pending(
            batch.count,
            sequenced.pid_generation,
            sequenced.first_sequence,
            batch.checksum,
            done.sent_at or time.monotonic(),
            sequenced.fresh,
        )

    def _carried_unknown(self, p: int) -> OutcomeUnknown:
        return OutcomeUnknown(
            f"the send on partition {p} of topic {self._meta.name!r} that carried these "
            "records was interrupted in the thread or task that sent it, after it may have "
            f"reached Redis. The producer resolves it before its next send on partition {p} "
            f"(or call producer.resolve({p}))"
        )

    def _give(self, futures: list[runtime.Future[RecordMetadata]], answers: list[object]) -> None:
        """Answer send_async() futures once no partition lock is held (their callbacks may
        send or flush: they must never run under the lock of the call that answered)."""
        with self._answers_guard:
            self._answers.append((futures, answers))

    def _deliver(self) -> None:
        """Give the answers :meth:`_give` kept (call with no partition lock held). One
        delivery at a time: once this returns, every answer given before it was delivered
        (what flush() promises)."""
        with self._delivering:
            with self._answers_guard:
                kept, self._answers = self._answers, []
            settle, fail = runtime.settle, runtime.fail
            pairs = [
                pair for futures, answers in kept for pair in zip(futures, answers, strict=True)
            ]
            done = 0
            try:
                for future, value in pairs:
                    if isinstance(value, BaseException):
                        fail(future, value)
                    else:
                        settle(future, value)
                    done += 1
            except BaseException:
                # A done callback raised an interrupt (Ctrl-C, SystemExit): keep what is not
                # delivered yet, from the future it came from on (answering a future twice
                # does nothing), for the next delivery.
                rest = pairs[done:]
                with self._answers_guard:
                    self._answers[:0] = [([f for f, _ in rest], [v for _, v in rest])]
                raise

    def _fail_queue(self, standing: _Standing, error: BaseException) -> None:
        """Answer every send still queued on a partition with ``error`` (none was sent)."""
        with standing.guard:
            queued = [entry for entry in standing.queue if not entry.abandoned]
            standing.queue.clear()
        group_commit.fail(queued, error, self._give)

    async def send_async(
        self,
        value: bytes | str,
        key: bytes | str | None = None,
        headers: Mapping[str, bytes | str] | None = None,
        partition: int | None = None,
    ) -> runtime.Future[RecordMetadata]:
        """Queue one record and return at once with a future of its metadata (Kafka's
        ``send()``): records queued while a call is in flight go together in the next one.

        A sender in the background sends them, after ``linger_ms`` (or once ``batch_size``
        bytes are queued); :meth:`flush` sends what is queued and waits; ``close()``
        flushes. Each future gets its record's metadata or its batch's error; once the
        producer is fenced, every queued future fails with :class:`~fencing.ProducerFenced`.

        >>> futures = [await producer.send_async(b"v%d" % i) for i in range(1000)]
        >>> await producer.flush()
        >>> offsets = [f.result().offset for f in futures]
        """
        if self._fenced is not None:
            raise self._fenced
        if not self._opened or self._closed:
            await self.open()
        self._check_process()
        future: runtime.Future[RecordMetadata] = runtime.new_future()
        entry = group_commit.encode_one(value, key, headers, self._meta.limits, future=future)
        if partition is None:
            partition = self._choose_partition(None if key is None else entry.parts[1], None)
        standing = self._standing_of(partition)
        standing.queue.append(entry)
        if self._closed or self._fenced is not None:
            self._withdraw(standing, entry)  # close() or a fence came since the check above
        if self._sender is None:
            self._sender = runtime.spawn(self._send_queued, f"fencing-sender-{self.session[:8]}")
        self._queued_bytes += entry.size
        if not self._to_send.is_set() and (
            not self._lingering or self._queued_bytes >= self.batch_size
        ):  # (set means: the sender has yet to look at the queues)
            self._to_send.set()
        return future

    def _withdraw(self, standing: _Standing, entry: Entry) -> None:
        """Take back a send_async() record queued as the producer closed or was fenced
        (their queue was answered already) and raise why; if it was taken meanwhile, it
        is answered like the others."""
        with standing.guard:
            if entry in standing.queue:
                standing.queue.remove(entry)
                if self._fenced is not None:
                    raise self._fenced
                raise InvalidArgument(
                    "this producer is closed: make a new one with topic.producer()"
                )

    async def flush(self) -> None:
        """Send every record queued by :meth:`send_async` and wait until each is answered
        (errors go to their futures, not here).

        >>> await producer.flush()
        """
        self._check_process()
        self._flushing = True
        try:
            for standing in list(self._standing.values()):
                with standing.guard:  # the last entry still waiting for its answer
                    mark = next((e for e in reversed(standing.queue) if not _settled(e)), None)
                # What was queued before this flush began is answered when it returns
                # (a streamer that keeps queueing cannot keep it going). The lock is taken
                # even with nothing queued: a call in flight may carry the last records.
                async with self._holding(standing):
                    while mark is not None and standing.queue and not _settled(mark):
                        await self._send_next(standing)
            self._deliver()  # (waits for a delivery under way in another thread)
        finally:
            self._flushing = False

    async def _send_queued(self) -> None:
        """The sender (a thread, or a task): sends what send_async() queued, partition by
        partition, until the producer closes. It lets each partition's lock go every few
        calls, so flush(), resolve() and callers of send() are never starved by it."""
        while True:
            if not any(s.queue for s in list(self._standing.values())):
                if self._closed or self._fenced is not None:
                    return
                await runtime.wait_event(self._to_send, None)
                self._to_send.clear()
            if self.linger_ms > 0 and not self._flushing and not self._closed:
                self._lingering = True
                try:
                    await self._linger()  # each batch waits for more, unless batch_size is met
                finally:
                    self._lingering = False
            self._queued_bytes = 0  # what is queued now goes in the calls below
            for standing in list(self._standing.values()):
                if not standing.queue:
                    continue
                try:
                    async with self._holding(standing):
                        for _ in range(_SERVE_AFTER_OWN):
                            if not standing.queue:
                                break
                            await self._send_next(standing)
                except Exception:  # pragma: no cover - _send_next answers every entry
                    log.exception("redis-fencing: the sender of %r failed", self)

    async def _linger(self) -> None:
        """Wait up to ``linger_ms`` for more records, unless ``batch_size`` bytes wait
        (the send_async() that queues them wakes the sender)."""
        deadline = time.monotonic() + self.linger_ms / 1000.0
        while not self._flushing and not self._closed:
            left = deadline - time.monotonic()
            if self._queued_bytes >= self.batch_size or left <= 0:
                return
            self._to_send.clear()
            if self._queued_bytes >= self.batch_size:
                return  # (reached between the check and the clear: its wake-up is gone)
            await runtime.wait_event(self._to_send, left)

    async def _standing_call(
        self, partition: int, build: Callable[[Writer], protocol.ScriptCall[T]]
    ) -> T:
        """Run a call fenced by this producer's standing on ``partition`` (the Spark sink's
        appends), under the partition's lock; a fence ends the producer as for a send."""
        if self._fenced is not None:
            raise self._fenced
        if not self._opened or self._closed:
            await self.open()
        self._check_process()
        standing = self._standing[self._meta.partition_keys(partition).partition]
        async with self._holding(standing):
            if self._fenced is not None:
                raise self._fenced
            try:
                return await self._execute(build(standing.writer), self.durability)
            except (ProducerFenced, StateLost) as exc:
                await self._fence(exc)
                raise

    async def resolve(self, partition: int) -> list[RecordMetadata] | None:
        """Settle a batch whose send raised OutcomeUnknown on ``partition``, in one script.

        Returns the batch's metadata if it landed (once), or None if it did not — and then
        it never will: the PID generation was bumped so no copy still in flight can land.
        Also returns None when nothing is pending. Raises
        :class:`~fencing.UnknownProducerId` if the producer state expired meanwhile. With
        ``acks`` above "leader", a batch that landed is also waited for (a lease renewal
        written on the same connection carries the wait, which then covers the batch):
        :class:`~fencing.NotEnoughReplicas` if that falls short.
        """
        self._check_process()
        pk = self._meta.partition_keys(partition)
        standing = self._standing[pk.partition]
        async with self._holding(standing):
            if standing.pending is None:
                return None
            result = await self._resolve(standing)
            if result is not None and self.durability.command is not None:
                try:
                    await self._execute(self._renew_call(standing), self.durability)
                except (ProducerFenced, StateLost) as exc:
                    await self._fence(exc)
                    raise
            return result

    async def _resolve(self, standing: _Standing) -> list[RecordMetadata] | None:
        pending = standing.pending
        assert pending is not None
        pk = standing.pk
        call = protocol.producer.resolve(
            pk,
            pid=standing.pid,
            generation=pending.generation,
            first_seq=pending.first_sequence,
            last_seq=pending.first_sequence + pending.records - 1,
            checksum=pending.checksum,
            session=self.session,
            incarnation=self._meta.incarnation_of(pk.partition),
            pending_ms=round((time.monotonic() - pending.sent_at) * 1000),
            fresh=pending.fresh,
        )
        try:
            resolved = await self._execute(call)
        except (ProducerFenced, StateLost) as exc:
            await self._fence(exc)
            raise
        except DuplicateSequence as exc:
            # Its sequences were written before, by other records or longer ago than the
            # window: it did not land now, and the producer goes on as after that refusal.
            standing.pending = None
            self.last_resolution = (pk.partition, None)
            if exc.reason in _WRITTEN_BEFORE:
                end = pending.first_sequence + pending.records
                standing.next_sequence = max(standing.next_sequence, end)
            raise
        standing.pending = None
        result: list[RecordMetadata] | None = None
        if resolved.landed:
            epoch = standing.writer.epoch
            result = [
                RecordMetadata(self._meta.name, pk.partition, resolved.first_offset + i, epoch)
                for i in range(pending.records)
            ]
        self.last_resolution = (pk.partition, result)
        if resolved.generation > pending.generation + (0 if resolved.landed else 1):
            # It landed, but a newer incarnation (resume= or the same name) was opened since:
            # the caller learns the outcome, and this producer is fenced like any other
            # superseded incarnation (it never takes the newer one's generation).
            await self._fence(
                ProducerFenced(
                    f"producer fenced on partition {pk.partition} of topic {pk.topic!r}: it "
                    f"is incarnation {pending.generation} of its producer id, and incarnation "
                    f"{resolved.generation} was opened since. Its pending batch "
                    f"{'landed' if result else 'did not land'}. This producer can never "
                    "write again; open a new one",
                    topic=pk.topic,
                    partition=pk.partition,
                    epoch=pending.generation,
                    current_epoch=resolved.generation,
                )
            )
        else:
            standing.generation = resolved.generation
            standing.next_sequence = resolved.next_sequence
            standing.floor = max(standing.floor, resolved.next_sequence)
        log.info(
            "redis-fencing: pending batch on %s partition %d %s",
            pk.topic,
            pk.partition,
            f"landed at offset {resolved.first_offset}" if result else "did not land",
        )
        return result

    @property
    def state(self) -> ProducerState:
        """PID, generations and next sequence per partition: save it to resume later (the
        producer must be open)."""
        if not self._opened:
            runtime.require_open(self)
        assert self._producer_id is not None
        # (A partition still on a PID given up for a fresh one starts that one at 0; with
        # a batch pending there, under the old PID, no state can say how to resend it.)
        moved = {p for p, s in self._standing.items() if self._moves(s)}
        for p in moved:
            if self._standing[p].pending is not None:
                raise InvalidArgument(
                    f"partition {p} has a batch pending under this producer's previous id "
                    f"(it took a fresh one, its state having expired while idle): call "
                    f"producer.resolve({p}) first, then save the state"
                )
        return ProducerState(
            topic=self._meta.name,
            producer_id=self._producer_id,
            name=self.name,
            generations={p: 0 if p in moved else s.generation for p, s in self._standing.items()},
            sequences={p: 0 if p in moved else s.next_sequence for p, s in self._standing.items()},
            incarnations={p: self._meta.incarnation_of(p) for p in self._standing},
        )

    # -- internals ---------------------------------------------------------------------------

    async def _execute(
        self, call: protocol.ScriptCall[T], durability: Durability | None = None
    ) -> T:
        driver = self._context.driver(self._budget.timeout)
        return await driver.execute(call, self._budget, durability)

    def _batch(self, records: Iterable[Record | bytes | str]) -> list[Record]:
        if isinstance(records, (bytes, str, Record)):
            raise InvalidArgumentType(
                "send_batch takes a list of records; use send() for a single record"
            )
        return [item if type(item) is Record else _as_record(item) for item in records]

    def _batch_partition(self, batch: list[Record], expected_offset: int | None) -> int:
        if self.topic.partitions == 1:
            return 0
        keys = {r.key for r in batch}
        (first_key,) = keys if len(keys) == 1 else (None,)
        if first_key is not None and expected_offset is None:
            return self.topic.partition_for(first_key)
        raise InvalidArgument(
            "a batch goes to one partition: pass partition= (it is required with "
            "expected_offset on a topic of several partitions)"
        )

    def _choose_partition(self, key: bytes | None, expected_offset: int | None) -> int:
        n = self.topic.partitions
        if n == 1:
            return 0
        if expected_offset is not None:
            raise InvalidArgument(
                f"expected_offset needs an explicit partition: topic {self._meta.name!r} has "
                f"{n} partitions"
            )
        if key is not None:
            return self.topic.partition_for(key)
        return next(self._round_robin) % n

    def __repr__(self) -> str:
        return (
            f"<fencing.Producer topic={self._meta.name!r} mode={self.access_mode.name} "
            f"id={self._producer_id} session={self.session[:8]}…>"
        )

"""Single readers: ``topic.consumer(group, member_id, partitions)``, owning their partitions.

A consumer owns each of its partitions through the ownership row
(group, ``"<topic>/<partition>"``), so two members never both believe they own one, and
operators can take a partition over with ``fencing release`` or
``client.ownership(group, ...).claim(["<topic>/<p>"], generation=0)``. The committed offset
of a partition lives in that partition's slot and is written by one script that checks the
member's grant first (``lua/commit-3.lua``): a superseded member's commit raises
:class:`~fencing.Fenced` and writes nothing. Every poll first checks the grants by server
time, so a member that was paused and superseded finds out there, never by reading on.

Partitions are assigned explicitly; there is no rebalancing (on purpose:
docs/explanation/not-provided.md).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING

from .. import _protocol as protocol
from .. import _telemetry as telemetry
from .._keys import validate_label
from .._process import ProcessBound
from .._record import Record
from .._validate import MAX_OFFSET, check_int, read_limits, validate_ttl
from ..errors import (
    Fenced,
    FencingError,
    InvalidArgument,
    InvalidArgumentType,
    NotEnoughReplicas,
    StateLost,
)
from .metadata import TopicFace, TopicMetadata, metadata_of
from .ownership import GrantedCalls, Ownership
from .reader import Reader, StartOffset, open_reader

if TYPE_CHECKING:
    from .._grant import Grant
    from .._keys import PartitionKeys
    from .._protocol.ownership import Target
    from .._runtime.tasks.keeper import Task

log = logging.getLogger(__name__)

#: Where a consumer starts on a partition: its group's committed offset ("committed": the
#: first retained record if the group never committed), "earliest", "latest" or an offset.
Start = int | str

#: The largest offset (2**53 - 1: what the scripts' numbers hold exactly).
#: A blocking poll over several partitions waits on each in turn for this long (seconds).
_MULTI_STEP = 0.05
_ITER_BLOCK_MS = 1_000


#: The attributes of a poll's and a commit's spans besides the consumer's.
_POLL_SPAN = {telemetry.SCRIPT: "check"}
_COMMIT_SPAN = {telemetry.SCRIPT: "commit"}


def resource_of(topic: str, partition: int) -> str:
    """The ownership resource of a topic partition: ``"<topic>/<partition>"``."""
    return f"{topic}/{partition}"


def _partitions(topic: TopicMetadata, partitions: object) -> list[int]:
    if isinstance(partitions, bool):
        raise InvalidArgumentType("partitions must be an int or a list of ints, got bool")
    if isinstance(partitions, int):
        wanted = [partitions]
    elif isinstance(partitions, Iterable) and not isinstance(partitions, (str, bytes, dict)):
        wanted = list(partitions)
    else:
        raise InvalidArgumentType(
            f"partitions must be an int or a list of ints, got {type(partitions).__name__}: "
            "pass e.g. [0, 1]"
        )
    if not wanted:
        raise InvalidArgument("partitions must not be empty: name at least one partition")
    out = sorted({topic.partition_keys(p).partition for p in wanted})
    return out


class Consumer(ProcessBound):
    """A member of a consumer group that owns some partitions of one topic.

    >>> async with await topic.consumer("billing", member_id="host-a", partitions=[0, 1]) as c:
    ...     for record in await c.poll(max_records=100, block_ms=1000):
    ...         bill(record)
    ...     await c.commit()                  # fenced: raises Fenced if another member took over

    Not thread-safe: use one consumer from one thread (like Kafka's).
    """

    def __init__(
        self,
        topic: TopicFace,
        group: str,
        member_id: str,
        partitions: int | Iterable[int],
        *,
        start: Start = "committed",
        ttl: float = 10.0,
        acks: str = "leader",
    ) -> None:
        #: The topic it reads.
        self.topic = topic
        self._meta = meta = metadata_of(topic)
        self.member_id = validate_label("member_id", member_id)
        #: How a commit runs fenced by this member's grant on its partition.
        self._calls = GrantedCalls()
        self._owner = Ownership(
            meta.context,
            group,
            self.member_id,
            validate_ttl(ttl),
            acks=acks,
            _calls=self._calls,
            _kind="consumer",
        )
        self.group = self._owner.group
        self._attrs = {telemetry.TOPIC: topic.name, telemetry.GROUP: self.group}
        self.ttl = self._owner.ttl
        if not (isinstance(start, int) and not isinstance(start, bool)) and start not in (
            "committed",
            "earliest",
            "latest",
        ):
            raise InvalidArgument(
                f"start must be 'committed', 'earliest', 'latest' or an offset, got {start!r}"
            )
        if isinstance(start, int):
            check_int("start", start)
        self._parts = _partitions(meta, partitions)
        self._keys: dict[int, PartitionKeys] = {p: meta.partition_keys(p) for p in self._parts}
        self._resources = {p: resource_of(topic.name, p) for p in self._parts}
        self._readers: dict[int, Reader] = {}
        self._renewal: Task | None = None
        self._closed = False
        self._next = 0  # round-robin start of the next poll
        #: partition -> (token, offset) this member committed last under that grant: the
        #: next commit checks it is still stored (a failover can lose a commit, G9).
        self._last_commit: dict[int, tuple[int, int]] = {}
        self._bind_process()

    async def _open(self, start: Start, *, wait: bool, timeout: float | None) -> None:
        """Claim the partitions and place the readers (made by :meth:`Topic.consumer`)."""
        if not isinstance(wait, bool):
            raise InvalidArgumentType(f"wait must be a bool, got {type(wait).__name__}")
        topic = self._meta
        if isinstance(start, int):
            for p in self._parts:  # a bad offset is refused before anything is written
                first, end = await topic.offsets(p)
                if not first <= start <= end:
                    raise protocol.partition_errors.out_of_range(self._keys[p], start, first, end)
        try:
            await self._owner.claim(list(self._resources.values()), wait=wait, timeout=timeout)
            for p in self._parts:
                self._readers[p] = await open_reader(self.topic, p, await self._start_of(p, start))
            self._renewal = topic.context.keeper.schedule(self.ttl / 3.0, self._renew)
        except BaseException as exc:
            await self._owner.close()
            if isinstance(exc, StateLost):
                await self._forget_rows()
            raise

    async def _forget_rows(self) -> None:
        """After an open that found its topic gone (deleted): remove the rows it claimed and
        gave back, so no key of the deleted topic outlives the delete (a row of a partition
        that still exists is kept)."""
        topic = self._meta
        for p, pk in self._keys.items():
            row = topic.context.keys.ownership(self.group, self._resources[p])
            with contextlib.suppress(FencingError):  # best effort: the row is free anyway
                await topic.driver().execute(
                    protocol.consumer.forget(pk, self.group, row), topic.budget
                )

    # -- public ------------------------------------------------------------------------------

    @property
    def partitions(self) -> list[int]:
        """The partitions this consumer owns.

        >>> consumer.partitions
        [0, 1]
        """
        return list(self._parts)

    async def poll(self, max_records: int = 100, block_ms: int | None = None) -> list[Record]:
        """Up to ``max_records`` records (at most 10,000 per poll) from the owned
        partitions, in offset order per partition (partitions take turns).

        Checks every grant by server time first: raises :class:`~fencing.Fenced` once
        another member took a partition over, :class:`~fencing.LeaseExpired` if a lease
        lapsed (the background renewal could not reach Redis). With ``block_ms`` waits up
        to that long for records when none are there.

        >>> records = await consumer.poll(max_records=500, block_ms=1000)
        """
        count, block = read_limits(max_records, block_ms)
        self._ready()
        with telemetry.span("fencing.poll", {**self._attrs, **_POLL_SPAN}) as span:
            records = await self._poll(count, block)
            span.set_attribute(telemetry.OUTCOME, "ok")
            span.set_attribute("fencing.records", len(records))
        self._observe(records)
        return records

    def _observe(self, records: list[Record]) -> None:
        """Count a poll, its records per partition, and each partition's lag as the
        poll's own replies told (no read of its own)."""
        ins = telemetry.instruments()
        ins.polls.add(1, self._attrs)
        polled: dict[int, int] = {}
        for record in records:
            assert record.partition is not None
            polled[record.partition] = polled.get(record.partition, 0) + 1
        for p, reader in self._readers.items():
            attrs: dict[str, str | int] = {**self._attrs, telemetry.PARTITION: p}
            if p in polled:
                ins.polled.add(polled[p], attrs)
            if reader.last_next is not None:
                ins.lag.set(max(0, reader.last_next - reader.position), attrs)

    async def _poll(self, count: int, block: int) -> list[Record]:
        await self._check_all()
        records = await self._fetch(count)
        if records or block == 0:
            return records
        deadline = time.monotonic() + block / 1000.0
        if len(self._parts) == 1:
            return await self._after_block(await self._readers[self._parts[0]].read(count, block))
        while True:
            # Partitions live in different slots (a cluster cannot block on them together):
            # wait on each in turn, briefly.
            for p in self._order():
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                step = max(1, int(min(left, _MULTI_STEP) * 1000))
                records = await self._readers[p].read(count, step)
                if records:
                    return await self._after_block(records)

    async def commit(self, offsets: Mapping[int, int] | None = None) -> dict[int, int]:
        """Commit offsets (the next offset to read, per partition); returns what was
        committed. Default: everything polled so far (each partition's position).

        Each partition's commit is one script that checks this member's grant and writes
        the offset together: if another member took the partition over, it raises
        :class:`~fencing.Fenced` and writes nothing for that partition. Partitions are
        committed in ascending order and the first failure is raised (partitions before it
        stay committed). Every offset is validated before anything is written.

        >>> await consumer.commit()                                      # doctest: +SKIP
        {0: 120, 1: 98}
        >>> await consumer.commit({0: 100})           # an offset of your own
        """
        self._ready()
        if offsets is None:
            wanted = {p: self._readers[p].position for p in self._parts}
        else:
            if not isinstance(offsets, Mapping):
                raise InvalidArgumentType(
                    f"offsets must be a dict {{partition: offset}}, got {type(offsets).__name__}"
                )
            wanted = {}
            for p, o in offsets.items():
                wanted[self._owned(p)] = check_int("offset", o)
                if wanted[p] > MAX_OFFSET:
                    raise InvalidArgument(
                        f"offset {o} of partition {p} is beyond any offset a partition can "
                        f"reach ({MAX_OFFSET})"
                    )
            if not wanted:
                raise InvalidArgument("offsets must not be empty: leave it None to commit all")
        done: dict[int, int] = {}
        with telemetry.span("fencing.commit", {**self._attrs, **_COMMIT_SPAN}) as span:
            for p in sorted(wanted):
                done[p] = await self._commit_one(p, wanted[p])
            span.set_attribute(telemetry.OUTCOME, "committed")
        return done

    async def _commit_one(self, p: int, offset: int) -> int:
        """Commit ``offset`` on partition ``p``, fenced by this member's grant there."""
        used: list[Grant] = []  # the grant the call was made with, once it was made

        def build(target: Target, grant: Grant) -> protocol.ScriptCall[int]:
            last = self._last_commit.get(p)
            call = protocol.consumer.commit(
                target,
                self._keys[p],
                session=self._owner.session,
                grant=grant,
                partition_incarnation=self._meta.incarnation_of(p),
                offset=offset,
                seen_next=self._meta.seen_next(p),
                last=last[1] if last is not None and last[0] == grant.token else None,
            )
            used.append(grant)
            return call

        try:
            committed = await self._calls.call(self._resources[p], build)
        except Fenced:
            raise  # (the handle dropped the grant: every later call raises this)
        except StateLost as lost:
            raise await self._meta.explain(self._keys[p], lost) from None
        except NotEnoughReplicas:
            self._last_commit[p] = (used[0].token, offset)  # on the primary
            raise
        except BaseException:
            if used:
                self._last_commit.pop(p, None)  # it may or may not have been written
            raise
        self._last_commit[p] = (used[0].token, offset)
        return committed

    async def committed(self, partition: int) -> int | None:
        """The group's committed offset of ``partition`` (None if it never committed).

        Any partition of the topic may be asked, owned or not.

        >>> await consumer.committed(0)                                  # doctest: +SKIP
        120
        """
        pk = self._meta.partition_keys(partition)
        self._check_process()
        value = await self._meta.driver().read(
            protocol.consumer.committed(pk, self.group), self._meta.budget
        )
        last = self._last_commit.get(pk.partition)
        if last is not None and (value is None or value < last[1]):
            raise StateLost(
                f"the committed offset of group {self.group!r} on {self.topic.name!r} "
                f"partition {pk.partition} is {value}, but this member committed {last[1]} "
                "there: the Redis server lost that commit (a failover, FLUSHALL, a restart "
                "without persistence). Open a new consumer: it resumes from the committed "
                "offset, and reads again what the lost commit covered",
                reason="committed",
                key=pk.committed,
            )
        return value

    def position(self, partition: int) -> int:
        """The offset the next poll reads from on an owned ``partition``.

        >>> consumer.position(0)                                         # doctest: +SKIP
        120
        """
        return self._readers[self._owned(partition)].position

    async def seek(self, partition: int, offset: int) -> None:
        """Move an owned partition to ``offset`` (checked now against the partition's range:
        :class:`~fencing.OffsetOutOfRange` below the first retained record or past the end).

        >>> await consumer.seek(0, 100)               # the next poll reads partition 0 from 100
        """
        p = self._owned(partition)
        self._ready()
        await self._readers[p].seek(offset)

    async def close(self) -> None:
        """Release every partition at once (waiting members are woken). Idempotent; does
        not commit. In a forked child it does nothing (the grants are the parent's).

        >>> await consumer.commit()
        >>> await consumer.close()        # or leave ``async with topic.consumer(...) as c``
        """
        if not self._in_own_process():
            return
        self._closed = True
        if self._renewal is not None:
            self._renewal.cancel()
        await self._owner.close()  # idempotent: completes a close that was interrupted

    async def __aiter__(self) -> AsyncIterator[Record]:
        """Polls forever (blocking a second at a time) until the consumer is closed."""
        while not self._closed:
            for record in await self.poll(block_ms=_ITER_BLOCK_MS):
                yield record

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return (
            f"<fencing.Consumer topic={self.topic.name!r} group={self.group!r} "
            f"member={self.member_id!r} partitions={self._parts}>"
        )

    # -- internals ---------------------------------------------------------------------------

    def _ready(self) -> None:
        self._check_process()
        if self._closed:
            raise InvalidArgument(
                "this consumer is closed: open a new one with topic.consumer(...)"
            )

    def _owned(self, partition: object) -> int:
        p = check_int("partition", partition)
        if p not in self._keys:
            self._meta.partition_keys(p)  # an unknown partition says so first
            raise InvalidArgument(
                f"this consumer owns partitions {self._parts} of topic {self.topic.name!r}, "
                f"not {p}: open a consumer for it"
            )
        return p

    async def _start_of(self, partition: int, start: Start) -> StartOffset:
        if isinstance(start, int):
            return start
        if start == "earliest":
            return "earliest"
        if start == "latest":
            return "latest"
        committed = await self.committed(partition)
        if committed is None:
            return "earliest"
        first, end = await self._meta.offsets(partition)
        if committed > end:
            raise StateLost(
                f"group {self.group!r} committed offset {committed} on partition {partition} "
                f"of topic {self.topic.name!r}, past its end ({end}): the partition went back "
                "in history (the Redis server lost writes). Nothing was read",
                reason="offset",
                key=self._keys[partition].committed,
            )
        if committed < first:
            log.warning(
                "redis-fencing: group %r: committed offset %d of %s/%d was trimmed away; "
                "starting at the first retained offset %d",
                self.group,
                committed,
                self.topic.name,
                partition,
                first,
            )
            return first
        return committed

    async def _after_block(self, records: list[Record]) -> list[Record]:
        """Records that arrived while blocked are returned only if every grant still holds
        now: a member superseded during the wait never sees what its successor processes
        (its position is put back, so nothing is skipped if it is told late)."""
        if records:
            try:
                await self._check_all()
            except BaseException:  # fenced, or interrupted: nothing read is skipped
                first = records[0]
                assert first.partition is not None and first.offset is not None
                self._readers[first.partition].seek_unchecked(first.offset)
                raise
        return records

    async def _check_all(self) -> None:
        for p in self._parts:
            try:
                await self._owner.check(self._resources[p])
            except StateLost as lost:
                # The row lives in the partition's slot: a forced delete of the topic took it.
                raise await self._meta.explain(self._keys[p], lost) from None

    def _order(self) -> list[int]:
        n = len(self._parts)
        order = [self._parts[(self._next + i) % n] for i in range(n)]
        self._next = (self._next + 1) % n
        return order

    async def _fetch(self, count: int) -> list[Record]:
        out: list[Record] = []
        before = {p: reader.position for p, reader in self._readers.items()}
        try:
            for p in self._order():
                if len(out) >= count:
                    break
                out.extend(await self._readers[p].read(count - len(out)))
        except BaseException:
            # A later partition failed (or the poll was interrupted) after earlier ones were
            # read: those records are not returned, so their positions go back.
            for p, position in before.items():
                self._readers[p].seek_unchecked(position)
            raise
        return out

    async def _renew(self) -> bool:
        if self._closed or not self._owner.grants:
            return False
        try:
            await self._owner.renew()
        except FencingError as exc:
            log.warning(
                "redis-fencing: consumer %r of group %r: renewal failed: %s",
                self.member_id,
                self.group,
                exc,
            )
        return bool(self._owner.grants)


async def open_consumer(
    topic: TopicFace,
    group: str,
    member_id: str,
    partitions: int | Iterable[int],
    start: Start,
    *,
    ttl: float,
    wait: bool,
    timeout: float | None,
    acks: str,
) -> Consumer:
    """A consumer that owns ``partitions``, placed at ``start`` (what :meth:`Topic.consumer`
    returns; the topic is open)."""
    consumer = Consumer(topic, group, member_id, partitions, start=start, ttl=ttl, acks=acks)
    await consumer._open(start, wait=wait, timeout=timeout)
    return consumer

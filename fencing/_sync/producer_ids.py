# GENERATED from fencing/_async/producer_ids.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""A producer's identity over its life: its producer id (PID), drawn, resumed or named at
open; the generation and sequences it starts at on each partition; and the fresh PID it
goes on under once its state expired while idle (Kafka's KIP-360).

>>> ids = ProducerIds(context, meta, calls, session, name=None, resume=None)
>>> ticket = ids.open()                     # draws (or checks) the PID
>>> opened = ids.incarnation(pk, ticket)    # PID, generation, sequences on pk
"""

from __future__ import annotations

import dataclasses
import logging

from .. import _protocol as protocol
from .._keys import PartitionKeys
from .._runtime.threads import primitives as runtime
from .._state import ProducerState
from ..errors import InvalidArgument, StateLost, UnknownProducerId
from .context import Context
from .metadata import TopicMetadata
from .standing import Calls, Standing

log = logging.getLogger(__name__)


class ProducerIds:
    """The PID of one producer object, and the PIDs it gave up for a fresh one."""

    def __init__(
        self,
        context: Context,
        meta: TopicMetadata,
        calls: Calls,
        session: str,
        *,
        name: str | None,
        resume: ProducerState | None,
    ) -> None:
        self._context = context
        self._meta = meta
        self._calls = calls
        self._session = session
        self.name = name
        self.resume = resume
        #: The PID written with every record (None until open).
        self.current: int | None = None
        #: PIDs this producer gave up for a fresh one (state expired while idle): a
        #: partition still on one moves to the current PID before its next send.
        self.retired: frozenset[int] = frozenset()
        #: Held while a fresh PID is drawn (one draw, whichever partitions find out).
        self._rekey = runtime.io_lock()

    # -- open --------------------------------------------------------------------------------

    def open(self) -> protocol.producer.Ticket | None:
        """Draw the PID (or check the saved one); with a name or saved state, take the
        ticket that orders this open against any other of that name (or state)."""
        meta, resume = self._meta, self.resume
        if resume is not None:
            self.check_history(resume)
            self._context.check_producer_id(resume.producer_id)
            self.current = resume.producer_id
        else:
            self.current = self._context.allocate_producer_id()
        if self.name is None and resume is None:
            return None
        # One ticket for the whole topic orders this open against any other of the
        # same name (or saved state) racing it over the partitions.
        # (A saved state of a named producer is an open of that name: both take the
        # name's tickets, or a resume racing an open of the name would go unordered.)
        named = self.name if resume is None else self.name or resume.name
        ticket = self._calls.execute(
            protocol.producer.producer_ticket(
                meta.meta_key,
                meta.name,
                incarnation=meta.incarnation,
                name=named,
                pid=self.current,
            )
        )
        if resume is None:
            self.current = ticket.pid  # a name's racing first opens agree
        return ticket

    def check_history(self, resume: ProducerState) -> None:
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

    def incarnation(
        self, pk: PartitionKeys, ticket: protocol.producer.Ticket | None
    ) -> protocol.producer.PidOpened:
        """PID, generation, next sequence and floor of this producer on a partition."""
        assert self.current is not None
        if self.name is None and self.resume is None:
            return protocol.producer.PidOpened(self.current, 0, 0, 0)
        resume = self.resume
        call = protocol.producer.pid_open(
            pk,
            pid=self.current,
            name=self.name,
            resume_generation=None if resume is None else resume.generations.get(pk.partition, 0),
            resume_next_sequence=None if resume is None else resume.next_sequence(pk.partition),
            session=self._session,
            incarnation=self._meta.incarnation_of(pk.partition),
            ticket=ticket,
        )
        return self._calls.execute(call)

    # -- a fresh PID after an idle expiry -------------------------------------------------------

    @staticmethod
    def idle_expired(exc: BaseException) -> bool:
        """Whether a call was refused because this producer's state expired while it was
        idle (nothing was written): UnknownProducerId ``idle``, which only a fresh batch's
        first attempt gets (a resend may have landed: it is settled by a resolve)."""
        return isinstance(exc, UnknownProducerId) and exc.reason == "idle"

    def moves(self, standing: Standing) -> bool:
        """Whether a partition still sends under a PID the producer gave up."""
        pid = standing.pid
        return pid != self.current and pid in self.retired

    def take_fresh(self, standing: Standing) -> None:
        """Give up this partition's PID for the producer's current one, drawing a fresh one
        first unless another partition did since (called holding the partition's call).

        Each step leaves a state an interrupt may stop at: the old PID is retired before the
        fresh one is published (no partition moves until both are), and a partition takes
        its new writer before its new PID (an interrupted move is made again)."""
        with self._rekey:
            old = standing.pid
            if old == self.current:
                fresh = self._context.allocate_producer_id()
                log.info(
                    "redis-fencing: producer %d of topic %r was idle past its state's expiry "
                    "on partition %d: it goes on as producer %d",
                    old,
                    self._meta.name,
                    standing.pk.partition,
                    fresh,
                )
                self.retired = self.retired | {old}
                self.current = fresh
        self.adopt(standing)

    def adopt(self, standing: Standing) -> None:
        """Move a partition to the producer's current PID: its first batch, generation 0."""
        pid = self.current
        assert pid is not None and pid not in self.retired
        writer = dataclasses.replace(standing.writer, producer_id=str(pid))
        standing.writer = writer
        # The PID last: until it is stored, a reader of ``state`` sees the retired one (so
        # reports this partition moved, at 0), and an interrupted move is made again.
        standing.generation, standing.next_sequence, standing.floor = 0, 0, 0
        standing.pid = pid

    # -- saving ------------------------------------------------------------------------------

    def state(self, standings: dict[int, Standing]) -> ProducerState:
        """PID, generations and next sequence per partition (to resume later)."""
        assert self.current is not None
        # (A partition still on a PID given up for a fresh one starts that one at 0; with
        # a batch pending there, under the old PID, no state can say how to resend it.)
        moved = {p for p, s in standings.items() if self.moves(s)}
        for p in moved:
            if standings[p].pending is not None:
                raise InvalidArgument(
                    f"partition {p} has a batch pending under this producer's previous id "
                    f"(it took a fresh one, its state having expired while idle): call "
                    f"producer.resolve({p}) first, then save the state"
                )
        return ProducerState(
            topic=self._meta.name,
            producer_id=self.current,
            name=self.name,
            generations={p: 0 if p in moved else s.generation for p, s in standings.items()},
            sequences={p: 0 if p in moved else s.next_sequence for p, s in standings.items()},
            incarnations={p: self._meta.incarnation_of(p) for p in standings},
        )

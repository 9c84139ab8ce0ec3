"""What a producer's calls came to: refusals, lost replies and the pending batches they
leave, settled by one resolve script (:class:`Outcomes`).

A refusal (a typed error other than :class:`~fencing.OutcomeUnknown`) wrote nothing. A
lost reply or an interrupt after the request may have left leaves the batch *pending*: it
is resolved before the next send on its partition (or by ``producer.resolve(p)``), so its
sequences are never reused blindly (G5).

>>> outcomes = Outcomes(meta, calls, session=session, status=status, ...)
>>> await outcomes.resolve(standing)          # the pending batch's metadata, or None
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .. import _group_commit as group_commit
from .. import _protocol as protocol
from .._group_commit import Entry
from .._modes import Pending
from .._protocol.topic import Appended, EncodedBatch, Sequenced
from .._record import RecordMetadata
from .._runtime.tasks import primitives as runtime
from .._telemetry import outcome_of
from ..errors import (
    DuplicateSequence,
    FencingError,
    OutcomeUnknown,
    ProducerFenced,
    StateLost,
)
from .metadata import TopicMetadata
from .standing import Answers, Calls, Resolution, Standing, Status

log = logging.getLogger(__name__)

#: DuplicateSequence reasons for sequences that were written before: the producer goes on
#: after them (a batch that straddles the last written sequence is refused, not skipped).
WRITTEN_BEFORE = frozenset({"older-than-window", "other-records"})

#: Fences a producer for good (stops renewing, answers every queue, leaves every partition).
Fence = Callable[[FencingError], runtime.Later[None]]


class Progress:
    """How far one group's call got (what an interrupt must still answer)."""

    __slots__ = ("appended", "batch", "failed", "sent_at", "sequenced")

    def __init__(self) -> None:
        self.batch: EncodedBatch | None = None
        self.sequenced: Sequenced | None = None
        self.sent_at: float | None = None
        self.appended: Appended | None = None
        self.failed = False


class Outcomes:
    """Answers the groups whose call failed, keeps what may have landed pending, and
    resolves it."""

    __slots__ = ("_answers", "_calls", "_fence", "_meta", "_session", "_status")

    def __init__(
        self,
        meta: TopicMetadata,
        calls: Calls,
        *,
        session: str,
        status: Status,
        answers: Answers,
        fence: Fence,
    ) -> None:
        self._meta = meta
        self._calls = calls
        self._session = session
        self._status = status
        self._answers = answers
        self._fence = fence

    async def refused(
        self, standing: Standing, group: list[Entry], done: Progress, exc: BaseException
    ) -> None:
        """Answer a group whose call raised ``exc`` (the caller re-raises an interrupt)."""
        p = standing.pk.partition
        done.failed = True
        # A refusal (a typed error other than OutcomeUnknown) wrote nothing. Anything
        # else - OutcomeUnknown, or an interrupt after the request may have left (the
        # queue settles an interrupted group itself, see GroupSend._interrupted) -
        # leaves the batch pending: resolved before the next send, so its sequences are
        # never reused blindly.
        unknown = isinstance(exc, OutcomeUnknown) or not isinstance(exc, FencingError)
        if unknown:
            self.set_pending(standing, done)
            if isinstance(exc, OutcomeUnknown):
                exc.args = (
                    f"{exc.args[0]}. The producer resolves it before its next send on "
                    f"partition {p} (or call producer.resolve({p})): it either landed "
                    "once, or can never land",
                )
        elif (
            isinstance(exc, DuplicateSequence)
            and exc.reason in WRITTEN_BEFORE
            and done.sequenced is not None
            and done.sequenced.first_sequence == standing.next_sequence
            and done.batch is not None
        ):
            # Those sequences were written before (by these records or others): the caller
            # is told, and the producer goes on after them instead of resending them for
            # ever (a copy job resumed from an older state skips what the error names).
            standing.next_sequence += done.batch.count
        error = exc if isinstance(exc, FencingError) else self.carried_unknown(p)
        standing.meter.records(outcome_of(error), sum([e.count for e in group]))
        group_commit.fail(group, error, self._answers.give)
        if isinstance(exc, (ProducerFenced, StateLost)):
            await self._fence(exc)

    def set_pending(self, standing: Standing, done: Progress) -> None:
        """Keep the batch of a call whose outcome is unknown, to resolve it later."""
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

    def _settled(self, standing: Standing, pending: Pending, result: Resolution) -> None:
        """Record a pending batch's outcome, then clear it (in that order: whoever waits
        for the outcome finds it once the batch is no longer pending)."""
        standing.meter.resolved(result is not None)  # (written before: it landed once)
        standing.resolved = (pending, result)
        self._status.last_resolution = (standing.pk.partition, result)
        standing.pending = None

    def carried_unknown(self, p: int) -> OutcomeUnknown:
        """The error of the records of a call interrupted in another caller's hands."""
        return OutcomeUnknown(
            f"the send on partition {p} of topic {self._meta.name!r} that carried these "
            "records was interrupted in the thread or task that sent it, after it may have "
            f"reached Redis. The producer resolves it before its next send on partition {p} "
            f"(or call producer.resolve({p}))"
        )

    async def resolve(self, standing: Standing) -> list[RecordMetadata] | None:
        """Settle the partition's pending batch in one script: its metadata if it landed
        (once), None if it did not (and then never will: the PID generation was bumped)."""
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
            session=self._session,
            incarnation=self._meta.incarnation_of(pk.partition),
            pending_ms=round((time.monotonic() - pending.sent_at) * 1000),
            fresh=pending.fresh,
        )
        try:
            resolved = await self._calls.execute(call)
        except (ProducerFenced, StateLost) as exc:
            await self._fence(exc)
            raise
        except DuplicateSequence as exc:
            # Its sequences were written before, by other records or longer ago than the
            # window: nothing is written now, and the producer goes on as after that
            # refusal. The outcome is the refusal itself, never "did not land": those
            # records (or others under their sequences) are in the log.
            if exc.reason in WRITTEN_BEFORE:
                end = pending.first_sequence + pending.records
                standing.next_sequence = max(standing.next_sequence, end)
            self._settled(standing, pending, exc)
            raise
        result: list[RecordMetadata] | None = None
        if resolved.landed:
            # The epoch its records carry: a successor may have written it, under its own.
            epoch = resolved.epoch if resolved.epoch >= 0 else standing.writer.epoch
            result = group_commit.answered(
                pending.records,
                topic=self._meta.name,
                partition=pk.partition,
                first_offset=resolved.first_offset,
                epoch=epoch,
                answers=resolved.answers,
            )
        superseded = resolved.generation > pending.generation + (0 if resolved.landed else 1)
        if not superseded:
            standing.generation = resolved.generation
            # Landed, it is the last batch acknowledged: the producer goes on after *it*
            # (Kafka's rule), not after the PID's last sequence on the partition. A resumed
            # producer's resend of an old batch may be resolved while later ones stand
            # written: those are still to be resent, and answered as the duplicates they
            # are. Sequences below the PID's next one were written: never fresh again.
            end = pending.first_sequence + pending.records
            standing.next_sequence = end if resolved.landed else resolved.next_sequence
            standing.floor = max(standing.floor, resolved.next_sequence)
        # Last, once the producer stands where the resolution leaves it: an interrupt
        # before this leaves the batch pending, to be resolved again (the same answer).
        self._settled(standing, pending, result)
        if superseded:
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
        log.info(
            "redis-fencing: pending batch on %s partition %d %s",
            pk.topic,
            pk.partition,
            f"landed at offset {resolved.first_offset}" if result else "did not land",
        )
        return result

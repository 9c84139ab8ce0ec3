"""The call that carries the head of one partition's queue, and the answers it gives.

The partition's holder (a caller, a drive, the sender, a flush: see
:mod:`.partition_queue`) calls :meth:`GroupSend.send_next`: it takes the head of the queue
as one group (group commit, see :mod:`fencing._group_commit`), sends it as one fenced
append, all or nothing, and answers each entry with its own slice of the metadata or the
batch's error. An interrupt of the holder in the call (KeyboardInterrupt, a cancelled
task) leaves no entry unanswered: the group goes back to the head of the queue if it was
not sent; if it may have landed, the other callers wait at the head behind the batch's
resolution (the group is *carried*) and are answered from it by the next call.

>>> sending = GroupSend(standing, meta, calls, outcomes=outcomes, ids=ids, ...)
>>> async with queue.holding():
...     await sending.send_next()                  # one call; each entry answered
"""

from __future__ import annotations

import time
from collections import deque

from .. import _group_commit as group_commit
from .. import _protocol as protocol
from .. import _telemetry as telemetry
from .._durability import Durability
from .._group_commit import Entry
from .._protocol.topic import Appended, Sequenced
from .._record import RecordMetadata
from .._runtime.tasks import primitives as runtime
from .._telemetry import outcome_of
from ..errors import DuplicateMessageId, DuplicateSequence, FencingError, Unavailable
from .metadata import TopicMetadata
from .outcomes import Outcomes, Progress
from .producer_ids import ProducerIds
from .standing import Answers, Calls, Standing, Status


class GroupSend:
    """Sends the head of one partition's queue, a group at a time, and answers its entries
    (the caller holds the partition)."""

    __slots__ = (
        "_answers",
        "_calls",
        "_carried",
        "_durability",
        "_ids",
        "_meta",
        "_outcomes",
        "_status",
        "guard",
        "idempotent",
        "name",
        "queue",
        "standing",
        "to_wake",
    )

    def __init__(
        self,
        standing: Standing,
        meta: TopicMetadata,
        calls: Calls,
        *,
        outcomes: Outcomes,
        ids: ProducerIds,
        status: Status,
        answers: Answers,
        durability: Durability,
        idempotent: bool,
        name: str | None,
    ) -> None:
        #: What the producer holds on the partition.
        self.standing = standing
        self._meta = meta
        self._calls = calls
        self._outcomes = outcomes
        self._ids = ids
        self._status = status
        self._answers = answers
        self._durability = durability
        self.idempotent = idempotent
        self.name = name
        #: Sends waiting for the call in flight (group commit): taken by the partition's holder.
        self.queue: deque[Entry] = deque()
        #: Guards the queue's head (taking, withdrawing), never held across I/O.
        self.guard = runtime.state_lock()
        #: The first of the callers last answered, not woken yet (see group_commit.settle):
        #: woken as the next call leaves, or as the partition is let go.
        self.to_wake: Entry | None = None
        #: The group of the pending batch whose call was interrupted in its sender's hands,
        #: its other callers queued again behind its resolution (see _interrupted).
        self._carried: list[Entry] | None = None

    def fail_all(self, error: BaseException) -> None:
        """Answer every send still queued with ``error`` (none was sent), except the
        callers of an interrupted call still unresolved: their records may have landed,
        and they are told OutcomeUnknown (the batch stays pending)."""
        with self.guard:
            queued = [entry for entry in self.queue if not entry.abandoned]
            self.queue.clear()
        carried = self._carried
        if carried is not None:
            ids = set(map(id, carried))
            unknown = [entry for entry in queued if id(entry) in ids]
            queued = [entry for entry in queued if id(entry) not in ids]
            p = self.standing.pk.partition
            group_commit.fail(unknown, self._outcomes.carried_unknown(p), self._answers.give)
            self._carried = None
        self.standing.meter.records(outcome_of(error), sum([e.count for e in queued]))
        group_commit.fail(queued, error, self._answers.give)

    def take_answered(self) -> Entry | None:
        """The first of the callers last answered, not woken yet (the caller wakes them)."""
        head, self.to_wake = self.to_wake, None
        return head

    def wake_answered(self) -> None:
        """Wake the callers answered last (the partition's holder calls this as its next
        call leaves, or before it lets the partition go)."""
        head = self.take_answered()
        if head is not None:
            group_commit.wake(head)

    async def send_next(self) -> None:
        """Send the head of the queue as one batch and answer its entries (the caller holds
        the partition). Raises only an interrupt of this caller (KeyboardInterrupt, a
        cancelled task), after answering the entries it took, or putting them back at the
        head of the queue if they were not sent."""
        standing = self.standing
        self.settle_carried()
        if self._status.fenced is not None:
            self.fail_all(self._status.fenced)
            return
        if standing.pending is not None:
            try:
                await self.resolve_pending()
            except DuplicateSequence:
                pass  # settled as written before: last_resolution carries the refusal
            except FencingError as exc:
                # Nothing queued was sent: each caller learns why (fenced, unreachable).
                self.fail_all(exc)
                return
        if self._ids.moves(standing):
            self._ids.adopt(standing)  # a fresh PID was taken on another partition
        done = Progress()
        group: list[Entry] = []
        try:
            with self.guard:  # (taken into ``group`` one by one: an interrupt loses none)
                group_commit.take_group(
                    self.queue, self._meta.limits, runtime.claim_future, into=group
                )
            if not group:
                return
            await self._send_group(group, done)
        except BaseException:
            # Interrupted outside the call's own handling (before the request left, or
            # while the answers were being given): no entry it took is left unanswered.
            self._interrupted(group, done)
            raise

    async def resolve_pending(self) -> list[RecordMetadata] | None:
        """Settle the partition's pending batch (the caller holds the partition): its
        metadata if it landed, None if it did not. The callers of an interrupted call that
        wait behind it are answered with their own offsets if it landed; if it did not,
        they stay at the head of the queue and go in the next call."""
        try:
            return await self._outcomes.resolve(self.standing)
        finally:
            self.settle_carried()

    def settle_carried(self) -> None:
        """Answer the callers of an interrupted call once its batch was resolved: their
        offsets if it landed, the refusal if its sequences were written before (either way
        they leave the queue), else nothing (they are sent next).
        Repeatable: an interrupt midway leaves it to the next call, which answers the same."""
        carried = self._carried
        resolved = self.standing.resolved
        if carried is None or resolved is None or self.standing.pending is not None:
            return
        landed = resolved[1]
        if isinstance(landed, DuplicateSequence):
            # Its sequences were written before: its callers learn that, and none of their
            # records is sent again under new sequences.
            group_commit.fail([e for e in carried if not e.done], landed, self._answers.give)
            self._unqueue(carried)
        elif landed:
            # Answered first, then out of the queue: an interrupt between the two leaves
            # them answered in the queue, where take_group skips what is answered.
            if not all(entry.done for entry in carried):
                self._answer(carried, metadata=landed, chain=False)
            self._unqueue(carried)
        self._carried = None

    def _unqueue(self, entries: list[Entry]) -> None:
        """Take ``entries`` out of the queue (answered: they are not sent again)."""
        with self.guard:
            waiting = set(map(id, entries))
            kept = [entry for entry in self.queue if id(entry) not in waiting]
            self.queue.clear()
            self.queue.extend(kept)

    async def _send_group(self, group: list[Entry], done: Progress) -> None:
        standing, topic = self.standing, self._meta
        batch = group_commit.merge_batches(group)
        p = standing.pk.partition
        idempotent = self.idempotent
        metered = telemetry.enabled()
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
            self.wake_answered()  # the callers of the last call run while it is out
            if metered:
                standing.meter.call(len(group))
            try:
                appended = await self._calls.execute(call, self._durability)
            except BaseException as exc:
                if not isinstance(exc, FencingError):
                    raise  # an interrupt of this sender: _interrupted settles the group
                if isinstance(exc, DuplicateMessageId):
                    done.failed = True
                    self._refuse_known(group, exc)
                    return
                if fresh_pid or not self._ids.idle_expired(exc):
                    await self._outcomes.refused(standing, group, done, exc)
                    return
                # Its state expired while it was idle, and nothing was written: the
                # producer takes a fresh PID and sends the same group as that PID's first
                # batch (KIP-360). Once.
                fresh_pid = True
                done.sent_at = None  # (interrupted now, the group goes back to the queue)
                try:
                    await self._ids.take_fresh(standing)
                    standing.meter.id_refreshed()
                except FencingError as failed:
                    # Refused, and no fresh PID (the server was unreachable): nothing was
                    # written and nothing is pending.
                    done.sequenced = None
                    unavailable = Unavailable(
                        f"partition {p} of topic {topic.name!r}: this producer's state expired "
                        f"while it was idle and a fresh producer id could not be drawn "
                        f"({failed}); nothing was written. Send again"
                    )
                    await self._outcomes.refused(standing, group, done, unavailable)
                    return
                continue
            break
        done.appended = appended
        self._book(done)
        duplicate = appended.duplicate and _resent(done)
        if metered:
            standing.meter.records("duplicate" if duplicate else "written", batch.count)
        self._answer_appended(group, appended, duplicate)

    def _book(self, done: Progress) -> None:
        """Move the partition past a call that landed (repeatable: an interrupt midway
        leaves it to _interrupted, which books the same)."""
        batch, sequenced, appended = done.batch, done.sequenced, done.appended
        assert batch is not None and sequenced is not None and appended is not None
        if self.idempotent and sequenced.first_sequence is not None:
            end = sequenced.first_sequence + batch.count
            self.standing.next_sequence = max(self.standing.next_sequence, end)
        # (Records answered by their message ids were not written.)
        written = batch.count - len(appended.answers or ())
        self._meta.saw_next(self.standing.pk.partition, appended.first_offset + written)

    def _answer_appended(self, group: list[Entry], appended: Appended, duplicate: bool) -> None:
        # A resend answered from the window reports the epoch the records carry.
        epoch = appended.epoch if appended.epoch >= 0 else self.standing.writer.epoch
        if duplicate:
            for entry in group:
                entry.duplicate = True
        metadata = group_commit.answered(
            sum([e.count for e in group]),
            topic=self._meta.name,
            partition=self.standing.pk.partition,
            first_offset=appended.first_offset,
            epoch=epoch,
            answers=appended.answers,
            duplicate=duplicate,
        )
        self._answer(group, metadata=metadata)

    def _refuse_known(self, group: list[Entry], exc: DuplicateMessageId) -> None:
        """Answer the calls of ``group`` whose message ids are partly known, each with the
        records of its own that ``exc`` names, and put the others back at the head of the
        queue: nothing was written and no sequence used, so they go in the next call."""
        pk = self.standing.pk
        refused: list[tuple[Entry, DuplicateMessageId]] = []
        rest: list[Entry] = []
        at = 0
        for entry in group:
            n = entry.count
            known = {
                i - at: (md.offset, md.epoch) for i, md in exc.known.items() if at <= i < at + n
            }
            if known:
                refused.append((entry, protocol.partition_errors.duplicate_ids(pk, known, n)))
            else:
                rest.append(entry)
            at += n
        for entry, error in refused:
            self.standing.meter.records("refused", entry.count)
            group_commit.fail([entry], error, self._answers.give)
        self._requeue(rest)

    def _answer(
        self, group: list[Entry], *, metadata: list[RecordMetadata], chain: bool = True
    ) -> None:
        """Answer each entry of ``group`` with its own slice of ``metadata`` (woken one
        after the other on threads, with ``chain``)."""
        with self.guard:  # (as pass_on: a caller giving up now is chained or not)
            head = group_commit.settle(
                group,
                metadata,
                give=self._answers.give,
                chain=chain and not runtime.IS_ASYNC,
            )
        if head is not None:
            self.wake_answered()  # (none left: woken as this call left)
            self.to_wake = head

    def _interrupted(self, group: list[Entry], done: Progress) -> None:
        """Leave no entry of an interrupted group unanswered (see :meth:`send_next`)."""
        standing = self.standing
        left = [entry for entry in group if not entry.done]
        if done.sent_at is None:
            self._requeue(left)  # never sent: they go first in the next call
            return
        if done.appended is not None:
            self._book(done)
            # It landed: every answer is known.
            self._answer_appended(group, done.appended, _resent(done))
            return
        if not done.failed:
            assert done.batch is not None  # (sent: the batch was made)
            standing.meter.records("unknown", done.batch.count)
            self._outcomes.set_pending(standing, done)
        if standing.pending is None or done.failed:
            # Nothing to resolve it by (a producer made with idempotent=False): the callers
            # it carried are told the outcome is unknown.
            carried = self._outcomes.carried_unknown(standing.pk.partition)
            group_commit.fail(left, carried, self._answers.give)
            return
        # It may have landed. The interrupted caller's own entry (``leading``) goes with its
        # interrupt; every other caller waits at the head of the queue for the resolution
        # the next call on the partition starts with, and gets its own answer from it.
        self._carried = group
        self._requeue([entry for entry in left if not entry.leading])

    def _requeue(self, entries: list[Entry]) -> None:
        """Put ``entries`` back at the head of the queue, in order (one an interrupt left
        in the queue as it was taken is not put twice)."""
        with self.guard:
            present = set(map(id, self.queue))
            self.queue.extendleft(reversed([e for e in entries if id(e) not in present]))


def _resent(done: Progress) -> bool:
    """Whether a call that landed was answered as the resend of records an earlier send
    wrote. A fresh batch (sequences past all the producer saw written) found in the window
    was written by an earlier attempt of this very call, whose reply was lost: this send
    wrote it."""
    appended, sequenced = done.appended, done.sequenced
    assert appended is not None
    return appended.duplicate and not (sequenced is not None and sequenced.fresh)

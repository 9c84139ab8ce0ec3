"""One partition's queue of sends and its single call in flight (Kafka's accumulator).

Every send is queued on its partition. The queue drives the partition's one call at a
time: the head of the queue goes as one fenced append (group commit, see
:mod:`fencing._group_commit`), all or nothing, and each caller is answered with its own
slice of the metadata or the batch's error. A caller waits for its own entry's answer; the
call belongs to the queue, never to one caller. Under asyncio it runs in a task of the
queue's own (a *drive*, started by whichever caller finds the partition free), so a
caller's cancellation ends only that caller's wait. With threads it runs in the time of
whichever caller finds the partition free (a hand-off to another thread would cost a
context switch per call); when that caller is interrupted in the call (KeyboardInterrupt,
an asynchronous exception), the others' records go back to the head of the queue behind
the batch's resolution, and the next call on the partition answers each of them exactly:
the offsets the batch landed at, or a send of their own if it did not land. Nobody is told
"maybe" because somebody else was interrupted. The path of a send:
producer → :class:`PartitionQueue` → :func:`fencing._protocol.topic.append` → driver →
script, and back the same way.

>>> queue = PartitionQueue(standing, meta, calls, outcomes=outcomes, ids=ids, ...)
>>> metadata = await queue.submit(entry)              # this caller's records, once answered
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator

from .. import _group_commit as group_commit
from .. import _protocol as protocol
from .._durability import Durability
from .._group_commit import Entry
from .._protocol.topic import Appended, Sequenced
from .._record import RecordMetadata
from .._runtime.tasks import primitives as runtime
from ..errors import DuplicateSequence, FencingError, InvalidArgument, Unavailable
from .metadata import TopicMetadata
from .outcomes import Outcomes, Progress
from .producer_ids import ProducerIds
from .standing import Answers, Calls, Standing, Status, Wakeup

log = logging.getLogger(__name__)

#: Calls a caller drives for others once its own records are answered, before it lets the
#: partition go and wakes the next queued caller to go on (bounds its latency).
SERVE_AFTER_OWN = 8
#: How long a queued send sleeps before it looks at the partition again on its own.
RECHECK_SECONDS = 0.5
#: How long the queue waits for the callers it answered to run (threads: see
#: _let_answered_run) before it sends what is queued anyway.
_CHAIN_WAIT = 0.002
#: Calls one drive (asyncio) sends before it lets the partition go, so a flush, a
#: resolve() or a close waiting for the partition is never starved by a busy queue.
DRIVE_CALLS = 64


def settled(entry: Entry) -> bool:
    """Whether a queued entry needs nothing more (answered, or given up by its caller)."""
    return entry.done or entry.abandoned or (entry.future is not None and entry.future.cancelled())


class PartitionQueue:
    """The sends queued on one partition and the call that carries them."""

    __slots__ = (
        "_answers",
        "_calls",
        "_carried",
        "_drive_task",
        "_durability",
        "_ids",
        "_meta",
        "_outcomes",
        "_status",
        "_wakeup",
        "guard",
        "idempotent",
        "lock",
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
        wakeup: Wakeup,
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
        self._wakeup = wakeup
        self._durability = durability
        self.idempotent = idempotent
        self.name = name
        #: Held while a call is in flight on the partition (one at a time).
        self.lock = runtime.io_lock()
        #: Sends waiting for the call in flight (group commit): taken by the lock's holder.
        self.queue: deque[Entry] = deque()
        #: Guards the queue's head (taking, withdrawing), never held across I/O.
        self.guard = runtime.state_lock()
        #: The first of the callers last answered, not woken yet (see group_commit.settle):
        #: woken as the next call leaves, or as the lock is let go.
        self.to_wake: Entry | None = None
        #: The group of the pending batch whose call was interrupted in its sender's hands,
        #: its other callers queued again behind its resolution (see _interrupted).
        self._carried: list[Entry] | None = None
        #: The task sending the queue (asyncio; see _drive), while one runs.
        self._drive_task: object | None = None

    # -- callers -----------------------------------------------------------------------------

    async def submit(self, entry: Entry) -> list[RecordMetadata]:
        """Queue ``entry`` and wait for its answer: its records' metadata, or its error."""
        entry.event = runtime.Signal()
        self.queue.append(entry)
        lock = self.lock
        try:
            while not entry.done:
                if runtime.IS_ASYNC:
                    # The call belongs to the queue: a task of its own sends it (see _drive),
                    # and this caller waits for its answer like the others.
                    self._start_drive()
                    await entry.event.wait(RECHECK_SECONDS)
                elif await runtime.try_lock(lock):
                    entry.leading = True
                    try:
                        await self._lead(entry)
                    finally:
                        entry.leading = False
                        try:
                            self._wake_answered()
                        finally:  # (an interrupt as it wakes them never keeps the lock)
                            lock.release()
                            self.wake_head()
                else:
                    # A call is in flight: it takes this entry in a next call, or the queue
                    # wakes us to drive it (group commit). Never wait on the lock itself: a
                    # caller already answered would still have to get it, one after the
                    # other, before the next call could start. (The timeout only bounds a
                    # wake-up that never came: it looks again.)
                    await entry.event.wait(RECHECK_SECONDS)
        except BaseException:
            with self.guard:
                entry.abandoned = True  # not sent if it was not taken yet
            self.wake_head()
            raise
        finally:
            # Wake the next caller of its chain, in a finally: an interrupt as this one
            # wakes up strands nobody behind it. Under the guard, as settle links the chain
            # (see there): a caller that gave up is either left out of it, or passes it on.
            with self.guard:
                group_commit.pass_on(entry)
        return entry.answer()

    def enqueue(self, entry: Entry) -> None:
        """Queue a ``send_async`` record (its future is answered; the sender sends it)."""
        self.queue.append(entry)

    def withdraw(self, entry: Entry) -> None:
        """Take back a send_async() record queued as the producer closed or was fenced
        (its queue was answered already) and raise why; if it was taken meanwhile, it
        is answered like the others."""
        with self.guard:
            if entry in self.queue:
                self.queue.remove(entry)
                if self._status.fenced is not None:
                    raise self._status.fenced
                raise InvalidArgument(
                    "this producer is closed: make a new one with topic.producer()"
                )

    def last_unsettled(self) -> Entry | None:
        """The last queued entry still waiting for its answer (what a flush waits for)."""
        with self.guard:
            return next((e for e in reversed(self.queue) if not settled(e)), None)

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
        group_commit.fail(queued, error, self._answers.give)

    # -- holding the partition -----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def holding(self) -> AsyncIterator[None]:
        """Hold the partition (no call in flight there); on letting it go, wake the next
        queued send."""
        try:
            async with self.lock:
                try:
                    yield
                finally:
                    self._wake_answered()
        finally:
            self.wake_head()

    def wake_head(self) -> None:
        """After the partition is let go: give the send_async() answers kept, and have the
        first queued send's caller (or the sender, for send_async records) drive the
        queue, so it never waits for nobody."""
        if self._answers:
            self._answers.deliver()
        if self.lock.locked():
            return  # its holder sends the queue (or wakes the head when it lets go)
        wakeup = self._wakeup
        with self.guard:
            sender_woken = False
            for queued in self.queue:
                if queued.abandoned:
                    continue
                if queued.event is not None:
                    queued.event.set()
                    return
                if not sender_woken:
                    wakeup.set()
                    sender_woken = True
                if not wakeup.lingering:
                    return
                # A lingering sender waits on: the first send() caller queued behind
                # send_async() records takes the queue (theirs go with it) instead.

    # -- driving the queue ---------------------------------------------------------------------

    async def _lead(self, entry: Entry) -> None:
        """Send the queue's head (holding the partition) until ``entry`` is answered; then
        go on for the sends queued meanwhile, a few calls more, so the next call leaves
        without waiting for another thread or task to wake up (only for the callers just
        answered to run: see :meth:`_let_answered_run`)."""
        extra = 0
        while True:
            self._settle_carried()  # (an interrupted holder may have left it half done)
            if entry.done:
                if extra >= SERVE_AFTER_OWN:
                    break
                if self.to_wake is not None:
                    await self._let_answered_run()
                if not self.queue:
                    break
                extra += 1
            elif not self.queue:
                # Taken by a call that did not answer it: cannot happen (an interrupted call
                # answers or requeues what it took), but never spin on an empty queue.
                carried = self._outcomes.carried_unknown(self.standing.pk.partition)
                group_commit.fail([entry], carried, self._answers.give)
                break
            await self.send_next()

    def _start_drive(self) -> None:
        """Start the task that sends the queue (asyncio), unless one runs."""
        if not runtime.running(self._drive_task):
            # Once it ends (even cancelled before its first step), a queued caller starts
            # the next one if anything is left.
            self._drive_task = runtime.spawn(self._drive, "fencing-send", self.wake_head)

    async def _drive(self) -> None:
        """Send what is queued, apart from every caller (asyncio: the task
        :meth:`submit` starts), holding the partition, then let it go.

        A caller cancelled meanwhile stops waiting at once; its records are never sent if
        they were not taken yet, and answered (their fate known, nothing pending) if the
        call carrying them completes. The others each get their own answer. The task
        takes the partition itself, so one cancelled before its first step (a shutdown
        cancelling every task) holds nothing; the callers then start another."""
        try:
            async with self.holding():
                self._settle_carried()  # (an interrupted holder may have left it half done)
                for _ in range(DRIVE_CALLS):
                    if not self.queue:
                        break
                    await self.send_next()
        except Exception:  # pragma: no cover - send_next answers every entry it takes
            log.exception("redis-fencing: sending partition %d failed", self.standing.pk.partition)
        finally:
            if self._drive_task is runtime.current():
                self._drive_task = None

    async def _let_answered_run(self) -> None:
        """Wake the callers answered last and wait until each has run (or ``_CHAIN_WAIT``)
        before the next call (threads only: under asyncio nobody waits to be woken).

        Those callers are the ones that send next: sending at once, the call would leave
        with the few of them that were quick enough, and the rest would make calls of
        their own. Waiting while their threads take turns with the interpreter lock makes
        one call of them all: measured with 8 threads, groups of 6-7 instead of 3-4, and a
        third less CPU per send (bench.coalesce)."""
        head = self.to_wake
        assert head is not None
        self.to_wake = None
        end = group_commit.ChainEnd(runtime.Signal())
        with self.guard:
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
            with self.guard:
                for entry in chain:
                    entry.event.set()

    def _wake_answered(self) -> None:
        """Wake the callers answered last (the partition's holder calls this as its next
        call leaves, or before it lets the partition go)."""
        head = self.to_wake
        if head is not None:
            self.to_wake = None
            group_commit.wake(head)

    async def send_next(self) -> None:
        """Send the head of the queue as one batch and answer its entries (the caller holds
        the partition). Raises only an interrupt of this caller (KeyboardInterrupt, a
        cancelled task), after answering the entries it took, or putting them back at the
        head of the queue if they were not sent."""
        standing = self.standing
        self._settle_carried()
        if self._status.fenced is not None:
            self.fail_all(self._status.fenced)
            return
        if standing.pending is not None:
            try:
                await self.resolve_pending()
            except DuplicateSequence:
                pass  # settled: the batch was a resend of sequences written before
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
            self._settle_carried()

    def _settle_carried(self) -> None:
        """Answer the callers of an interrupted call once its batch was resolved: their
        offsets if it landed (they leave the queue), else nothing (they are sent next).
        Repeatable: an interrupt midway leaves it to the next call, which answers the same."""
        carried = self._carried
        resolved = self.standing.resolved
        if carried is None or resolved is None or self.standing.pending is not None:
            return
        landed = resolved[1]
        if landed:
            # Answered first, then out of the queue: an interrupt between the two leaves
            # them answered in the queue, where take_group skips what is answered.
            if not all(entry.done for entry in carried):
                self._answer(carried, landed[0].offset, landed[0].epoch, chain=False)
            with self.guard:
                waiting = set(map(id, carried))
                kept = [entry for entry in self.queue if id(entry) not in waiting]
                self.queue.clear()
                self.queue.extend(kept)
        self._carried = None

    async def _send_group(self, group: list[Entry], done: Progress) -> None:
        standing, topic = self.standing, self._meta
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
            self._wake_answered()  # the callers of the last call run while it is out
            try:
                appended = await self._calls.execute(call, self._durability)
            except BaseException as exc:
                if not isinstance(exc, FencingError):
                    raise  # an interrupt of this sender: _interrupted settles the group
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
        self._answer_appended(group, appended)

    def _book(self, done: Progress) -> None:
        """Move the partition past a call that landed (repeatable: an interrupt midway
        leaves it to _interrupted, which books the same)."""
        batch, sequenced, appended = done.batch, done.sequenced, done.appended
        assert batch is not None and sequenced is not None and appended is not None
        if self.idempotent and sequenced.first_sequence is not None:
            end = sequenced.first_sequence + batch.count
            self.standing.next_sequence = max(self.standing.next_sequence, end)
        self._meta.saw_next(self.standing.pk.partition, appended.first_offset + batch.count)

    def _answer_appended(self, group: list[Entry], appended: Appended) -> None:
        # A resend answered from the window reports the epoch the records carry.
        epoch = appended.epoch if appended.epoch >= 0 else self.standing.writer.epoch
        self._answer(group, appended.first_offset, epoch)

    def _answer(
        self, group: list[Entry], first_offset: int, epoch: int, *, chain: bool = True
    ) -> None:
        """Answer each entry of ``group`` (landed at ``first_offset``) with its own slice
        (woken one after the other on threads, with ``chain``)."""
        standing = self.standing
        with self.guard:  # (as pass_on: a caller giving up now is chained or not)
            head = group_commit.settle(
                group,
                topic=self._meta.name,
                partition=standing.pk.partition,
                first_offset=first_offset,
                epoch=epoch,
                give=self._answers.give,
                chain=chain and not runtime.IS_ASYNC,
            )
        if head is not None:
            self._wake_answered()  # (none left: woken as this call left)
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
            self._answer_appended(group, done.appended)  # it landed: every answer is known
            return
        if not done.failed:
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

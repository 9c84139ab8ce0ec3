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
producer → :class:`PartitionQueue` → :class:`~.group_send.GroupSend` →
:func:`fencing._protocol.topic.append` → driver → script, and back the same way.

The call itself and the answers it gives are :mod:`.group_send`.

>>> queue = PartitionQueue(standing, meta, calls, outcomes=outcomes, ids=ids, ...)
>>> metadata = await queue.submit(entry)              # this caller's records, once answered
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator

from .. import _group_commit as group_commit
from .. import _telemetry as telemetry
from .._durability import Durability
from .._group_commit import Entry
from .._record import RecordMetadata
from .._runtime.tasks import primitives as runtime
from ..errors import FencingError, InvalidArgument
from .group_send import GroupSend
from .metadata import TopicMetadata
from .outcomes import Outcomes
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
        "_drive_task",
        "_outcomes",
        "_status",
        "_wakeup",
        "guard",
        "lock",
        "queue",
        "sending",
        "standing",
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
        self._outcomes = outcomes
        self._status = status
        self._answers = answers
        self._wakeup = wakeup
        #: The call that carries the head of the queue, and the answers it gives (the
        #: lock's holder calls it).
        self.sending = GroupSend(
            standing,
            meta,
            calls,
            outcomes=outcomes,
            ids=ids,
            status=status,
            answers=answers,
            durability=durability,
            idempotent=idempotent,
            name=name,
        )
        #: Held while a call is in flight on the partition (one at a time).
        self.lock = runtime.io_lock()
        #: Sends waiting for the call in flight (group commit): the sending's own queue.
        self.queue = self.sending.queue
        #: Guards the queue's head (taking, withdrawing), never held across I/O.
        self.guard = self.sending.guard
        #: The task sending the queue (asyncio; see _drive), while one runs.
        self._drive_task: object | None = None

    # -- callers -----------------------------------------------------------------------------

    async def submit_measured(
        self, entry: Entry, fenced: FencingError | None
    ) -> list[RecordMetadata]:
        """:meth:`submit` in a ``fencing.send`` span, counted by outcome and timed; with
        ``fenced`` (the producer was superseded), raise that, counted as fenced records (a
        zombie that keeps sending shows)."""
        meter = self.standing.meter
        started = time.monotonic()
        with telemetry.span("fencing.send", meter.send_span) as span:
            try:
                if fenced is not None:
                    raise fenced
                answer = await self.submit(entry)
            except BaseException as exc:
                if exc is fenced:
                    meter.records("fenced", entry.count)
                meter.send_took(time.monotonic() - started, telemetry.outcome_of(exc))
                raise
            outcome = "duplicate" if entry.duplicate else "written"
            meter.send_took(time.monotonic() - started, outcome)
            span.set_attribute(telemetry.OUTCOME, outcome)
        return answer

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
                            self.sending.wake_answered()
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
                    self.sending.wake_answered()
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
            self.sending.settle_carried()  # (an interrupted holder may have left it half done)
            if entry.done:
                if extra >= SERVE_AFTER_OWN:
                    break
                if self.sending.to_wake is not None:
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
            await self.sending.send_next()

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
                self.sending.settle_carried()  # (an interrupted holder may have left it half done)
                for _ in range(DRIVE_CALLS):
                    if not self.queue:
                        break
                    await self.sending.send_next()
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
        head = self.sending.take_answered()
        assert head is not None
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

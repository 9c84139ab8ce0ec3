"""One term of an election: :class:`Leadership`, its renewals, its deadline, and the
callback contract, which this module carries out.

A term is a grant of the ownership row (``"__election__"``, name): its token is unique per
term, only grows, and is the fencing token of everything the leader writes elsewhere. A
leader keeps its term by renewing the row; a **renew deadline** below the TTL, on a timer
thread that no hanging call can hold up, makes it step down locally (``lost`` set,
``on_revoked`` called) before its lease can lapse by server time, so the intervals in which
two processes believe they lead never overlap (given clocks that run at the same rate).

The callback contract (as client-go's, where the leading callback's context is cancelled on
loss and the stopped callback runs on time):

- ``on_elected`` runs once per term, never for a term that ended before it could start
  (the campaign then goes on); ``on_revoked`` runs once for each term whose ``on_elected``
  started, never for another.
- A term lost involuntarily (no renewal within the renew deadline: Redis unreachable, or
  the process paused; or another candidate took over) sets ``lost`` and runs
  ``on_revoked`` at once, before the lease can lapse by server time, even while
  ``on_elected`` still runs: ``lost`` is then ``on_elected``'s cancellation signal. A
  process paused past its lease sets ``lost`` at its first look, and
  :meth:`Leadership.check` returns only once ``on_revoked`` has run.
- A term ended voluntarily (``resign()``, leaving the block, ``close()`` from any thread)
  sets ``lost``, waits for ``on_elected`` to return (at most until the renew deadline,
  renewing meanwhile), runs ``on_revoked``, and only then releases the row: no successor
  starts while the old term's callbacks run. ``resign()`` or ``close()`` called from inside
  a callback does not wait for itself.

A term knows its election only through what it reads of it and the few things it asks of
it (:mod:`.term_view`); :func:`.term_start.begin_term` starts it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from .. import _forks as forks
from .. import _telemetry as telemetry
from .._grant import Grant
from .._runtime.tasks import primitives as runtime
from ..errors import Fenced, FencingError, LeaseExpired, StateLost
from . import term_errors
from .lost_event import LostEvent
from .metadata import TopicFace
from .ownership import Ownership
from .term_producer import TermProducer, TermProducers
from .term_view import ElectionView, TermHooks

#: on_elected / on_revoked: called with the term (under fencing.aio, may be a coroutine
#: function).
Callback = Callable[["Leadership"], Any]

log = logging.getLogger(__name__)

#: The exit status of a process whose election was made with ``exit_on_loss=True`` when it
#: loses a term it did not give up itself (EX_SOFTWARE).
EXIT_ON_LOSS_STATUS = 70


class Leadership:
    """One term this process holds. Made by :meth:`Election.campaign`; never built by hand.

    ``token`` is the fencing token for writes elsewhere; ``lost`` is set the moment the term
    ends here (resigned, superseded, or no renewal succeeded within the renew deadline);
    :meth:`check` asks the server.

    >>> async with election.campaign() as leadership:
    ...     while not leadership.lost.is_set():
    ...         db.execute("UPDATE jobs SET owner_token = %s WHERE id = %s "
    ...                    "AND owner_token <= %s", (leadership.token, 1, leadership.token))
    """

    def __init__(
        self,
        election: ElectionView[Leadership],
        owner: Ownership,
        grant: Grant,
        *,
        sent: float,
        started: float,
        hooks: TermHooks[Leadership],
    ) -> None:
        #: The election that won this term.
        self.election = election
        self.grant = grant
        #: The fencing token of this term.
        self.token = grant.token
        #: When the term began, in seconds since the epoch by the server's clock.
        self.term_started = started
        #: When the term ends here (time.monotonic()) unless a renewal moves it on.
        self._deadline = sent + election.renew_deadline
        #: Set when the term ends here; never cleared.
        self.lost: runtime.Event = LostEvent(lambda: self._deadline, self._expired)
        self._owner = owner
        self._hooks = hooks
        self._lock = runtime.state_lock()
        #: Wakes the timer: a loss was handed to it, or the term ended.
        self._wake = runtime.Event()
        #: Set once on_elected has returned (or will never run): a voluntary end waits for it.
        self._elected = runtime.Event()
        #: Whether on_elected started (then, and only then, on_revoked runs), and the thread
        #: or task running it (a resign from inside it must not wait for itself).
        self._announced = False
        self._electing: object | None = None
        #: Set when a voluntary end's caller was interrupted while it waited for
        #: on_elected: that callback's runner completes the end when it returns.
        self._handover = False
        #: Set when renewals must stop: the term was released, or lost involuntarily.
        self._stop_renewing = runtime.Event()
        #: The timer (a thread, or a task under asyncio), as it sees itself.
        self._timer: object | None = None
        self._finisher: object | None = None
        forks.register(self)
        self._pending: FencingError | None = None
        self._ended = False
        self._reason: FencingError | None = None
        self._finished = runtime.Event()
        self._runners: list[object] = []
        # A notification that the row was taken over ends the term at once.
        owner.on_severed = self._on_severed
        self._producers = TermProducers(
            election.name, self.token, self.lost, self._ended_reason, hooks.guard
        )

    # -- public ------------------------------------------------------------------------------

    @property
    def reason(self) -> FencingError | None:
        """Why the term ended (None while it lasts).

        >>> await leadership.resign()
        >>> type(leadership.reason).__name__
        'Fenced'
        """
        return self._ended_reason() if self.lost.is_set() else None

    async def check(self) -> Grant:
        """Confirm, by server time, that this term still holds.

        Raises :class:`~fencing.Fenced` once another candidate was elected or the term was
        resigned, :class:`~fencing.LeaseExpired` when no renewal succeeded within the renew
        deadline (or the lease lapsed) while nobody else was elected, and
        :class:`~fencing.StateLost` if the row vanished. Every failure also ends the term
        here (``lost`` is set), and ``on_revoked`` has run when it raises.

        >>> grant = await leadership.check()          # before a write fenced by the token
        >>> grant.token == leadership.token
        True
        """
        self._hooks.check_process()
        if self.lost.is_set():
            await self._revoked()
            raise await self._told_reason()
        try:
            grant = await self._owner.check(self.election.name)
        except (Fenced, StateLost, LeaseExpired) as exc:
            if not self.lost.is_set():
                self._lose(exc)
            await self._revoked()
            if isinstance(exc, LeaseExpired):
                raise await self._told_reason() from exc
            raise
        if self.lost.is_set():
            # Ended while the call was out (resigned, superseded, or past the deadline).
            await self._revoked()
            raise await self._told_reason()
        return grant

    async def _told_reason(self) -> FencingError:
        """Why the term ended, as a caller should be told: a local deadline's LeaseExpired
        becomes Fenced once the server shows another term granted since."""
        reason = self._ended_reason()
        if not isinstance(reason, LeaseExpired):
            return reason
        try:
            view = await self._hooks.peek()
        except FencingError:
            return reason  # unreachable: all this process can tell is its own deadline
        if view.token > self.token:
            return term_errors.granted_since(self.election.name, self.token, reason, view)
        return reason

    async def _revoked(self) -> None:
        """Return once on_revoked has run for this ended term (at once when called from the
        timer, the callbacks or the finisher themselves)."""
        me = runtime.current()
        if me in (self._timer, self._finisher, self._electing):
            return
        # (A voluntary end waits at most the renew deadline for on_elected first.)
        election = self.election
        await runtime.wait_event(self._finished, election.ttl + election.renew_deadline)

    def _ended_reason(self) -> FencingError:
        with self._lock:
            return self._reason or self._pending or self._deadline_error()

    async def resign(self) -> None:
        """End the term now: ``lost`` is set, ``on_revoked`` runs, the row is released and
        waiting candidates are woken. Idempotent; leaving the campaign block calls it.

        >>> leadership = await election.campaign()
        >>> await leadership.resign()                 # the next candidate is elected now
        """
        if not self._hooks.in_own_process():
            return
        if self.lost.is_set():
            # Lost before the resign (a takeover, the deadline): that loss is what ended
            # the term, whoever gets here first: on_revoked sees it, and exit_on_loss
            # applies.
            await self._finish(self._ended_reason(), resign=False)
            return
        await self._finish(term_errors.resigned(self.election.name, self.token), resign=True)

    @runtime.opening
    async def producer(
        self,
        topic: TopicFace,
        *,
        lease_ttl: float | None = None,
        idempotent: bool = True,
        acks: str = "leader",
        linger_ms: float = 0.0,
        batch_size: int = 16384,
    ) -> TermProducer:
        """A producer on ``topic`` whose right to write is this term: its epoch is the
        term's token on every partition, and the topic is guarded by the election (a later
        term fences it before its campaign returns; opens from outside the election are
        refused). The options are a producer's (``lease_ttl`` defaults to the election's
        ttl); the term is its identity, so it takes no access mode, name or saved state.

        Refused once the term ended here; ended with the term, before ``on_revoked`` runs
        (closed on a resign, fenced on a loss).

        >>> async with leadership.producer(topic) as producer:
        ...     await producer.send(b"decision")
        """
        self._hooks.check_process()
        producer = TermProducer(
            self._producers,
            topic,
            lease_ttl=self.election.ttl if lease_ttl is None else lease_ttl,
            idempotent=idempotent,
            acks=acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
        )
        return await producer.open()

    async def __aenter__(self) -> Leadership:
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Leaving the campaign block resigns (whatever ended the block)."""
        await self.resign()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "leading"
        return (
            f"<fencing.Leadership election={self.election.name!r} "
            f"candidate={self.election.candidate_id!r} token={self.token} {state}>"
        )

    # -- internals ---------------------------------------------------------------------------

    def _start(self) -> None:
        name = f"fencing-election-{self.election.name}"
        self._runners = [
            runtime.spawn(self._watch, name=f"{name}-deadline"),
            runtime.spawn(self._renew_loop, name=f"{name}-renew"),
        ]

    def _deadline_error(self) -> LeaseExpired:
        election = self.election
        return term_errors.deadline_passed(
            election.name,
            self.token,
            late=time.monotonic() - self._deadline,
            renew_deadline=election.renew_deadline,
            retry_period=election.retry_period,
        )

    def _expired(self) -> None:
        """``lost`` found the renew deadline passed before the timer did: hand it the loss."""
        self._lose(self._deadline_error())

    async def _renew_loop(self) -> None:
        election = self.election
        # Renewals go on after a voluntary end until the row is released, so the lease
        # cannot lapse while the ending term waits for its on_elected.
        while not await runtime.wait_event(self._stop_renewing, election.retry_period):
            if self._pending is not None or (
                not self._ended and time.monotonic() >= self._deadline
            ):
                return
            sent = time.monotonic()
            try:
                renewed = await self._owner.renew(election.name)
            except (Fenced, StateLost) as exc:
                self._lose(exc)  # (also ends a voluntary end's wait for on_elected)
                return
            except FencingError as exc:
                # Unreachable, or the lease lapsed: the deadline timer decides.
                log.warning("redis-fencing: election %r: renewal failed: %s", election.name, exc)
                continue
            except Exception:
                log.exception("redis-fencing: election %r: renewal failed", election.name)
                continue
            lapsed_ms = renewed[election.name].lapsed_ms
            if lapsed_ms > 0:
                # The lease had ended by server time: another candidate could have been
                # elected meanwhile, so the term is over (the renewal is released again).
                self._lose(
                    term_errors.lapsed(
                        election.name,
                        self.token,
                        lapsed=lapsed_ms / 1000.0,
                        server_clock=sent < self._deadline,
                    )
                )
                return
            with self._lock:
                slack = self._deadline - time.monotonic()
                self._deadline = max(self._deadline, sent + election.renew_deadline)
            telemetry.instruments().renew_slack.record(
                max(0.0, slack), {telemetry.ELECTION: election.name}
            )

    async def _watch(self) -> None:
        """The timer: ends the term at the renew deadline, or when a loss is handed to it
        (callbacks never run on a notifier or renewer thread)."""
        self._timer = runtime.current()
        while True:
            with self._lock:
                if self._ended:
                    return
                if self._pending is not None:
                    reason: FencingError = self._pending
                    break
                left = self._deadline - time.monotonic()
                if left <= 0:
                    reason = self._deadline_error()
                    break
                self._wake.clear()  # under the lock: a loss handed over after this wakes us
            await runtime.wait_event(self._wake, left)
        await self._finish(reason, resign=False)

    def _lose(self, exc: FencingError) -> None:
        """Hand a loss to the timer, which ends the term."""
        with self._lock:
            if self._pending is None:
                self._pending = exc
            self._wake.set()

    def _on_severed(self, grant: Grant, new_token: int) -> None:
        if grant.token == self.token:
            self._lose(term_errors.superseded(self.election.name, self.token, new_token))

    def _after_fork_in_child(self) -> None:
        # The term is the parent's: in the child it is over (its loop must not run on).
        runtime.Event.set(self.lost)
        self._ended = True

    async def _finish(self, reason: FencingError, *, resign: bool) -> None:
        """End the term once, whoever gets here first (the timer, a resign, a close): set
        ``lost``, run ``on_revoked`` if ``on_elected`` started, release the row and tell
        observers. A voluntary end (``resign``) first waits for ``on_elected`` to return,
        renewing meanwhile, at most the renew deadline (less if the term is lost meanwhile:
        that loss is then what ended it); an involuntary one runs ``on_revoked`` at once, so
        before the lease can lapse by server time. A voluntary end whose caller is
        interrupted while it waits is completed by the runner of ``on_elected`` when that
        returns."""
        me = runtime.current()
        with self._lock:
            if self._ended:
                ended_here = False
            else:
                self._ended = ended_here = True
                self._reason = reason
                self._finisher = me
            announced = self._announced
            self._wake.set()
        if not ended_here:
            await self._revoked()
            return
        runtime.Event.set(self.lost)
        if not resign:
            self._stop_renewing.set()  # superseded, or past the deadline: nothing to keep
        elif announced and me is not self._electing:
            try:
                lost = await self._await_elected()
            except BaseException:
                if self._hand_over():
                    raise  # on_elected's runner ends the term when it returns
                await self._complete(reason, resign=resign, me=me)
                raise
            if lost is not None:
                # Lost involuntarily while it waited (taken over, or past the deadline):
                # that is what ended the term (on_revoked now, exit_on_loss applies).
                with self._lock:
                    self._reason = reason = lost
                resign = False
                self._stop_renewing.set()
        await self._complete(reason, resign=resign, me=me)

    async def _complete(self, reason: FencingError, *, resign: bool, me: object) -> None:
        """The end of a term once it may proceed: on_revoked (if on_elected started), the
        release, the news to observers."""
        election = self.election
        ins = telemetry.instruments()
        outcome = "resigned" if resign else "lost"
        ins.terms.add(1, {telemetry.ELECTION: election.name, telemetry.OUTCOME: outcome})
        if not resign:
            ins.lease_lost.add(1, {telemetry.KIND: "election"})
        escaped: BaseException | None = None
        try:
            await self._producers.end(reason, resign=resign)
            if self._announced and election.on_revoked is not None:
                try:
                    await runtime.call(election.on_revoked, self)
                except BaseException as exc:
                    log.exception("redis-fencing: election %r: on_revoked failed", election.name)
                    if not isinstance(exc, Exception):
                        escaped = exc  # SystemExit, KeyboardInterrupt: raised after the release
            if not resign:
                log.warning("redis-fencing: %s", reason)
        finally:
            try:
                if not resign and election.exit_on_loss:
                    log.critical(
                        "redis-fencing: election %r: leadership lost; exiting (exit_on_loss)",
                        election.name,
                    )
                    os._exit(EXIT_ON_LOSS_STATUS)
                # Release (a no-op when superseded) so that waiting candidates are woken now
                # rather than at the end of the lease; then tell observers.
                self._stop_renewing.set()
                await self._owner.close()
                await self._hooks.publish_change(f"ended {self.token}")
                self._hooks.ended(self)
            finally:
                self._finished.set()
        if escaped is not None and me is not self._timer:
            raise escaped

    async def _await_elected(self) -> FencingError | None:
        """Wait for on_elected to return, at most the renew deadline from now and never past
        the term's own deadline (renewals failing); return the loss that cut the wait short
        (a takeover, the deadline), if any."""
        election = self.election
        limit = time.monotonic() + election.renew_deadline
        while not self._elected.is_set():
            with self._lock:
                lost = self._pending
            now = time.monotonic()
            if lost is not None:
                return lost
            if now >= self._deadline:
                return self._deadline_error()
            if now >= limit:
                log.warning(
                    "redis-fencing: election %r: on_elected of the term of token %d had not "
                    "returned within renew_deadline=%.3fs of the term's end; on_revoked runs "
                    "and the term is released while it still runs",
                    election.name,
                    self.token,
                    election.renew_deadline,
                )
                return None
            # (Short steps: a loss handed over meanwhile ends the wait.)
            await runtime.wait_event(self._elected, min(min(limit, self._deadline) - now, 0.05))
        return None

    def _hand_over(self) -> bool:
        """After the caller of a voluntary end was interrupted while it waited: leave the
        rest of the end to on_elected's runner if on_elected still runs (True)."""
        with self._lock:
            if self._elected.is_set():
                return False
            self._handover = True
            return True

    def _elected_returned(self) -> bool:
        """on_elected returned (or will never run): whether its runner must now complete a
        voluntary end handed over to it."""
        with self._lock:
            self._elected.set()
            self._electing = None
            handed, self._handover = self._handover, False
            return handed

    async def _wait_ended(self) -> None:
        """Return once the term's end (on whatever runner ended it) is complete."""
        await runtime.wait_event(self._finished, self.election.ttl)

    def _announce(self) -> bool:
        """Mark on_elected as started by the current thread or task, unless the term already
        ended (then it never starts)."""
        with self._lock:
            if self._ended:
                return False
            self._announced = True
            self._electing = runtime.current()
            return True

"""Leader election: ``client.election(name, candidate_id, ttl, renew_deadline)``.

A term is a grant of the ownership row (``"__election__"``, name): its token is unique per
term, only grows, and is the fencing token of everything the leader writes elsewhere. A
leader keeps its term by renewing the row; a **renew deadline** below the TTL, on a timer
thread that no hanging call can hold up, makes it step down locally (``lost`` set,
``on_revoked`` called) before its lease can lapse by server time, so the intervals in which
two processes believe they lead never overlap (given clocks that run at the same rate).

Leaving the ``campaign`` block resigns: ``lost`` is set, ``on_revoked`` runs once, the row is
released and waiting candidates are woken by notification, not by polling.

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
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from .. import _forks as forks
from .. import _protocol as protocol
from .._durability import Durability
from .._grant import Grant
from .._keys import ELECTION_GROUP, validate_label, validate_name
from .._process import ProcessBound
from .._protocol.election import ElectionKeys, LeaderInfo
from .._protocol.ownership import Seen
from .._runtime.tasks import primitives as runtime
from .._runtime.tasks.notify import publish
from .._validate import RECHECK_INTERVAL, callback_arg, seconds_arg, validate_ttl
from ..errors import (
    Fenced,
    FencingError,
    InvalidArgument,
    InvalidArgumentType,
    LeaseExpired,
    StateLost,
    Unavailable,
)
from .context import Context, context_of
from .ownership import Ownership

if TYPE_CHECKING:
    from .._retry import RetryBudget
    from .._runtime.tasks.keeper import Task

log = logging.getLogger(__name__)

#: The exit status of a process whose election was made with ``exit_on_loss=True`` when it
#: loses a term it did not give up itself (EX_SOFTWARE).
EXIT_ON_LOSS_STATUS = 70
#: observe() bounds each read as if under a lease this long (seconds).
OBSERVE_READ_TTL = 1.0
#: The smallest retry period: renewals more often than this only load the server.
MIN_RETRY_PERIOD = 0.01

#: on_elected / on_revoked: called with the term (under fencing.aio, may be a coroutine
#: function).
Callback = Callable[["Leadership"], Any]


class LostEvent(runtime.Event):
    """``Leadership.lost``: an event (``threading.Event``, or ``asyncio.Event`` in
    ``fencing.aio``) that also reads as set once the renew deadline has passed, even before
    the timer got to run (a process resumed from a pause sees it set at its very first
    look), and whose ``wait`` ends at the deadline."""

    def __init__(self, term: Leadership) -> None:
        super().__init__()
        self._term = term

    def is_set(self) -> bool:
        if super().is_set():
            return True
        if time.monotonic() >= self._term._deadline:
            self._term._lose(self._term._deadline_error())
            super().set()
            return True
        return False

    isSet = is_set  # noqa: N815 - threading.Event's old alias

    async def wait(self, timeout: float | None = None) -> bool:  # type: ignore[override, unused-ignore]
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            now = time.monotonic()
            bound = self._term._deadline - now
            if end is not None:
                bound = min(bound, end - now)
            if await runtime.base_wait(self, max(0.0, bound)) or self.is_set():
                return True
            if end is not None and time.monotonic() >= end:
                return False


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

    def __init__(self, election: Election, owner: Ownership, grant: Grant, sent: float) -> None:
        self.election = election
        self.grant = grant
        #: The fencing token of this term.
        self.token = grant.token
        #: When the term began, in seconds since the epoch by the server's clock.
        self.term_started = (grant.lease_expires_ms - owner._ttl_ms) / 1000.0
        #: Set when the term ends here; never cleared.
        self._deadline = sent + election.renew_deadline
        self.lost: runtime.Event = LostEvent(self)
        self._owner = owner
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

    # -- public ------------------------------------------------------------------------------

    @property
    def reason(self) -> FencingError | None:
        """Why the term ended (None while it lasts)."""
        return self._ended_reason() if self.lost.is_set() else None

    async def check(self) -> Grant:
        """Confirm, by server time, that this term still holds.

        Raises :class:`~fencing.Fenced` once another candidate was elected or the term was
        resigned, :class:`~fencing.LeaseExpired` when no renewal succeeded within the renew
        deadline (or the lease lapsed) while nobody else was elected, and
        :class:`~fencing.StateLost` if the row vanished. Every failure also ends the term
        here (``lost`` is set), and ``on_revoked`` has run when it raises.
        """
        self.election._check_process()
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
            view = await self.election._peek()
        except FencingError:
            return reason  # unreachable: all this process can tell is its own deadline
        if view.token > self.token:
            return Fenced(
                f"election {self.election.name!r}: the term of token {self.token} ended "
                f"({reason.args[0]}), and token {view.token} was granted since "
                f"({view.holder_label or 'no live holder now'}): stop acting as leader",
                token=self.token,
                holder_token=view.token,
                holder_label=view.holder_label,
                group=ELECTION_GROUP,
                resource=self.election.name,
            )
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
        waiting candidates are woken. Idempotent; leaving the campaign block calls it."""
        if not self.election._in_own_process():
            return
        if self.lost.is_set():
            # Lost before the resign (a takeover, the deadline): that loss is what ended
            # the term, whoever gets here first: on_revoked sees it, and exit_on_loss
            # applies.
            await self._finish(self._ended_reason(), resign=False)
            return
        await self._finish(
            Fenced(
                f"the term of token {self.token} in election {self.election.name!r} was "
                "resigned: campaign again to lead",
                token=self.token,
                holder_token=self.token,
                holder_label="",
                group=ELECTION_GROUP,
                resource=self.election.name,
            ),
            resign=True,
        )

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
        late = time.monotonic() - self._deadline
        if late > election.retry_period:
            # Noticed long after the deadline: the process (or its timer) did not run.
            why = (
                f"this process was paused (or starved) until {late:.3f}s past its renew "
                f"deadline, so the term of token {self.token} ended before it could renew"
            )
        else:
            why = (
                f"no renewal of the term of token {self.token} succeeded within "
                f"renew_deadline={election.renew_deadline:.3f}s (Redis unreachable or too "
                "slow), so this process stepped down before its lease could lapse by server "
                "time"
            )
        return LeaseExpired(
            f"election {election.name!r}: {why}. Stop acting as leader; campaign again",
            token=self.token,
            expired_ago=0.0,
            group=ELECTION_GROUP,
            resource=self.election.name,
        )

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
                await self._owner.renew(election.name)
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
            with self._lock:
                self._deadline = max(self._deadline, sent + election.renew_deadline)

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
            self._lose(
                Fenced(
                    f"election {self.election.name!r}: the term of token {self.token} was "
                    f"superseded by token {new_token}: stop acting as leader",
                    token=self.token,
                    holder_token=new_token,
                    holder_label="",
                    group=ELECTION_GROUP,
                    resource=self.election.name,
                )
            )

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
        escaped: BaseException | None = None
        try:
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
                await election._publish_change(f"ended {self.token}")
                election._term_ended(self)
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


class Election(ProcessBound):
    """A candidate in one named election.

    ``ttl`` is the lease of a term; ``renew_deadline`` (default two thirds of it) is how
    long a leader goes on without a successful renewal before it steps down locally;
    renewals are tried every ``retry_period`` (default a quarter of the deadline). They
    must satisfy ``ttl > renew_deadline > retry_period``, as in client-go. With
    ``exit_on_loss=True`` a term lost by anything but resigning ends the process
    (``os._exit(70)``) right after ``on_revoked``: client-go's advice for processes that
    cannot stop every action they started.

    >>> election = client.election("scheduler", candidate_id="host-a", ttl=10.0)
    >>> async with election.campaign() as leadership:      # waits until elected
    ...     await run_scheduler(leadership)                 # check leadership.lost often
    >>> await election.leader()                             # who leads now, or None
    """

    def __init__(
        self,
        context: Context,
        name: str,
        candidate_id: str,
        ttl: float = 10.0,
        renew_deadline: float | None = None,
        *,
        retry_period: float | None = None,
        on_elected: Callback | None = None,
        on_revoked: Callback | None = None,
        exit_on_loss: bool = False,
        acks: str = "leader",
    ) -> None:
        self._context = context_of(context)  # (made by hand from a Client: its context)
        self.name = validate_name("election name", name)
        self.candidate_id = validate_label("candidate_id", candidate_id)
        self.ttl = validate_ttl(ttl)
        if renew_deadline is None:
            self.renew_deadline = self.ttl * 2 / 3
        else:
            self.renew_deadline = seconds_arg(renew_deadline, "renew_deadline")
        if retry_period is None:
            self.retry_period = self.renew_deadline / 4
        else:
            self.retry_period = seconds_arg(retry_period, "retry_period")
        if not self.ttl > self.renew_deadline:
            raise InvalidArgument(
                f"renew_deadline={self.renew_deadline!r}s must be below ttl={self.ttl!r}s: a "
                "leader must step down before its lease can lapse by server time"
            )
        if not self.renew_deadline > self.retry_period:
            raise InvalidArgument(
                f"retry_period={self.retry_period!r}s must be below "
                f"renew_deadline={self.renew_deadline!r}s, so a renewal can be tried again "
                "before the deadline"
            )
        if self.retry_period < MIN_RETRY_PERIOD:
            raise InvalidArgument(
                f"retry_period={self.retry_period!r}s is below {MIN_RETRY_PERIOD}s: raise ttl "
                "or renew_deadline"
            )
        if not isinstance(exit_on_loss, bool):
            raise InvalidArgumentType(
                f"exit_on_loss must be a bool, got {type(exit_on_loss).__name__}"
            )
        self.on_elected = callback_arg(on_elected, "on_elected")
        self.on_revoked = callback_arg(on_revoked, "on_revoked")
        self.exit_on_loss = exit_on_loss
        #: What a won claim waits for before the term begins (``acks``).
        self.acks = Durability.of(acks).acks
        self._keys = ElectionKeys.of(self._context.keys, self.name)
        self._budget = self._context.budget_for_ttl(self.ttl)
        #: observe() reads with a short budget, so close() ends it within about a second
        #: even while Redis does not answer (a read is safe to give up on and repeat).
        self._observe_budget = self._context.budget_for_ttl(min(self.ttl, OBSERVE_READ_TTL))
        self._lock = runtime.state_lock()
        self._terms: list[Leadership] = []
        self._observers: list[runtime.Event] = []
        self._waiting: list[Ownership] = []
        #: The row's incarnation and the highest token this handle saw (G9 across terms).
        self._seen: Seen | None = None
        self._closed = runtime.Event()
        self._bind_process()

    # -- public ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def campaign(self, timeout: float | None = None) -> AsyncIterator[Leadership]:
        """Block until elected (up to ``timeout`` seconds; None waits forever), then yield
        the :class:`Leadership`. Leaving the block resigns.

        Raises :class:`~fencing.OwnershipConflict` when ``timeout`` runs out first. Each
        campaign is a new session: a process never inherits a term, even its own earlier
        one.

        >>> async with election.campaign(timeout=30) as leadership:
        ...     leadership.token                                   # doctest: +SKIP
        8
        """
        term = await self._win(timeout)
        try:
            yield term
        finally:
            await term.resign()

    async def leader(self) -> LeaderInfo | None:
        """Who leads now by server time, or None (nobody, or the last lease lapsed)."""
        self._ready()
        return await self._leader(self._budget)

    async def _leader(self, budget: RetryBudget) -> LeaderInfo | None:
        view = await self._peek(budget)
        if view.incarnation:
            self._saw(view.incarnation, view.token)
        if not view.holder_label:
            return None
        return LeaderInfo(
            name=self.name,
            label=view.holder_label,
            token=view.token,
            since=view.since_ms / 1000.0,
            lease_left=max(0, view.expires_ms - view.now_ms) / 1000.0,
        )

    async def candidates(self) -> int:
        """How many candidates are campaigning (waiting to be elected) now."""
        self._ready()
        return (await self._peek()).candidates

    async def observe(self, timeout: float | None = None) -> AsyncIterator[LeaderInfo | None]:
        """Iterate over leader changes: first who leads now (or None), then each change.

        Woken by notifications (an election, a resignation) and by the end of the leader's
        lease by server time; re-checks at least every second, so a lost notification
        costs latency only. Ends cleanly when :meth:`close` is called, or after ``timeout``
        seconds without a change. A Redis outage is logged and waited out.

        >>> async for info in election.observe():
        ...     print("leader:", info.label if info else None)   # doctest: +SKIP
        """
        self._ready()
        limit = None if timeout is None else seconds_arg(timeout, "timeout")
        wake = runtime.Event()
        with self._lock:
            self._observers.append(wake)
        notifications = self._context.notifier
        subs = [
            notifications.subscribe(self._keys.changed_channel, lambda _d: wake.set()),
            notifications.subscribe(self._keys.target.released_channel, lambda _d: wake.set()),
        ]
        try:
            last: tuple[int, str] | bool | None = False
            quiet_since = time.monotonic()
            while not self._closed.is_set():
                wake.clear()
                try:
                    info = await self._leader(self._observe_budget)
                except Unavailable as exc:
                    log.warning("redis-fencing: observing election %r: %s", self.name, exc)
                    await runtime.wait_event(wake, RECHECK_INTERVAL)
                    continue
                current = None if info is None else (info.token, info.label)
                if current != last:
                    last = current
                    quiet_since = time.monotonic()
                    yield info
                    continue
                pause = RECHECK_INTERVAL
                if info is not None:
                    pause = min(pause, info.lease_left + 0.002)
                if limit is not None:
                    left = quiet_since + limit - time.monotonic()
                    if left <= 0:
                        return
                    pause = min(pause, left)
                await runtime.wait_event(wake, pause)
        finally:
            for sub in subs:
                await sub.close()
            with self._lock:
                if wake in self._observers:
                    self._observers.remove(wake)

    async def close(self) -> None:
        """Resign any term this election holds and end every :meth:`observe` iterator.
        Idempotent; in a forked child it does nothing (the terms are the parent's)."""
        if not self._in_own_process():
            return
        self._closed.set()
        with self._lock:
            terms = list(self._terms)
            observers = list(self._observers)
            waiting = list(self._waiting)
        for wake in observers:
            wake.set()
        for owner in waiting:
            owner._cancel_wait()
        for term in terms:
            await term.resign()

    async def __aenter__(self) -> Election:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<fencing.Election name={self.name!r} candidate={self.candidate_id!r}>"

    # -- internals ---------------------------------------------------------------------------

    def _ready(self) -> None:
        self._check_process()
        if self._closed.is_set():
            raise self._closed_error()

    async def _peek(self, budget: RetryBudget | None = None) -> protocol.election.RowView:
        budget = budget or self._budget
        call = protocol.election.peek(self._keys.target.key, self._keys.candidates)
        return await self._context.driver(budget.timeout).execute(call, budget)

    async def _register(self, session: str, ttl_ms: int) -> None:
        call = protocol.election.candidate(
            self._keys, session=session, label=self.candidate_id, ttl_ms=ttl_ms
        )
        await self._context.driver(self._budget.timeout).execute(call, self._budget)

    async def _win(self, timeout: float | None) -> Leadership:
        self._ready()
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise InvalidArgumentType(
                    f"timeout must be None or seconds, got {type(timeout).__name__}"
                )
            timeout = seconds_arg(timeout, "timeout") if timeout != 0 else 0.0
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            term = await self._try_win(deadline)
            if term is not None:
                return term

    async def _try_win(self, deadline: float | None) -> Leadership | None:
        """One campaign with a session of its own; None when the grant came too late to
        be used (no time left before its renew deadline): campaign again."""
        holder: list[Leadership] = []

        def severed(grant: Grant, new_token: int) -> None:
            if holder:
                holder[0]._on_severed(grant, new_token)

        owner = Ownership(
            self._context,
            ELECTION_GROUP,
            self.candidate_id,
            self.ttl,
            on_severed=severed,
            acks=self.acks,
            _allow_reserved=True,
        )
        with self._lock:
            if self._closed.is_set():
                raise self._closed_error()
            seen = self._seen
            self._waiting.append(owner)
        if seen is not None:
            owner._remember(self.name, seen)  # G9 across terms: a token never goes back
        ttl_ms = owner._ttl_ms
        refresh: Task | None = None
        try:
            try:
                await self._register(owner.session, ttl_ms)

                async def keep_registered() -> bool:
                    if owner._cancelled.is_set():
                        return False
                    await self._register(owner.session, ttl_ms)
                    return True

                refresh = self._context.keeper.schedule(self.ttl / 3, keep_registered)
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                grant = (await owner.claim(self.name, wait=True, timeout=left))[self.name]
            finally:
                owner._cancelled.set()
                if refresh is not None:
                    refresh.cancel()
                with self._lock:
                    if owner in self._waiting:
                        self._waiting.remove(owner)
                with contextlib.suppress(FencingError):
                    await self._register(owner.session, 0)
        except BaseException:
            # Refused, timed out, or interrupted (also while deregistering, after a grant):
            # give back whatever this session may hold.
            await owner.close()
            raise
        self._saw(grant.incarnation, grant.token)
        sent = owner._last_claim_sent
        if time.monotonic() >= sent + self.renew_deadline:
            # The claim's retries outlasted the renew deadline: this term could not be
            # used safely. Give it back and campaign again (never announced, never held).
            await owner.close()
            return None
        term = Leadership(self, owner, grant, sent)
        holder.append(term)
        with self._lock:
            closed = self._closed.is_set()
            if not closed:
                self._terms.append(term)
        if closed:
            await owner.close()
            raise self._closed_error()
        try:
            term._start()
            await self._publish_change(f"elected {grant.token}")
            if not term._announce():
                # It ended before on_elected could start (its deadline passed, another
                # candidate took over, close()): never announced, never held.
                term._elected_returned()
                await term._wait_ended()
                if self._closed.is_set():
                    raise self._closed_error()
                return None
            if self.on_elected is not None:
                await runtime.call(self.on_elected, term)
        except BaseException:
            # The caller never gets this term (on_elected failed, or the campaign was
            # interrupted): it ends here, released, its runners stopped.
            if term._elected_returned():
                await term._complete(term._ended_reason(), resign=True, me=runtime.current())
            await term.resign()
            raise
        if term._elected_returned():
            await term._complete(term._ended_reason(), resign=True, me=runtime.current())
        if self._closed.is_set():
            # close() ended the term while on_elected ran: the block is never entered.
            await term.resign()
            raise self._closed_error()
        return term

    def _saw(self, incarnation: str, token: int) -> None:
        with self._lock:
            if self._seen is None or self._seen.incarnation != incarnation:
                if self._seen is None or token >= self._seen.token:
                    self._seen = Seen(incarnation, token)
            elif token > self._seen.token:
                self._seen = Seen(incarnation, token)

    def _closed_error(self) -> InvalidArgument:
        return InvalidArgument(
            "this election handle is closed: open a new one with client.election(...)"
        )

    async def _publish_change(self, message: str) -> None:
        # Only makes observers prompt: they re-check by server time anyway.
        try:
            driver = self._context.driver(self._budget.timeout)
            await publish(driver.redis, self._keys.changed_channel, message)
        except Exception as exc:
            log.debug("redis-fencing: election %r: publish failed: %s", self.name, exc)

    def _term_ended(self, term: Leadership) -> None:
        with self._lock:
            if term in self._terms:
                self._terms.remove(term)

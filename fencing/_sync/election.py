# GENERATED from fencing/_async/election.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""Leader election: ``client.election(name, candidate_id, ttl, renew_deadline)``.

A candidate campaigns by claiming the election's ownership row (``"__election__"``, name)
with a session of its own, waiting for it (and registered as a candidate meanwhile) until it
is granted: each grant is one term, a :class:`~.leadership.Leadership`, whose renewals,
renew deadline and callback contract live in :mod:`.leadership`.

Leaving the ``campaign`` block resigns: ``lost`` is set, ``on_revoked`` runs once, the row is
released and waiting candidates are woken by notification, not by polling.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .. import _protocol as protocol
from .. import _telemetry as telemetry
from .._durability import Durability
from .._keys import ELECTION_GROUP, validate_label, validate_name
from .._process import ProcessBound
from .._protocol.election import ElectionKeys, LeaderInfo
from .._protocol.ownership import Seen
from .._runtime.threads import primitives as runtime
from .._runtime.threads.notify import publish
from .._validate import RECHECK_INTERVAL, callback_arg, lease_ms, seconds_arg, validate_ttl
from ..errors import (
    FencingError,
    InvalidArgument,
    InvalidArgumentType,
    Unavailable,
)
from . import guards
from .claims import Campaign
from .context import Context, context_of
from .leadership import Callback, Leadership
from .ownership import Ownership
from .term_start import begin_term
from .term_view import TermHooks

if TYPE_CHECKING:
    from .._grant import Grant
    from .._retry import RetryBudget
    from .._runtime.threads.keeper import Task
    from .metadata import TopicMetadata

log = logging.getLogger(__name__)

#: observe() bounds each read as if under a lease this long (seconds).
OBSERVE_READ_TTL = 1.0
#: The smallest retry period: renewals more often than this only load the server.
MIN_RETRY_PERIOD = 0.01


class Election(ProcessBound, runtime.Ready):
    """A candidate in one named election.

    ``ttl`` is the lease of a term; ``renew_deadline`` (default two thirds of it) is how
    long a leader goes on without a successful renewal before it steps down locally;
    renewals are tried every ``retry_period`` (default a quarter of the deadline). They
    must satisfy ``ttl > renew_deadline > retry_period``, as in client-go. With
    ``exit_on_loss=True`` a term lost by anything but resigning ends the process
    (``os._exit(70)``) right after ``on_revoked``: client-go's advice for processes that
    cannot stop every action they started.

    >>> election = client.election("scheduler", candidate_id="host-a", ttl=10.0)
    >>> with election.campaign() as leadership:      # waits until elected
    ...     run_scheduler(leadership)                 # check leadership.lost often
    >>> election.leader()                             # who leads now, or None
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
        #: A lease of ttl as the scripts take it (a candidate's registration, a term's start).
        self._ttl_ms = lease_ms(self.ttl)
        self._budget = self._context.budget_for_ttl(self.ttl)
        #: observe() reads with a short budget, so close() ends it within about a second
        #: even while Redis does not answer (a read is safe to give up on and repeat).
        self._observe_budget = self._context.budget_for_ttl(min(self.ttl, OBSERVE_READ_TTL))
        self._lock = runtime.state_lock()
        self._terms: list[Leadership] = []
        self._observers: list[runtime.Event] = []
        #: The campaigns waiting for a term (close() ends them).
        self._waiting: list[Campaign] = []
        #: The row's incarnation and the highest token this handle saw (G9 across terms).
        self._seen: Seen | None = None
        self._closed = runtime.Event()
        self._bind_process()

    # -- public ------------------------------------------------------------------------------

    @runtime.opening
    def campaign(self, timeout: float | None = None) -> Leadership:
        """Block until elected (up to ``timeout`` seconds; None waits forever) and return
        the :class:`Leadership`. Leaving the ``with`` block resigns; a term
        taken as ``leadership = election.campaign()`` lasts until
        ``leadership.resign()`` (or :meth:`close`).

        Raises :class:`~fencing.OwnershipConflict` when ``timeout`` runs out first. A
        campaign given up (the timeout, an error, an interruption) leaves nothing held and
        no candidate registered. Each campaign is a new session: a process never inherits a
        term, even its own earlier one.

        >>> with election.campaign(timeout=30) as leadership:
        ...     leadership.token                                   # doctest: +SKIP
        8
        >>> leadership = election.campaign()                 # doctest: +SKIP
        >>> leadership.resign()                              # doctest: +SKIP
        """
        attrs = {telemetry.ELECTION: self.name, telemetry.SCRIPT: "claim"}
        with telemetry.span("fencing.campaign", attrs) as span:
            term = self._win(timeout)
            span.set_attribute(telemetry.OUTCOME, "won")
        return term

    def leader(self) -> LeaderInfo | None:
        """Who leads now by server time, or None (nobody, or the last lease lapsed).

        >>> info = election.leader()
        >>> info.label if info else None                                 # doctest: +SKIP
        'host-a'
        """
        self._ready()
        return self._leader(self._budget)

    def _leader(self, budget: RetryBudget) -> LeaderInfo | None:
        view = self._peek(budget)
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

    def candidates(self) -> int:
        """How many candidates are campaigning (waiting to be elected) now.

        >>> election.candidates()                                  # doctest: +SKIP
        2
        """
        self._ready()
        return (self._peek()).candidates

    def observe(self, timeout: float | None = None) -> Iterator[LeaderInfo | None]:
        """Iterate over leader changes: first who leads now (or None), then each change.

        Woken by notifications (an election, a resignation) and by the end of the leader's
        lease by server time; re-checks at least every second, so a lost notification
        costs latency only. Ends cleanly when :meth:`close` is called, or after ``timeout``
        seconds without a change. A Redis outage is logged and waited out.

        >>> for info in election.observe():
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
                    info = self._leader(self._observe_budget)
                except Unavailable as exc:
                    log.warning("redis-fencing: observing election %r: %s", self.name, exc)
                    runtime.wait_event(wake, RECHECK_INTERVAL)
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
                runtime.wait_event(wake, pause)
        finally:
            for sub in subs:
                sub.close()
            with self._lock:
                if wake in self._observers:
                    self._observers.remove(wake)

    def close(self) -> None:
        """Resign any term this election holds and end every :meth:`observe` iterator.
        Idempotent; in a forked child it does nothing (the terms are the parent's).

        >>> election.close()
        """
        if not self._in_own_process():
            return
        self._closed.set()
        with self._lock:
            terms = list(self._terms)
            observers = list(self._observers)
            waiting = list(self._waiting)
        for wake in observers:
            wake.set()
        for campaign in waiting:
            campaign.cancel()
        for term in terms:
            term.resign()

    def __enter__(self) -> Election:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<fencing.Election name={self.name!r} candidate={self.candidate_id!r}>"

    # -- internals ---------------------------------------------------------------------------

    def _ready(self) -> None:
        self._check_process()
        if self._closed.is_set():
            raise self._closed_error()

    def _peek(self, budget: RetryBudget | None = None) -> protocol.election.RowView:
        budget = budget or self._budget
        call = protocol.election.peek(self._keys.target.key, self._keys.candidates)
        return self._context.driver(budget.timeout).execute(call, budget)

    def _register(self, session: str, ttl_ms: int) -> None:
        call = protocol.election.candidate(
            self._keys, session=session, label=self.candidate_id, ttl_ms=ttl_ms
        )
        self._context.driver(self._budget.timeout).execute(call, self._budget)

    def _win(self, timeout: float | None) -> Leadership:
        self._ready()
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise InvalidArgumentType(
                    f"timeout must be None or seconds, got {type(timeout).__name__}"
                )
            timeout = seconds_arg(timeout, "timeout") if timeout != 0 else 0.0
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            term = self._try_win(deadline)
            if term is not None:
                return term

    def _try_win(self, deadline: float | None) -> Leadership | None:
        """One campaign with a session of its own; None when the grant came too late to
        be used (no time left before its renew deadline), or the term ended before
        on_elected could start: campaign again."""
        campaign = Campaign()
        with self._lock:
            if self._closed.is_set():
                raise self._closed_error()
            if self._seen is not None:
                campaign.seen[self.name] = self._seen  # G9 across terms: a token never goes back
            self._waiting.append(campaign)
        owner = Ownership(
            self._context,
            ELECTION_GROUP,
            self.candidate_id,
            self.ttl,
            acks=self.acks,
            _allow_reserved=True,
            _campaign=campaign,
            _kind="election",
        )
        ttl_ms = self._ttl_ms
        refresh: Task | None = None
        try:
            try:
                self._register(owner.session, ttl_ms)

                def keep_registered() -> bool:
                    if campaign.cancelled.is_set():
                        return False
                    self._register(owner.session, ttl_ms)
                    return True

                refresh = self._context.keeper.schedule(self.ttl / 3, keep_registered)
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                grant = (owner.claim(self.name, wait=True, timeout=left))[self.name]
            finally:
                campaign.cancelled.set()
                if refresh is not None:
                    refresh.cancel()
                with self._lock:
                    if campaign in self._waiting:
                        self._waiting.remove(campaign)
                with contextlib.suppress(FencingError):
                    self._register(owner.session, 0)
        except BaseException:
            # Refused, timed out, or interrupted (also while deregistering, after a grant):
            # give back whatever this session may hold.
            owner.close()
            raise
        self._saw(grant.incarnation, grant.token)
        sent = campaign.last_claim_sent
        if time.monotonic() >= sent + self.renew_deadline:
            # The claim's retries outlasted the renew deadline: this term could not be
            # used safely. Give it back and campaign again (never announced, never held).
            owner.close()
            return None
        term = Leadership(
            self,
            owner,
            grant,
            sent=sent,
            started=(grant.lease_expires_ms - ttl_ms) / 1000.0,
            hooks=TermHooks(
                check_process=self._check_process,
                in_own_process=self._in_own_process,
                peek=self._peek,
                publish_change=self._publish_change,
                ended=self._term_ended,
                fence=functools.partial(self._fence_guarded, deadline),
                guard=functools.partial(self._guard, owner.session, grant),
            ),
        )
        won = {telemetry.ELECTION: self.name, telemetry.OUTCOME: "won"}
        telemetry.instruments().terms.add(1, won)
        with self._lock:
            closed = self._closed.is_set()
            if not closed:
                self._terms.append(term)
        if closed:
            owner.close()
            raise self._closed_error()
        began = begin_term(term)
        if self._closed.is_set():
            # close() ended the term (before on_elected could start, or while it ran): the
            # block is never entered.
            term.resign()
            raise self._closed_error()
        return term if began else None

    def _fence_guarded(self, deadline: float | None, term: Leadership) -> bool:
        """Fence every topic the election guards at ``term``'s token; True once done,
        False if the term ended meanwhile. A node that cannot be reached is tried again
        until the campaign's deadline, then the campaign fails (its caller resigns)."""
        while True:
            if term.lost.is_set():
                return False
            try:
                guards.fence_guarded(
                    self._context, self._keys, self.name, token=term.token, budget=self._budget
                )
                return True
            except Unavailable as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    raise Unavailable(
                        f"election {self.name!r}: elected at token {term.token}, but the "
                        f"topics it guards could not be fenced before the campaign's timeout "
                        f"({exc}); the term is resigned, never announced. Bring the node "
                        "back, then campaign again"
                    ) from exc
                log.warning(
                    "redis-fencing: election %r: fencing the topics it guards at token %d "
                    "failed; trying again: %s",
                    self.name,
                    term.token,
                    exc,
                )
            pause = self.retry_period
            if deadline is not None:
                pause = max(0.0, min(pause, deadline - time.monotonic()))
            runtime.wait_event(term.lost, pause)

    def _guard(self, session: str, grant: Grant, meta: TopicMetadata) -> None:
        """Make the election the guard of ``meta``'s topic while the term of ``grant``
        (held by ``session``) holds."""
        guards.guard(
            self._context,
            self._keys,
            self.name,
            meta,
            session=session,
            token=grant.token,
            incarnation=grant.incarnation,
            budget=self._budget,
        )

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

    def _publish_change(self, message: str) -> None:
        # Only makes observers prompt: they re-check by server time anyway.
        try:
            driver = self._context.driver(self._budget.timeout)
            publish(driver.redis, self._keys.changed_channel, message)
        except Exception as exc:
            log.debug("redis-fencing: election %r: publish failed: %s", self.name, exc)

    def _term_ended(self, term: Leadership) -> None:
        with self._lock:
            if term in self._terms:
                self._terms.remove(term)

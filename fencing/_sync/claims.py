# GENERATED from fencing/_async/claims.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""How one session claims rows of the ownership table: :class:`Claims` (G8).

The rules live in ``lua/claim-1.lua``; this module calls it, resource by resource in
ascending hash-slot order, and carries out the promises of :meth:`Ownership.claim
<fencing.Ownership.claim>` when a call fails part-way:

- a claim with a generation first reads every row's generation and refuses, before it
  claims anything, if one is above it (no holder severed, nothing changed);
- a claim with a generation keeps what it took before a refusal (its holder was severed
  for good either way), and says so on the :class:`~fencing.StaleGeneration`;
- a claim without one severs nobody, so it gives back what it newly took;
- a claim whose outcome is unknown (a lost reply, an interrupt) is given back if the
  session got it, unless the session held it before.

A waiting claim (``wait=True``) sleeps until the holder's lease ends by server time or a
release notification arrives, and waits out an outage the same way: the same session
claims again, so a claim that landed unseen comes back "kept".
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping

from .. import _protocol as protocol
from .._durability import Durability
from .._grant import Grant
from .._keys import Keys
from .._protocol.ownership import Seen, Target
from .._retry import RetryBudget
from .._runtime.threads import primitives as runtime
from .._runtime.threads.notify import Notifier, Subscription
from .._telemetry import LeaseMeter
from .._validate import RECHECK_INTERVAL
from ..errors import (
    FencingError,
    InvalidArgument,
    OutcomeUnknown,
    OwnershipConflict,
    StaleGeneration,
    StateLost,
    Unavailable,
)
from .driver import Driver
from .holdings import Holdings
from .session_channels import SessionChannels

log = logging.getLogger(__name__)


class Campaign:
    """What the maker of an ownership handle keeps to steer its claims from outside (an
    election campaigning): the rows' history it already saw, a way to end a claim waiting
    with ``wait=True`` (from any thread), and when the last claim attempt was sent.

    >>> campaign = Campaign(seen={"scheduler": Seen("9f2c...", 7)})
    >>> owner = Ownership(context, ELECTION_GROUP, "host-a", 10.0, _campaign=campaign,
    ...                   _allow_reserved=True)
    >>> campaign.cancel()                     # a claim waiting with wait=True gives up now
    """

    def __init__(self, seen: Mapping[str, Seen] | None = None) -> None:
        #: What the handle starts out having seen of each row (G9: a token never goes back).
        self.seen: dict[str, Seen] = dict(seen or {})
        #: Set to make a waiting claim give up (and the maker's own loops end).
        self.cancelled = runtime.Event()
        #: time.monotonic() just before the last claim attempt was sent: a lease granted by
        #: it runs at least ttl from then (elections time their renew deadline from it).
        self.last_claim_sent = 0.0
        #: The subscription a waiting claim sleeps on (:meth:`cancel` wakes it).
        self.wait_sub: Subscription | None = None

    def cancel(self) -> None:
        """Make a waiting claim give up now (from any thread)."""
        self.cancelled.set()
        sub = self.wait_sub
        if sub is not None:
            sub.wake()


class Claims:
    """The claims of one session (``session``, labelled ``label``) on leases of ``ttl``
    seconds (``ttl_ms`` as sent): what it is granted goes into ``holdings``, and
    ``channels`` listens for its grants being severed; ``campaign`` is what its maker steers
    the claims by.

    >>> claims = Claims(session=owner.session, label="host-a", ttl=10.0, ...)
    >>> grants = claims.claim(holdings.ordered(["orders/0"]), None, wait=False,
    ...                             deadline=None)
    """

    def __init__(
        self,
        *,
        session: str,
        label: str,
        ttl: float,
        ttl_ms: int,
        keys: Keys,
        driver: Callable[[], Driver],
        budget: RetryBudget,
        durability: Durability,
        notifier: Notifier,
        holdings: Holdings,
        channels: SessionChannels,
        campaign: Campaign,
        meter: LeaseMeter,
    ) -> None:
        self._session = session
        self._label = label
        self._ttl = ttl
        self._ttl_ms = ttl_ms
        self._keys = keys
        self._driver = driver
        self._budget = budget
        self._durability = durability
        self._notifier = notifier
        self._holdings = holdings
        self._channels = channels
        self._campaign = campaign
        self._meter = meter

    def claim(
        self,
        targets: list[Target],
        generation: int | None,
        *,
        wait: bool,
        deadline: float | None,
    ) -> dict[str, Grant]:
        """Claim ``targets`` in their order; returns ``{resource: Grant}`` or raises, having
        kept the promises of the module's rules."""
        if generation:
            self._refuse_stale(targets, generation)
        # Grants held before the call, and not told superseded.
        held_before = self._holdings.held_untold(targets)
        taken: list[Grant] = []
        result: dict[str, Grant] = {}
        current: Target | None = None
        try:
            for target in targets:
                current = target
                self._channels.listen(target)
                grant = self.claim_one(target, generation, wait=wait, deadline=deadline)
                current = None
                result[target.resource] = grant
                # (A resend after a lost reply answers "kept" for what this very call took.)
                if grant.new or target.resource not in held_before:
                    taken.append(grant)
        except BaseException as exc:
            if generation is None:
                self._undo(taken)
            elif isinstance(exc, StaleGeneration):
                exc.granted = dict(result)
            if current is not None and current.resource not in held_before and not _definitive(exc):
                # The claim may have been applied with its reply lost (or the caller was
                # interrupted): give back what this session may hold, or it would stay held,
                # by nobody, until its lease lapses.
                self._abandon(current)
            raise
        finally:
            self._channels.leave(
                [t.resource for t in targets if not self._holdings.holds(t.resource)]
            )
        return result

    def claim_one(
        self, target: Target, generation: int | None, *, wait: bool, deadline: float | None
    ) -> Grant:
        """Claim one row (waiting for it with ``wait``) and record the outcome."""

        def attempt() -> Grant:
            call = protocol.ownership.claim(
                self._keys,
                target,
                session=self._session,
                label=self._label,
                generation=generation,
                ttl_ms=self._ttl_ms,
                new_incarnation=secrets.token_hex(8),
                seen=self._holdings.seen(target.resource),
            )
            self._campaign.last_claim_sent = time.monotonic()
            return self._driver().execute(call, self._budget, self._durability)

        meter = self._meter
        try:
            grant = attempt()
        except (OwnershipConflict, Unavailable) as exc:
            meter.claimed("conflict" if isinstance(exc, OwnershipConflict) else "unavailable")
            # A waiting claim also waits out an outage (the same session claims again, so
            # one that landed unseen comes back "kept").
            if not wait:
                raise
            refused_at = time.monotonic()
            grant = self._wait_for(target, attempt, deadline)
            meter.handed_over(time.monotonic() - refused_at)
        except StateLost as exc:
            meter.claimed("refused")
            self._holdings.state_lost(target.resource, exc)
            raise
        except FencingError:
            meter.claimed("refused")
            raise
        meter.claimed("granted" if grant.new else "kept")
        self._holdings.granted(grant)
        return grant

    def _wait_for(
        self,
        target: Target,
        attempt: Callable[[], runtime.Later[Grant]],
        deadline: float | None,
    ) -> Grant:
        # Subscribe first, then try again: a release between the refused attempt and the
        # subscription cannot be missed. Then sleep until the holder's lease ends by server
        # time (told by the refusal) or a release notification arrives.
        with self._notifier.subscribe(target.released_channel) as sub:
            campaign = self._campaign
            campaign.wait_sub = sub
            try:
                while True:
                    if campaign.cancelled.is_set():
                        raise InvalidArgument("the wait was cancelled: the handle was closed")
                    try:
                        return attempt()
                    except OwnershipConflict as conflict:
                        pause = min(conflict.remaining + 0.002, RECHECK_INTERVAL)
                        error: FencingError = conflict
                    except Unavailable as outage:
                        # Waiting outlasts a short outage: the same session claims again,
                        # so a claim that landed unseen comes back as "kept".
                        log.warning("redis-fencing: waiting for %r: %s", target.resource, outage)
                        pause = min(self._budget.deadline, RECHECK_INTERVAL)
                        error = outage
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise error
                        pause = min(pause, left)
                    sub.wait(pause)
            finally:
                campaign.wait_sub = None

    def _refuse_stale(self, targets: list[Target], generation: int) -> None:
        """Raise StaleGeneration, before anything is claimed, if a row is stored at a
        generation above ``generation`` (one pipeline of reads, on a cluster too)."""
        stored = self._driver().read(protocol.ownership.generations(targets), self._budget)
        stale = [
            protocol.ownership.stale_generation(target, current, generation)
            for target, current in zip(targets, stored, strict=True)
            if current > generation
        ]
        if stale:
            stale[0].refused = {exc.resource: exc for exc in stale}
            raise stale[0]

    def _abandon(self, target: Target) -> None:
        """Best effort, after a claim whose outcome is unknown: release the row if this
        session holds it (the session is unique to its handle, so no token is needed)."""
        self._holdings.drop(target.resource)
        call = protocol.ownership.release(target, session=self._session, grant=None)
        try:
            self._driver().execute(call, self._budget)
        except FencingError:
            log.warning(
                "redis-fencing: could not give back %r after a failed claim; its lease "
                "lapses in %.3fs",
                target.resource,
                self._ttl,
            )

    def _undo(self, taken: list[Grant]) -> None:
        """Give back what a claim without a generation newly took before it was refused."""
        for grant in taken:
            target = self._holdings.target(grant.resource)
            self._holdings.drop(grant.resource)
            call = protocol.ownership.release(target, session=self._session, grant=grant)
            try:
                self._driver().execute(call, self._budget)
            except FencingError:
                log.warning("redis-fencing: undoing claim of %r failed", grant.resource)


def _definitive(exc: BaseException) -> bool:
    """Whether a failed claim certainly left the row as it was (a refusal by the script, or
    bad input), as opposed to a lost reply, an outage or an interruption."""
    return isinstance(exc, FencingError) and not isinstance(exc, OutcomeUnknown)

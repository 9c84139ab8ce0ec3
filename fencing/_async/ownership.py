"""The ownership-table handle: ``client.ownership(group, owner_id, ttl)`` (G8).

Identity is the session: each handle draws a random session id when it is made, and ``owner_id``
is only a label. docs/explanation/design.md ("The ownership table") gives the outcomes; the
rules live in ``lua/claim-1.lua``. This module is the handle's face: how a claim is carried out
(in order, waiting, giving back on failure) is :mod:`.claims`, what the handle holds and
saw is :mod:`.holdings`, and how it hears of a grant severed is :mod:`.session_channels`.
A maker that steers the handle from outside hands it, when making it, the object it keeps
for that: a :class:`~.claims.Campaign` (an election) or :class:`GrantedCalls` (a consumer's
commit).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from .. import _protocol as protocol
from .. import _telemetry as telemetry
from .._durability import Durability
from .._grant import Grant
from .._keys import validate_label, validate_name, validate_resource
from .._process import ProcessBound
from .._protocol.ownership import Target
from .._runtime.tasks import primitives as runtime
from .._telemetry import LeaseMeter
from .._validate import generation_arg, lease_ms, resource_list, timeout_arg, validate_ttl
from ..errors import (
    Fenced,
    FencingError,
    InvalidArgument,
    InvalidArgumentType,
    StateLost,
    Unavailable,
)
from .claims import Campaign, Claims
from .context import Context, context_of
from .holdings import Holdings
from .session_channels import SessionChannels

if TYPE_CHECKING:
    from .._retry import RetryBudget
    from .driver import Driver

log = logging.getLogger(__name__)
T = TypeVar("T")

SeveredCallback = Callable[[Grant, int], None]


#: The attributes of a claim's span besides its kind's.
_CLAIM_SPAN = {telemetry.SCRIPT: "claim"}


class Ownership(ProcessBound, runtime.Ready):
    """A session on the ownership table of one group.

    Claims are granted per resource by the generation rules (design.md, "The ownership table"); each
    grant carries a fencing token that only grows. The handle remembers what it saw of each row,
    so a store that lost state (FLUSHALL, failover) is reported as :class:`StateLost` instead of
    a fresh start. Thread-safe; bound to the process that made it.

    >>> async with client.ownership("journal", "host-a", ttl=10.0) as owner:  # releases on exit
    ...     grant = (await owner.claim(["orders/0"]))["orders/0"]
    ...     await owner.check("orders/0")     # raises Fenced once another session took over
    ...     await owner.renew()               # call at least every ttl/3
    """

    def __init__(
        self,
        context: Context,
        group: str,
        owner_id: str,
        ttl: float,
        *,
        on_severed: SeveredCallback | None = None,
        acks: str = "leader",
        _allow_reserved: bool = False,
        _campaign: Campaign | None = None,
        _calls: GrantedCalls | None = None,
        _kind: str = "owner",
    ) -> None:
        self._context = context = context_of(context)  # (made by hand from a Client: its context)
        self.group = validate_name("group", group, allow_reserved=_allow_reserved)
        self.owner_id = validate_label("owner_id", owner_id)
        self.ttl = validate_ttl(ttl)
        self.session = secrets.token_hex(16)
        self.on_severed = on_severed
        #: Set when a notification says one of this handle's grants was severed.
        self.severed = runtime.Event()
        self._ttl_ms = lease_ms(self.ttl)
        self._budget = context.budget_for_ttl(self.ttl)
        #: What a claim waits for before it is granted here (``acks``; design.md, "Durability").
        self.durability = Durability.of(acks, timeout=self._budget.timeout / 2)
        #: The lease instruments of this kind of holder (``_kind``: owner, consumer,
        #: election; an election counts its lost terms itself).
        self._meter = meter = LeaseMeter(_kind)
        self._holdings = Holdings(
            context.keys, self.group, on_lost=None if _kind == "election" else meter.lost
        )
        campaign = Campaign() if _campaign is None else _campaign
        for resource, seen in campaign.seen.items():
            self._holdings.remember(resource, seen)  # G9 across handles: a token never goes back
        self._channels = SessionChannels(
            context.notifier, self.session, self._holdings, told=self._told_severed
        )
        self._claims = Claims(
            session=self.session,
            label=self.owner_id,
            ttl=self.ttl,
            ttl_ms=self._ttl_ms,
            keys=context.keys,
            driver=self._driver,
            budget=self._budget,
            durability=self.durability,
            notifier=context.notifier,
            holdings=self._holdings,
            channels=self._channels,
            campaign=campaign,
            meter=meter,
        )
        if _calls is not None:
            _calls.attach(self._holdings, self._driver, self._budget, self.durability)
        #: Per resource, when the lease ends by this holder's own clock (time.monotonic():
        #: the send of the call that set it, plus the ttl), to tell a server clock that
        #: jumped from a holder that was late.
        self._due: dict[str, float] = {}
        self._clock_warned = False
        self._closed = False
        self._bind_process()

    # -- public ------------------------------------------------------------------------------

    @property
    def grants(self) -> dict[str, Grant]:
        """The grants this handle holds now, as last confirmed by the server.

        >>> await owner.claim(["orders/0"])
        >>> sorted(owner.grants)
        ['orders/0']
        """
        return self._holdings.grants()

    async def claim(
        self,
        resources: Iterable[str] | str,
        generation: int | None = None,
        *,
        wait: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Grant]:
        """Claim resources; returns ``{resource: Grant}``.

        ``generation``: None takes the next generation (or keeps this session's own grant),
        g > 0 severs holders at or below g, 0 always wins and resets. Resources are claimed
        one by one in ascending hash-slot order. With ``wait=True`` a claim refused because
        another session holds the resource waits (up to ``timeout`` seconds, None =
        forever) until it is released or its lease lapses by server time.

        When the call raises:

        - A claim with g > 0 first reads the generation of every resource, and raises
          :class:`~fencing.StaleGeneration` before it claims any if one is above g: no
          holder is severed, no generation or token changes.
        - A claim with a generation never gives back what it took: that grant already
          severed the holder and set the generation, and releasing it would only leave the
          resource held by nobody. If another session raises a generation between the
          check and the claim, the call stops at that resource and raises StaleGeneration,
          whose ``granted`` says what it took (and :attr:`grants` holds) and ``refused``
          what was refused; resources after it are left as they were.
        - A claim with None severs nobody: if one resource is refused, the ones this call
          newly took are released again, so it holds none of them.
        - A resource this handle held before the call stays held whatever the call's
          outcome. One it did not hold, whose claim's outcome is unknown (a lost reply,
          an interrupt), is given back if this session got it.

        >>> grants = await owner.claim(["orders/0", "orders/1"])
        >>> grants["orders/0"].token                                   # doctest: +SKIP
        1
        """
        names = resource_list(resources)
        gen = generation_arg(generation)
        limit = timeout_arg(timeout)
        if not isinstance(wait, bool):
            raise InvalidArgumentType(f"wait must be a bool, got {type(wait).__name__}")
        deadline = None if limit is None else time.monotonic() + limit
        await self._ready()
        await self._context.check_durability(self.durability)
        targets = self._ordered(names)
        with telemetry.span("fencing.claim", {**self._meter.kind, **_CLAIM_SPAN}) as span:
            grants = await self._claims.claim(targets, gen, wait=wait, deadline=deadline)
            span.set_attribute(telemetry.OUTCOME, "granted")
        # (From now: earlier than the claim's last attempt was sent, so never later than
        # the lease's real end.)
        due = time.monotonic() + self.ttl - self._budget.timeout
        for resource in grants:
            self._due[resource] = due
        return grants

    async def renew(self, resources: Iterable[str] | str | None = None) -> dict[str, Grant]:
        """Extend the leases of held grants (all by default); returns the renewed grants.

        A lapsed lease that nobody else claimed is renewed with the same generation and
        token. Every grant is tried; then the first failure is raised: :class:`StateLost`
        before :class:`Fenced` before :class:`~fencing.errors.Unavailable`. A fenced grant
        is dropped from :attr:`grants` for good. With ``acks`` above "leader", a renewal
        is waited for like a claim: one that falls short raises
        :class:`~fencing.NotEnoughReplicas` and leaves the grant's known lease as it was
        (the longer lease is on the primary only, and a failover may forget it).

        >>> await owner.renew()                       # every grant; at least every ttl/3
        >>> await owner.renew("orders/0")
        """
        await self._ready()
        names = list(self.grants) if resources is None else resource_list(resources)
        renewed: dict[str, Grant] = {}
        errors: list[FencingError] = []
        for target in self._ordered(names):
            grant = self._held(target.resource)
            call = protocol.ownership.renew(
                target, session=self.session, grant=grant, ttl_ms=self._ttl_ms
            )
            sent = time.monotonic()
            try:
                lease = await self._driver().execute(call, self._budget, self.durability)
            except (Fenced, StateLost) as exc:
                self._meter.renewed(telemetry.outcome_of(exc), time.monotonic() - sent)
                self._lose(grant, exc)
                errors.append(exc)
                continue
            except Unavailable as exc:  # NotEnoughReplicas too: the lease is not extended
                self._meter.renewed("unavailable", time.monotonic() - sent)
                errors.append(exc)
                continue
            received = time.monotonic()
            self._meter.renewed("ok", received - sent)
            fenced = self._holdings.superseded(grant)
            if fenced is not None:
                errors.append(fenced)
                continue
            updated = self._update(grant, lease)
            lapsed = lease.now_ms - grant.lease_expires_ms
            if lapsed > 0:
                updated = replace(updated, lapsed_ms=lapsed)
                self._lapsed(target.resource, lapsed, received)
            self._due[target.resource] = sent + self.ttl
            renewed[target.resource] = updated
        if errors:
            raise _first(errors)
        return renewed

    async def check(self, resource: str) -> Grant:
        """Confirm this handle still holds ``resource`` now, by server time.

        Raises :class:`Fenced` if another session was granted since (permanent for this
        grant), :class:`~fencing.errors.LeaseExpired` if the lease lapsed and nobody
        claimed it yet (``renew()`` to continue), :class:`StateLost` if the row vanished.

        >>> grant = await owner.check("orders/0")     # before an external write
        >>> write_elsewhere(token=grant.token)                           # doctest: +SKIP
        """
        name = validate_resource(resource)
        await self._ready()
        grant = self._held(name)
        call = protocol.ownership.check(self._target(name), session=self.session, grant=grant)
        try:
            lease = await self._driver().execute(call, self._budget)
        except (Fenced, StateLost) as exc:
            self._lose(grant, exc)
            raise
        fenced = self._holdings.superseded(grant)
        if fenced is not None:
            raise fenced
        return self._update(grant, lease)

    async def release(self, resources: Iterable[str] | str | None = None) -> dict[str, bool]:
        """Give up grants at once (all by default); waiters are woken.

        Returns ``{resource: released}``: False where the grant was no longer this
        session's (severed, or never held). Never raises :class:`Fenced`.

        >>> await owner.release(["orders/0"])
        {'orders/0': True}
        """
        await self._ready(check_safe=False)
        names = list(self.grants) if resources is None else resource_list(resources)
        out: dict[str, bool] = {}
        failure: FencingError | None = None
        for target in self._ordered(names):
            grant = self._holdings.get(target.resource)
            if grant is None:
                out[target.resource] = False
                continue
            call = protocol.ownership.release(target, session=self.session, grant=grant)
            try:
                out[target.resource] = await self._driver().execute(call, self._budget)
            except FencingError as exc:
                out[target.resource] = False
                failure = failure or exc
            # Dropped once the call returned or failed for good; an interrupted release
            # (a cancelled task) keeps the grant, so release() or close() can run again.
            self._holdings.released(grant)
            if not self._holdings.holds(target.resource):
                await self._channels.leave([target.resource])
        if failure is not None:
            raise failure
        return out

    async def close(self) -> None:
        """Release every grant and stop listening for notifications. Idempotent.

        In a forked child this does nothing at all: the grants are the parent's.

        >>> await owner.close()           # or leave ``async with client.ownership(...) as owner``
        """
        if self._closed or not self._in_own_process():
            return
        try:
            if self._holdings.grants():
                await self.release()
        except FencingError:
            log.warning(
                "redis-fencing: releasing %s on close failed; the leases lapse in %.3fs",
                list(self._holdings.grants()),
                self.ttl,
                exc_info=True,
            )
        # (An interrupted close leaves the handle open, so that close() can run again.)
        self._closed = True
        await self._channels.leave_all()

    async def __aenter__(self) -> Ownership:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return (
            f"<fencing.Ownership group={self.group!r} owner_id={self.owner_id!r} "
            f"session={self.session[:8]}… held={sorted(self._holdings.grants())}>"
        )

    # -- internals -------------------------------------------------------------------------

    async def _ready(self, *, check_safe: bool = True) -> None:
        self._check_process()
        if self._closed:
            raise InvalidArgument(
                "this ownership handle is closed: open a new one with client.ownership(...)"
            )
        if check_safe:
            await self._context.ensure_safe(self._budget)

    def _driver(self) -> Driver:
        return self._context.driver(self._budget.timeout)

    def _target(self, resource: str) -> Target:
        return self._holdings.target(resource)

    def _ordered(self, names: Iterable[str]) -> list[Target]:
        return self._holdings.ordered(names)

    def _update(self, grant: Grant, lease: protocol.ownership.Lease) -> Grant:
        return self._holdings.update(grant, lease)

    def _held(self, resource: str) -> Grant:
        return self._holdings.held(resource)

    def _lapsed(self, resource: str, lapsed_ms: int, received: float) -> None:
        """A renewal found the lease on ``resource`` ended ``lapsed_ms`` ago by server time.
        Its reply came back before the lease's end by this holder's own clock: the server's
        clock jumped forward (an NTP step, a migrated VM), ending every lease on it at once;
        otherwise this holder was late (paused, unreachable)."""
        due = self._due.get(resource)
        server_clock = due is not None and received < due
        self._meter.lapsed("server-clock" if server_clock else "late")
        own = self._meter.kind[telemetry.KIND] != "election"
        if server_clock and own and not self._clock_warned:
            # (An election ends the term and says so itself: one warning, not two.)
            self._clock_warned = True
            log.warning(
                "redis-fencing: %r in group %r: the Redis server's clock jumped forward: the "
                "lease had ended by server time %.3fs before this renewal, which came %.3fs "
                "before the lease's end by this holder's clock; it was renewed (nobody "
                "claimed it meanwhile), but any lease on that server may have ended early",
                resource,
                self.group,
                lapsed_ms / 1000.0,
                (due or received) - received,
            )

    def _lose(self, grant: Grant, exc: FencingError) -> None:
        self._holdings.lose(grant, exc)

    def _told_severed(self, grant: Grant, new_token: int) -> None:
        """A notification said ``grant`` was superseded by ``new_token`` (on the notifier's
        thread or task)."""
        self.severed.set()
        if self.on_severed is not None:
            self.on_severed(grant, new_token)


class GrantedCalls:
    """What the maker of an ownership handle keeps to run its own scripts fenced by the
    handle's grants (a consumer's commit): each call is made with the grant held on its
    resource and waits for the handle's ``acks``; a :class:`Fenced` or :class:`StateLost`
    drops that grant for good, as the handle's own calls do.

    >>> calls = GrantedCalls()
    >>> owner = Ownership(context, "billing", "member-1", 10.0, _calls=calls)
    >>> offset = await calls.call("orders/0", lambda target, grant: commit(target, ...))
    """

    def __init__(self) -> None:
        self._holdings: Holdings | None = None
        self._driver: Callable[[], Driver] | None = None
        self._budget: RetryBudget | None = None
        self._durability: Durability | None = None

    def attach(
        self,
        holdings: Holdings,
        driver: Callable[[], Driver],
        budget: RetryBudget,
        durability: Durability,
    ) -> None:
        """Run the calls with what the handle holds (done once, by the handle it is given to)."""
        self._holdings = holdings
        self._driver = driver
        self._budget = budget
        self._durability = durability

    async def call(
        self, resource: str, build: Callable[[Target, Grant], protocol.ScriptCall[T]]
    ) -> T:
        """Run the call ``build(target, grant)`` makes with the grant held on ``resource``.
        A grant lost before raises its loss, with no I/O (and ``build`` is not called)."""
        holdings, driver = self._holdings, self._driver
        if holdings is None or driver is None or self._budget is None:
            raise RuntimeError("these calls were never given to an ownership handle")
        grant = holdings.held(resource)
        call = build(holdings.target(resource), grant)
        try:
            return await driver().execute(call, self._budget, self._durability)
        except (Fenced, StateLost) as exc:
            holdings.lose(grant, exc)
            raise


def _first(errors: list[FencingError]) -> FencingError:
    for kind in (StateLost, Fenced):
        for exc in errors:
            if isinstance(exc, kind):
                return exc
    return errors[0]

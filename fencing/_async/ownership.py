"""The ownership-table handle: ``client.ownership(group, owner_id, ttl)`` (G8).

Identity is the session: each handle draws a random session id when it is made, and
``owner_id`` is only a label. The README's "Generations" gives the outcomes; the rules
live in ``lua/claim-1.lua``, this module only calls it and keeps what the handle saw.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from .. import _protocol as protocol
from .._durability import Durability
from .._grant import Grant
from .._keys import slot_of, validate_label, validate_name, validate_resource
from .._process import ProcessBound
from .._protocol.ownership import Seen, Target
from .._runtime.tasks import primitives as runtime
from .._runtime.tasks.notify import Subscription
from .._validate import (
    RECHECK_INTERVAL,
    generation_arg,
    resource_list,
    timeout_arg,
    validate_ttl,
)
from ..errors import (
    Fenced,
    FencingError,
    InvalidArgument,
    InvalidArgumentType,
    OutcomeUnknown,
    OwnershipConflict,
    StaleGeneration,
    StateLost,
    Unavailable,
)
from .context import Context, context_of

if TYPE_CHECKING:
    from .driver import Driver

log = logging.getLogger(__name__)

SeveredCallback = Callable[[Grant, int], None]


class Ownership(ProcessBound):
    """A session on the ownership table of one group.

    Claims are granted per resource by the generation rules (see the README); each grant carries a
    fencing token that only grows. The handle remembers what it saw of each row, so a
    store that lost state (FLUSHALL, failover) is reported as :class:`StateLost` instead of
    a fresh start. Thread-safe; bound to the process that made it.

    >>> owner = client.ownership("journal", owner_id="host-a", ttl=10.0)
    >>> async with owner:                                     # releases everything on exit
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
    ) -> None:
        self._context = context_of(context)  # (made by hand from a Client: its context)
        self.group = validate_name("group", group, allow_reserved=_allow_reserved)
        self.owner_id = validate_label("owner_id", owner_id)
        self.ttl = validate_ttl(ttl)
        self.session = secrets.token_hex(16)
        self.on_severed = on_severed
        #: Set when a notification says one of this handle's grants was severed.
        self.severed = runtime.Event()
        self._ttl_ms = max(1, round(self.ttl * 1000))
        self._budget = self._context.budget_for_ttl(self.ttl)
        #: What a claim waits for before it is granted here (``acks``, see the README).
        self.durability = Durability.of(acks, timeout=self._budget.timeout / 2)
        self._lock = runtime.state_lock()
        self._targets: dict[str, Target] = {}
        self._grants: dict[str, Grant] = {}
        self._seen: dict[str, Seen] = {}
        self._lost: dict[str, FencingError] = {}
        #: resource -> (token, superseding token) told by a "severed" notification.
        self._superseded: dict[str, tuple[int, int]] = {}
        #: Per held resource, this session's "severed" channel (in the resource's slot).
        self._session_subs: dict[str, Subscription] = {}
        self._closed = False
        #: time.monotonic() just before the last claim attempt was sent: a lease granted by
        #: it runs at least ttl from then (elections time their renew deadline from it).
        self._last_claim_sent = 0.0
        #: Set to make a waiting claim give up (an election closed while it campaigns).
        self._cancelled = runtime.Event()
        self._wait_sub: Subscription | None = None
        self._bind_process()

    # -- public ------------------------------------------------------------------------------

    @property
    def grants(self) -> dict[str, Grant]:
        """The grants this handle holds now, as last confirmed by the server."""
        with self._lock:
            return dict(self._grants)

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
        if gen:
            await self._refuse_stale(targets, gen)
        with self._lock:
            # Grants this handle holds and has not been told were superseded.
            held_before = {
                t.resource
                for t in targets
                if t.resource in self._grants
                and self._superseded.get(t.resource, (None, 0))[0] != self._grants[t.resource].token
            }
        taken: list[Grant] = []
        result: dict[str, Grant] = {}
        current: Target | None = None
        try:
            for target in targets:
                current = target
                self._ensure_session_subscription(target)
                grant = await self._claim_one(target, gen, wait=wait, deadline=deadline)
                current = None
                result[target.resource] = grant
                # (A resend after a lost reply answers "kept" for what this very call took.)
                if grant.new or target.resource not in held_before:
                    taken.append(grant)
        except BaseException as exc:
            if gen is None:
                await self._undo(taken)
            elif isinstance(exc, StaleGeneration):
                exc.granted = dict(result)
            if current is not None and current.resource not in held_before and not _definitive(exc):
                # The claim may have been applied with its reply lost (or the caller was
                # interrupted): give back what this session may hold, or it would stay held,
                # by nobody, until its lease lapses.
                await self._abandon(current)
            raise
        finally:
            await self._leave_session_channels(
                [t.resource for t in targets if t.resource not in self._grants]
            )
        return result

    async def renew(self, resources: Iterable[str] | str | None = None) -> dict[str, Grant]:
        """Extend the leases of held grants (all by default); returns the renewed grants.

        A lapsed lease that nobody else claimed is renewed with the same generation and
        token. Every grant is tried; then the first failure is raised: :class:`StateLost`
        before :class:`Fenced` before :class:`~fencing.errors.Unavailable`. A fenced grant
        is dropped from :attr:`grants` for good. With ``acks`` above "leader", a renewal
        is waited for like a claim: one that falls short raises
        :class:`~fencing.NotEnoughReplicas` and leaves the grant's known lease as it was
        (the longer lease is on the primary only, and a failover may forget it).
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
            try:
                lease = await self._driver().execute(call, self._budget, self.durability)
            except (Fenced, StateLost) as exc:
                self._lose(grant, exc)
                errors.append(exc)
                continue
            except Unavailable as exc:  # NotEnoughReplicas too: the lease is not extended
                errors.append(exc)
                continue
            fenced = self._was_superseded(grant)
            if fenced is not None:
                errors.append(fenced)
                continue
            renewed[target.resource] = self._update(grant, lease)
        if errors:
            raise _first(errors)
        return renewed

    async def check(self, resource: str) -> Grant:
        """Confirm this handle still holds ``resource`` now, by server time.

        Raises :class:`Fenced` if another session was granted since (permanent for this
        grant), :class:`~fencing.errors.LeaseExpired` if the lease lapsed and nobody
        claimed it yet (``renew()`` to continue), :class:`StateLost` if the row vanished.
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
        fenced = self._was_superseded(grant)
        if fenced is not None:
            raise fenced
        return self._update(grant, lease)

    async def release(self, resources: Iterable[str] | str | None = None) -> dict[str, bool]:
        """Give up grants at once (all by default); waiters are woken.

        Returns ``{resource: released}``: False where the grant was no longer this
        session's (severed, or never held). Never raises :class:`Fenced`.
        """
        await self._ready(check_safe=False)
        names = list(self.grants) if resources is None else resource_list(resources)
        out: dict[str, bool] = {}
        failure: FencingError | None = None
        for target in self._ordered(names):
            grant = self._grants.get(target.resource)
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
            with self._lock:
                if self._grants.get(target.resource) == grant:
                    del self._grants[target.resource]
            if target.resource not in self._grants:
                await self._leave_session_channels([target.resource])
        if failure is not None:
            raise failure
        return out

    async def close(self) -> None:
        """Release every grant and stop listening for notifications. Idempotent.

        In a forked child this does nothing at all: the grants are the parent's.
        """
        if self._closed or not self._in_own_process():
            return
        try:
            if self._grants:
                await self.release()
        except FencingError:
            log.warning(
                "redis-fencing: releasing %s on close failed; the leases lapse in %.3fs",
                list(self._grants),
                self.ttl,
                exc_info=True,
            )
        # (An interrupted close leaves the handle open, so that close() can run again.)
        self._closed = True
        await self._leave_session_channels(list(self._session_subs))

    async def __aenter__(self) -> Ownership:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return (
            f"<fencing.Ownership group={self.group!r} owner_id={self.owner_id!r} "
            f"session={self.session[:8]}… held={sorted(self._grants)}>"
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
        target = self._targets.get(resource)
        if target is None:
            target = Target.of(self._context.keys, self.group, resource)
            self._targets[resource] = target
        return target

    def _ordered(self, names: Iterable[str]) -> list[Target]:
        targets = [self._target(name) for name in names]
        return sorted(targets, key=lambda t: (slot_of(t.key), t.key))

    def _update(self, grant: Grant, lease: protocol.ownership.Lease) -> Grant:
        updated = replace(grant, generation=lease.generation, lease_expires_ms=lease.expires_ms)
        with self._lock:
            # A concurrent claim or loss may have replaced this grant meanwhile.
            if self._grants.get(grant.resource) == grant:
                self._grants[grant.resource] = updated
        return updated

    def _held(self, resource: str) -> Grant:
        grant = self._grants.get(resource)
        if grant is not None:
            return grant
        lost = self._lost.get(resource)
        if lost is not None:
            raise lost
        raise InvalidArgument(
            f"this handle holds no grant on {resource!r} in group {self.group!r}: claim it first"
        )

    async def _claim_one(
        self, target: Target, generation: int | None, *, wait: bool, deadline: float | None
    ) -> Grant:
        async def attempt() -> Grant:
            call = protocol.ownership.claim(
                self._context.keys,
                target,
                session=self.session,
                label=self.owner_id,
                generation=generation,
                ttl_ms=self._ttl_ms,
                new_incarnation=secrets.token_hex(8),
                seen=self._seen.get(target.resource),
            )
            self._last_claim_sent = time.monotonic()
            return await self._driver().execute(call, self._budget, self.durability)

        try:
            grant = await attempt()
        except (OwnershipConflict, Unavailable):
            # A waiting claim also waits out an outage (the same session claims again, so
            # one that landed unseen comes back "kept").
            if not wait:
                raise
            grant = await self._wait_for(target, attempt, deadline)
        except StateLost as exc:
            with self._lock:
                self._grants.pop(target.resource, None)
                self._lost[target.resource] = exc
            raise
        with self._lock:
            self._grants[target.resource] = grant
            self._seen[target.resource] = Seen(grant.incarnation, grant.token)
            self._lost.pop(target.resource, None)
        return grant

    async def _wait_for(
        self,
        target: Target,
        attempt: Callable[[], runtime.Later[Grant]],
        deadline: float | None,
    ) -> Grant:
        # Subscribe first, then try again: a release between the refused attempt and the
        # subscription cannot be missed. Then sleep until the holder's lease ends by server
        # time (told by the refusal) or a release notification arrives.
        async with self._context.notifier.subscribe(target.released_channel) as sub:
            self._wait_sub = sub
            try:
                while True:
                    if self._cancelled.is_set():
                        raise InvalidArgument("the wait was cancelled: the handle was closed")
                    try:
                        return await attempt()
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
                    await sub.wait(pause)
            finally:
                self._wait_sub = None

    def _cancel_wait(self) -> None:
        """Make a waiting claim of this handle give up now (from another thread)."""
        self._cancelled.set()
        sub = self._wait_sub
        if sub is not None:
            sub._event.set()

    async def _refuse_stale(self, targets: list[Target], generation: int) -> None:
        """Raise StaleGeneration, before anything is claimed, if a row is stored at a
        generation above ``generation`` (one pipeline of reads, on a cluster too)."""
        stored = await self._driver().read(protocol.ownership.generations(targets), self._budget)
        stale = [
            protocol.ownership.stale_generation(target, current, generation)
            for target, current in zip(targets, stored, strict=True)
            if current > generation
        ]
        if stale:
            stale[0].refused = {exc.resource: exc for exc in stale}
            raise stale[0]

    async def _abandon(self, target: Target) -> None:
        """Best effort, after a claim whose outcome is unknown: release the row if this
        session holds it (the session is unique to this handle, so no token is needed)."""
        with self._lock:
            self._grants.pop(target.resource, None)
        call = protocol.ownership.release(target, session=self.session, grant=None)
        try:
            await self._driver().execute(call, self._budget)
        except FencingError:
            log.warning(
                "redis-fencing: could not give back %r after a failed claim; its lease "
                "lapses in %.3fs",
                target.resource,
                self.ttl,
            )

    async def _undo(self, taken: list[Grant]) -> None:
        for grant in taken:
            target = self._target(grant.resource)
            with self._lock:
                self._grants.pop(grant.resource, None)
            call = protocol.ownership.release(target, session=self.session, grant=grant)
            try:
                await self._driver().execute(call, self._budget)
            except FencingError:
                log.warning("redis-fencing: undoing claim of %r failed", grant.resource)

    def _was_superseded(self, grant: Grant) -> Fenced | None:
        """The Fenced of a grant a notification said was superseded (then dropped), though
        the server answered as if it still stood: a failover lost the claim that severed
        it, and a superseded grant must never act again."""
        with self._lock:
            told = self._superseded.get(grant.resource)
        if told is None or told[0] != grant.token:
            return None
        fenced = Fenced(
            f"{grant.resource!r} in group {self.group!r}: this handle's grant (token "
            f"{grant.token}) was superseded by token {told[1]} (the server since lost that "
            "claim: a failover or a restart without persistence); stop writing and claim "
            "again if you still need it",
            token=grant.token,
            holder_token=told[1],
            holder_label="",
            group=self.group,
            resource=grant.resource,
        )
        self._lose(grant, fenced)
        return fenced

    def _lose(self, grant: Grant, exc: FencingError) -> None:
        with self._lock:
            if self._grants.get(grant.resource) == grant:
                del self._grants[grant.resource]
                self._lost[grant.resource] = exc

    def _ensure_session_subscription(self, target: Target) -> None:
        """Listen on this session's "severed" channel of ``target`` (in its slot, so a
        sharded message of the claim that severs us reaches us on a cluster too)."""
        if target.resource not in self._session_subs:
            sub = self._context.notifier.subscribe(
                target.session_channel(self.session), self._on_session_message
            )
            with self._lock:
                self._session_subs[target.resource] = sub

    async def _leave_session_channels(self, resources: list[str]) -> None:
        """Stop listening on the "severed" channels of resources no longer held."""
        for resource in resources:
            with self._lock:
                sub = self._session_subs.pop(resource, None)
            if sub is not None:
                await sub.close()

    def _on_session_message(self, data: bytes | None) -> None:
        if data is None:
            return
        parts = data.decode("utf-8", "replace").split(" ")
        if len(parts) != 4 or parts[0] != "severed":
            return
        _, old_token, new_token, key = parts
        # Runs on the notifier thread: reads a snapshot, and takes only the state lock
        # (never held across I/O) to drop a superseded grant.
        for grant in list(self._grants.values()):
            target = self._targets.get(grant.resource)
            if target is not None and target.key == key and grant.token == int(old_token):
                # Superseded for good: even if a failover later loses the claim that
                # severed it, this grant never acts again (check/renew raise Fenced).
                with self._lock:
                    self._superseded[grant.resource] = (grant.token, int(new_token))
                self.severed.set()
                if self.on_severed is not None:
                    self.on_severed(grant, int(new_token))


def _definitive(exc: BaseException) -> bool:
    """Whether a failed claim certainly left the row as it was (a refusal by the script, or
    bad input), as opposed to a lost reply, an outage or an interruption."""
    return isinstance(exc, FencingError) and not isinstance(exc, OutcomeUnknown)


def _first(errors: list[FencingError]) -> FencingError:
    for kind in (StateLost, Fenced):
        for exc in errors:
            if isinstance(exc, kind):
                return exc
    return errors[0]

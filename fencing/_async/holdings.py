"""What one ownership handle knows of each row: :class:`Holdings`.

Per resource: its :class:`~fencing._protocol.ownership.Target` (keys built once), the grant
held now, what was last seen of the row (sent with every claim, so a store that lost state
is told apart from a fresh start: G9), why a grant was lost, and whether a notification said
it was superseded. Every change is made under one state lock, never held across I/O, so
the handle's callers, its claims and the notifier thread may all touch it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from .. import _protocol as protocol
from .._grant import Grant
from .._keys import Keys, slot_of
from .._protocol.ownership import Seen, Target
from .._runtime.tasks import primitives as runtime
from ..errors import Fenced, FencingError, InvalidArgument


class Holdings:
    """The grants, sightings and losses of one ownership handle in one group.

    >>> holdings = Holdings(Keys("app"), "journal")
    >>> holdings.granted(grant)                  # a claim was granted
    >>> holdings.held("orders/0")                # the grant, or why it was lost
    """

    def __init__(
        self, keys: Keys, group: str, *, on_lost: Callable[[], None] | None = None
    ) -> None:
        self.group = group
        #: Called once per grant lost for good (a lease lost: counted by the handle).
        self.on_lost = on_lost
        self._keys = keys
        self._lock = runtime.state_lock()
        self._targets: dict[str, Target] = {}
        self._grants: dict[str, Grant] = {}
        #: What was last seen of each row (its incarnation and the highest token).
        self._seen: dict[str, Seen] = {}
        self._lost: dict[str, FencingError] = {}
        #: resource -> (token, superseding token) told by a "severed" notification.
        self._superseded: dict[str, tuple[int, int]] = {}

    # -- rows ---------------------------------------------------------------------------------

    def target(self, resource: str) -> Target:
        """The row of ``resource`` in this group (built once)."""
        target = self._targets.get(resource)
        if target is None:
            target = Target.of(self._keys, self.group, resource)
            self._targets[resource] = target
        return target

    def ordered(self, names: Iterable[str]) -> list[Target]:
        """The rows of ``names`` in ascending hash-slot order (the order claims take)."""
        targets = [self.target(name) for name in names]
        return sorted(targets, key=lambda t: (slot_of(t.key), t.key))

    # -- reading ------------------------------------------------------------------------------

    def grants(self) -> dict[str, Grant]:
        """The grants held now (a copy)."""
        with self._lock:
            return dict(self._grants)

    def get(self, resource: str) -> Grant | None:
        """The grant held on ``resource``, if any."""
        return self._grants.get(resource)

    def holds(self, resource: str) -> bool:
        """Whether a grant on ``resource`` is held."""
        return resource in self._grants

    def held(self, resource: str) -> Grant:
        """The grant held on ``resource``; else raise why it was lost, or that it never was
        claimed."""
        grant = self._grants.get(resource)
        if grant is not None:
            return grant
        lost = self._lost.get(resource)
        if lost is not None:
            raise lost
        raise InvalidArgument(
            f"this handle holds no grant on {resource!r} in group {self.group!r}: claim it first"
        )

    def held_untold(self, targets: Iterable[Target]) -> set[str]:
        """The resources among ``targets`` held now whose grant no notification said was
        superseded."""
        with self._lock:
            return {
                t.resource
                for t in targets
                if t.resource in self._grants
                and self._superseded.get(t.resource, (None, 0))[0] != self._grants[t.resource].token
            }

    def seen(self, resource: str) -> Seen | None:
        """What was last seen of the row of ``resource`` (None: never seen)."""
        return self._seen.get(resource)

    # -- changes ------------------------------------------------------------------------------

    def remember(self, resource: str, seen: Seen) -> None:
        """Start from what an earlier handle saw of the row (a token never goes back)."""
        with self._lock:
            self._seen[resource] = seen

    def granted(self, grant: Grant) -> None:
        """A claim was granted: hold it, and remember what it showed of the row."""
        with self._lock:
            self._grants[grant.resource] = grant
            self._seen[grant.resource] = Seen(grant.incarnation, grant.token)
            self._lost.pop(grant.resource, None)

    def state_lost(self, resource: str, exc: FencingError) -> None:
        """A claim found the row's state lost: hold nothing there, and say so from now on."""
        with self._lock:
            self._grants.pop(resource, None)
            self._lost[resource] = exc

    def drop(self, resource: str) -> None:
        """Hold nothing on ``resource`` (a claim being given back)."""
        with self._lock:
            self._grants.pop(resource, None)

    def released(self, grant: Grant) -> None:
        """``grant`` was released (or failed to be for good): drop it, unless a concurrent
        claim replaced it meanwhile."""
        with self._lock:
            if self._grants.get(grant.resource) == grant:
                del self._grants[grant.resource]

    def lose(self, grant: Grant, exc: FencingError) -> None:
        """``grant`` is lost for good (``exc`` says why): drop it, unless replaced."""
        with self._lock:
            if self._grants.get(grant.resource) != grant:
                return
            del self._grants[grant.resource]
            self._lost[grant.resource] = exc
        if self.on_lost is not None:
            self.on_lost()

    def update(self, grant: Grant, lease: protocol.ownership.Lease) -> Grant:
        """``grant`` with the lease a renew or check reported; held unless replaced."""
        updated = replace(grant, generation=lease.generation, lease_expires_ms=lease.expires_ms)
        with self._lock:
            # A concurrent claim or loss may have replaced this grant meanwhile.
            if self._grants.get(grant.resource) == grant:
                self._grants[grant.resource] = updated
        return updated

    # -- supersession -------------------------------------------------------------------------

    def supersede(self, key: str, old_token: int, new_token: int) -> list[Grant]:
        """A notification said the grant of token ``old_token`` on the row ``key`` was
        superseded by ``new_token``: mark it so for good (even if a failover later loses the
        claim that severed it, it never acts again); return the grants it named."""
        told = []
        # Reads a snapshot: runs on the notifier thread, and takes the lock only to write.
        for grant in list(self._grants.values()):
            target = self._targets.get(grant.resource)
            if target is not None and target.key == key and grant.token == old_token:
                with self._lock:
                    self._superseded[grant.resource] = (grant.token, new_token)
                told.append(grant)
        return told

    def superseded(self, grant: Grant) -> Fenced | None:
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
        self.lose(grant, fenced)
        return fenced

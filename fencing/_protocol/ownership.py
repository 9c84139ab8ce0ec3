"""Script calls of the ownership table (G8). No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._grant import Grant
from .._keys import Keys
from .._lua_loader import script
from .._text import text as _text
from ..errors import (
    Fenced,
    FencingError,
    LeaseExpired,
    OwnershipConflict,
    StaleGeneration,
    StateLost,
)
from .base import ErrorReply, ReadCall, ScriptCall, generic_error


@dataclass(frozen=True, slots=True)
class Target:
    """One (group, resource) of a handle, with its keys built once."""

    group: str
    resource: str
    key: str
    released_channel: str
    #: Where a severed holder of this row is told (the script appends its session): in
    #: the row's slot, so the claim publishes on its own shard.
    session_prefix: str

    @classmethod
    def of(cls, keys: Keys, group: str, resource: str) -> Target:
        return cls(
            group=group,
            resource=resource,
            key=keys.ownership(group, resource),
            released_channel=keys.released_channel(group, resource),
            session_prefix=keys.session_channel_prefix(resource),
        )

    def session_channel(self, session: str) -> str:
        """The channel that tells ``session`` its grant on this row was severed."""
        return self.session_prefix + session


@dataclass(frozen=True, slots=True)
class Seen:
    """What a handle last saw of a row: sent with every call so the script can detect loss."""

    incarnation: str
    token: int


@dataclass(frozen=True, slots=True)
class Lease:
    """A renew or check reply."""

    generation: int
    token: int
    expires_ms: int
    now_ms: int


def _errors(target: Target) -> Any:
    def convert(reply: ErrorReply) -> FencingError:
        where = f"{target.resource!r} in group {target.group!r}"
        ctx = {"group": target.group, "resource": target.resource}
        if reply.code == "CONFLICT":
            remaining = reply.int("remaining_ms") / 1000.0
            label = reply.fields["holder_label"]
            return OwnershipConflict(
                f"{where} is held by {label!r} (token {reply.int('holder_token')}) for another "
                f"{remaining:.3f}s: wait with claim(..., wait=True) or claim with a generation",
                holder_label=label,
                holder_token=reply.int("holder_token"),
                remaining=remaining,
                **ctx,
            )
        if reply.code == "STALE_GENERATION":
            return stale_generation(
                target, reply.int("current_generation"), reply.int("requested_generation")
            )
        if reply.code == "FENCED":
            token = reply.int("token")
            label = reply.fields["holder_label"]
            return Fenced(
                f"{where}: this handle's grant (token {token}) was superseded by token "
                f"{reply.int('holder_token')} ({label or 'released since'}); stop writing "
                "and claim again if you still need it",
                token=token,
                holder_token=reply.int("holder_token"),
                holder_label=label,
                **ctx,
            )
        if reply.code == "LEASE_EXPIRED":
            ago = reply.int("expired_ms_ago") / 1000.0
            return LeaseExpired(
                f"{where}: the lease of token {reply.int('token')} lapsed {ago:.3f}s ago by "
                "server time and nobody has claimed it yet: call renew() before writing",
                token=reply.int("token"),
                expired_ago=ago,
                **ctx,
            )
        if reply.code == "STATE_LOST":
            return state_lost(target, reply)
        return generic_error(reply)

    return convert


def stale_generation(target: Target, current: int, requested: int) -> StaleGeneration:
    """The StaleGeneration of one row stored at generation ``current``."""
    return StaleGeneration(
        f"{target.resource!r} in group {target.group!r} is at generation {current}, above "
        f"the requested {requested}: claim with generation >= {current}, None, or 0 to reset",
        group=target.group,
        resource=target.resource,
        current=current,
        requested=requested,
    )


def state_lost(target: Target, reply: ErrorReply) -> StateLost:
    """The StateLost error of one ownership row."""
    reason = reply.fields["reason"]
    what = {
        "missing": "is gone",
        "incarnation": "was recreated (another incarnation)",
        "token": "went backwards (its token is below one this handle saw)",
    }.get(reason, reason)
    return StateLost(
        f"the ownership row of {target.resource!r} in group {target.group!r} {what}: the "
        "Redis server lost writes (FLUSHALL, restart without persistence, eviction or a "
        "failover). Nothing was written. Check persistence and maxmemory-policy noeviction, "
        "then open a new handle",
        reason=reason,
        key=target.key,
    )


def claim(
    keys: Keys,
    target: Target,
    *,
    session: str,
    label: str,
    generation: int | None,
    ttl_ms: int,
    new_incarnation: str,
    seen: Seen | None,
) -> ScriptCall[Grant]:
    """Claim one resource; the reply parses into a :class:`Grant`."""

    def parse(reply: list[Any]) -> Grant:
        status, gen, token, expires, _now, inc = reply
        return Grant(
            group=target.group,
            resource=target.resource,
            generation=int(gen),
            token=int(token),
            lease_expires_ms=int(expires),
            incarnation=_text(inc),
            new=_text(status) == "granted",
        )

    return ScriptCall(
        script=script("claim"),
        keys=(target.key,),
        args=(
            session,
            label,
            "" if generation is None else generation,
            ttl_ms,
            new_incarnation,
            seen.incarnation if seen else "",
            seen.token if seen else 0,
            target.session_prefix,
        ),
        parse=parse,
        error=_errors(target),
    )


def generations(targets: Sequence[Target]) -> ReadCall[list[int]]:
    """The stored generation G of each row (0 for a row not made yet), in one pipeline:
    a claim with a generation checks them all before it severs any holder."""
    return ReadCall(
        commands=tuple(("HGET", target.key, "gen") for target in targets),
        parse=lambda replies: [int(reply or 0) for reply in replies],
    )


def renew(target: Target, *, session: str, grant: Grant, ttl_ms: int) -> ScriptCall[Lease]:
    """Extend the lease of a grant this session holds."""
    return ScriptCall(
        script=script("renew"),
        keys=(target.key,),
        args=(session, grant.token, ttl_ms, grant.incarnation),
        parse=_lease,
        error=_errors(target),
    )


def check(target: Target, *, session: str, grant: Grant) -> ScriptCall[Lease]:
    """Check that a grant is still valid now (read-only)."""
    return ScriptCall(
        script=script("check"),
        keys=(target.key,),
        args=(session, grant.token, grant.incarnation),
        parse=_lease,
        error=_errors(target),
        mutating=False,
    )


def release(target: Target, *, session: str, grant: Grant | None) -> ScriptCall[bool]:
    """Release a grant; True if it was still this session's. ``grant=None`` releases
    whatever this session holds of the row (after a claim whose outcome is unknown)."""
    return ScriptCall(
        script=script("release"),
        keys=(target.key,),
        args=(session, "" if grant is None else grant.token, target.released_channel),
        parse=lambda reply: int(reply) == 1,
        error=_errors(target),
    )


def _lease(reply: list[Any]) -> Lease:
    gen, token, expires, now = reply
    return Lease(int(gen), int(token), int(expires), int(now))

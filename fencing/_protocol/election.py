"""Script calls of leader election: who leads, and the candidates' register. No I/O.

Winning, keeping and losing a term are ownership-table calls
(:mod:`fencing._protocol.ownership`) on the row (``"__election__"``, name); this module adds
the read-only view of that row and the register of waiting candidates that operators see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._keys import ELECTION_GROUP, Keys
from .._lua_loader import script
from .._text import text as _text
from .base import ScriptCall, generic_error
from .ownership import Target


@dataclass(frozen=True, slots=True)
class RowView:
    """What a peek saw of one ownership row, by server time."""

    #: The holder's label, or "" when nobody holds the row now (never claimed, released,
    #: or its lease lapsed).
    holder_label: str
    token: int
    generation: int
    since_ms: int
    expires_ms: int
    now_ms: int
    incarnation: str
    candidates: int


@dataclass(frozen=True, slots=True)
class ElectionKeys:
    """The keys of one election, built once; all in the slot of the election row."""

    target: Target
    candidates: str
    changed_channel: str

    @classmethod
    def of(cls, keys: Keys, name: str) -> ElectionKeys:
        return cls(
            target=Target.of(keys, ELECTION_GROUP, name),
            candidates=keys.election_candidates(name),
            changed_channel=keys.election_channel(name),
        )


def peek(row_key: str, candidates_key: str) -> ScriptCall[RowView]:
    """Read one ownership row (and a candidates set, which may not exist) by server time."""

    def parse(reply: list[Any]) -> RowView:
        label, token, gen, since, expires, now, inc, candidates = reply
        return RowView(
            holder_label=_text(label),
            token=int(token),
            generation=int(gen),
            since_ms=int(since),
            expires_ms=int(expires),
            now_ms=int(now),
            incarnation=_text(inc),
            candidates=int(candidates),
        )

    return ScriptCall(
        script=script("peek"),
        keys=(row_key, candidates_key),
        args=(),
        parse=parse,
        error=generic_error,
        mutating=False,
    )


def candidate(keys: ElectionKeys, *, session: str, label: str, ttl_ms: int) -> ScriptCall[int]:
    """Enter or refresh (``ttl_ms`` > 0) or leave (0) the candidates; returns how many wait."""
    return ScriptCall(
        script=script("candidate"),
        keys=(keys.candidates,),
        args=(f"{session} {label}", ttl_ms),
        parse=int,
        error=generic_error,
    )


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """Who leads an election, as read by server time.

    >>> info = election.leader()
    >>> info.label, info.token, info.lease_left                   # doctest: +SKIP
    ('host-a', 7, 8.42)
    """

    name: str
    #: The leader's ``candidate_id``.
    label: str
    #: The term's fencing token (grows by one per term, never goes down).
    token: int
    #: When the term began, in seconds since the epoch by the Redis server's clock.
    since: float
    #: Seconds left on the leader's lease by server time when this was read.
    lease_left: float

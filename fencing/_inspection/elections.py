"""Elections: each election's row (``"__election__"``, name) and its waiting candidates.

>>> import redis
>>> from fencing._keys import Keys
>>> r = redis.Redis.from_url("redis://localhost:6379/0")
>>> [(e.name, e.leader) for e in elections(r, Keys("fencing"))]    # doctest: +SKIP
[('scheduler', 'host-a')]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .._keys import ELECTION_GROUP, Keys, validate_name
from .._text import text
from .ownership import owner_row
from .reading import (
    LIST_LIMIT,
    PIPELINE_CHUNK,
    SCAN_COUNT,
    Key,
    Reads,
    SkippedKey,
    decode_hash,
    first_wrong,
    server_time_ms,
    skip,
    to_int,
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A candidate campaigning in an election (waiting to be elected), by server time.

    ``lease_left_ms`` is what is left of its entry in the candidates' register; a campaign
    refreshes it every third of its TTL, so an entry that runs out is a candidate that died.
    """

    label: str
    session: str
    lease_left_ms: int


@dataclass(frozen=True, slots=True)
class ElectionStatus:
    """One election: its row (``"__election__"``, name) and its waiting candidates.

    ``state`` is the row's state as in :class:`OwnerRow`: ``"live"`` (``leader`` leads; its
    lease runs by server time), ``"lapsed"`` (the last leader's lease ended and nobody was
    elected since) or ``"free"`` (resigned or released). ``leader`` is the leader's
    ``candidate_id``, None unless the state is live; ``label`` and ``session`` name the
    row's holder, lapsed or not. ``token`` is the fencing token of the current (or last)
    term and ``since_ms`` when that term began (server ms, 0 if unknown).
    ``candidate_count`` is exact; ``candidates`` lists at most :data:`LIST_LIMIT` of them.
    """

    name: str
    state: str
    leader: str | None
    label: str
    session: str
    token: int
    generation: int
    since_ms: int
    lease_left_ms: int
    expires_ms: int
    candidate_count: int
    candidates: list[Candidate]


def elections(
    r: redis.Redis,
    keys: Keys,
    names: Iterable[str] | None = None,
    *,
    skipped: list[SkippedKey] | None = None,
) -> list[ElectionStatus]:
    """Every election of the namespace, or those of ``names`` that exist; sorted by name.

    Found with ``SCAN MATCH <ns>:{*}:own:__election__`` like :func:`owners`. A candidate
    counts while its register entry's lease runs by server time. A key of an election
    that holds another Redis type raises :class:`~fencing.WrongKeyType`; given a
    ``skipped`` list, that election is left out and the key added to the list instead.
    """
    if names is None:
        pattern = keys.ownership_pattern(ELECTION_GROUP)
        scanned = (
            keys.ownership_resource(ELECTION_GROUP, text(k))
            for k in r.scan_iter(match=pattern, count=SCAN_COUNT)
        )
        found = sorted({name for name in scanned if name is not None})
    else:
        found = sorted({validate_name("election name", name) for name in names})
    out: list[ElectionStatus] = []
    for i in range(0, len(found), PIPELINE_CHUNK):
        chunk = found[i : i + PIPELINE_CHUNK]
        # The time first: the candidates' count needs it, and the rows are judged by it.
        now = server_time_ms(r)
        live = f"({now}"
        reads = Reads(r)
        for name in chunk:
            row = Key(keys.ownership(ELECTION_GROUP, name), "hash", f"the row of election {name!r}")
            register = Key(
                keys.election_candidates(name), "zset", f"the candidates of election {name!r}"
            )
            reads.hgetall(row)
            reads.zcount(register, live, "+inf")
            reads.zrangebyscore(register, live, "+inf", num=LIST_LIMIT)
        replies = reads.replies()
        for j, name in enumerate(chunk):
            got, count, listed = replies[3 * j : 3 * j + 3]
            wrong = first_wrong((got, count, listed))
            if wrong is not None:
                skip(skipped, wrong, f"election {name!r}")
            elif got:  # else never created, or deleted after the SCAN
                out.append(_election(name, decode_hash(got), int(count), listed, now))
    return out


def _election(
    name: str, row: dict[str, str], count: int, listed: Sequence[Any], now: int
) -> ElectionStatus:
    base = owner_row(ELECTION_GROUP, name, row, now)
    candidates: list[Candidate] = []
    for member, score in listed:
        session, _, label = text(member).partition(" ")
        candidates.append(Candidate(label, session, int(score) - now))
    return ElectionStatus(
        name=name,
        state=base.state,
        leader=base.label if base.state == "live" else None,
        label=base.label,
        session=base.session,
        token=base.token,
        generation=base.generation,
        since_ms=to_int(row.get("since")),
        lease_left_ms=base.lease_left_ms,
        expires_ms=base.expires_ms,
        candidate_count=count,
        candidates=sorted(candidates, key=lambda c: (c.label, c.session)),
    )

"""The ownership table: one row, or every row of a group.

>>> import redis
>>> from fencing._keys import Keys
>>> r = redis.Redis.from_url("redis://localhost:6379/0")
>>> [(row.resource, row.state) for row in owners(r, Keys("fencing"), "journal")]  # doctest: +SKIP
[('orders/0', 'live')]
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from .._keys import Keys, validate_name, validate_resource
from .._text import text
from .reading import (
    PIPELINE_CHUNK,
    SCAN_COUNT,
    Key,
    Reads,
    SkippedKey,
    WrongType,
    decode_hash,
    skip,
    time_ms,
    to_int,
)


@dataclass(frozen=True, slots=True)
class OwnerRow:
    """One row of the ownership table.

    ``state`` is ``"live"`` (a holder whose lease runs), ``"lapsed"`` (a holder whose lease
    ended by server time; it may still renew unless someone else claims) or ``"free"``.
    """

    group: str
    resource: str
    state: str
    label: str
    session: str
    generation: int
    token: int
    lease_left_ms: int
    expires_ms: int


def owner_row(group: str, resource: str, row: dict[str, str], now: int) -> OwnerRow:
    """The :class:`OwnerRow` of a decoded row hash, judged at server time ``now`` (ms)."""
    session = row.get("session", "")
    expires = to_int(row.get("expires"))
    left = expires - now
    state = "free" if not session else ("live" if left > 0 else "lapsed")
    return OwnerRow(
        group=group,
        resource=resource,
        state=state,
        label=row.get("label", "") if session else "",
        session=session,
        generation=to_int(row.get("gen")),
        token=to_int(row.get("token")),
        lease_left_ms=left if session else 0,
        expires_ms=expires,
    )


def row_key(keys: Keys, group: str, resource: str) -> Key:
    """The :class:`Key` of the ownership row (``group``, ``resource``)."""
    return Key(keys.ownership(group, resource), "hash", _row_what(group, resource))


def ownership_row(r: redis.Redis, keys: Keys, group: str, resource: str) -> OwnerRow | None:
    """One row of the ownership table, or None if it was never created;
    :class:`~fencing.WrongKeyType` if its key holds another Redis type.

    >>> ownership_row(r, Keys("fencing"), "journal", "orders/0").token  # doctest: +SKIP
    7
    """
    group = validate_name("group", group, allow_reserved=True)
    resource = validate_resource(resource)
    time_reply, reply = Reads(r).time().hgetall(row_key(keys, group, resource)).execute()
    row = decode_hash(reply)
    if not row:
        return None
    return owner_row(group, resource, row, time_ms(time_reply))


def owners(
    r: redis.Redis, keys: Keys, group: str, *, skipped: list[SkippedKey] | None = None
) -> list[OwnerRow]:
    """Every row of a group's ownership table, sorted by resource; a row whose key holds
    another Redis type raises :class:`~fencing.WrongKeyType`; given a ``skipped`` list,
    that row is left out and the key added to the list instead.

    Found with ``SCAN MATCH <ns>:{*}:own:<group>`` in bounded steps (never KEYS, which
    would stall the server and every lease on it).
    """
    group = validate_name("group", group, allow_reserved=True)
    pattern = keys.ownership_pattern(group)
    found: list[tuple[str, str]] = []
    for key in sorted({text(k) for k in r.scan_iter(match=pattern, count=SCAN_COUNT)}):
        resource = keys.ownership_resource(group, key)
        if resource is not None:  # else a key that only looks like a row
            found.append((resource, key))
    rows: list[OwnerRow] = []
    for i in range(0, len(found), PIPELINE_CHUNK):
        chunk = found[i : i + PIPELINE_CHUNK]
        reads = Reads(r).time()
        for resource, key in chunk:
            reads.hgetall(Key(key, "hash", _row_what(group, resource)))
        time_reply, *replies = reads.replies()
        now = time_ms(time_reply)
        for (resource, _), reply in zip(chunk, replies, strict=True):
            if isinstance(reply, WrongType):
                skip(skipped, reply, f"the row of {resource!r}")
                continue
            row = decode_hash(reply)
            if row:  # else deleted after the SCAN
                rows.append(owner_row(group, resource, row, now))
    return sorted(rows, key=lambda row: row.resource)


def _row_what(group: str, resource: str) -> str:
    return f"the ownership row of {resource!r} in group {group!r}"

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
from .reading import PIPELINE_CHUNK, SCAN_COUNT, decode_hash, time_ms, to_int


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


def ownership_row(r: redis.Redis, keys: Keys, group: str, resource: str) -> OwnerRow | None:
    """One row of the ownership table, or None if it was never created.

    >>> ownership_row(r, Keys("fencing"), "journal", "orders/0").token  # doctest: +SKIP
    7
    """
    group = validate_name("group", group, allow_reserved=True)
    resource = validate_resource(resource)
    pipe = r.pipeline(transaction=False)
    pipe.time()
    pipe.hgetall(keys.ownership(group, resource))
    time_reply, reply = pipe.execute()
    row = decode_hash(reply)
    if not row:
        return None
    return owner_row(group, resource, row, time_ms(time_reply))


def owners(r: redis.Redis, keys: Keys, group: str) -> list[OwnerRow]:
    """Every row of a group's ownership table, sorted by resource.

    Found with ``SCAN MATCH <ns>:{*}:own:<group>`` in bounded steps (never KEYS, which
    would stall the server and every lease on it).
    """
    group = validate_name("group", group, allow_reserved=True)
    pattern = keys.ownership_pattern(group)
    found = sorted({text(k) for k in r.scan_iter(match=pattern, count=SCAN_COUNT)})
    rows: list[OwnerRow] = []
    for i in range(0, len(found), PIPELINE_CHUNK):
        chunk = found[i : i + PIPELINE_CHUNK]
        pipe = r.pipeline(transaction=False)
        pipe.time()
        for key in chunk:
            pipe.hgetall(key)
        time_reply, *replies = pipe.execute()
        now = time_ms(time_reply)
        for key, reply in zip(chunk, replies, strict=True):
            resource = keys.ownership_resource(group, key)
            row = decode_hash(reply)
            # An empty row was deleted after the SCAN.
            if row and resource is not None:
                rows.append(owner_row(group, resource, row, now))
    return sorted(rows, key=lambda row: row.resource)

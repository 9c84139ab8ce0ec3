"""How the views read: bounded steps, reply decoding and the server's clock.

Every view reads with plain commands in pipelines of at most :data:`PIPELINE_CHUNK` keys,
finds keys with ``SCAN`` in steps of :data:`SCAN_COUNT` (never ``KEYS``), and judges leases
by the server's ``TIME``.

>>> import redis
>>> server_time_ms(redis.Redis.from_url("redis://localhost:6379/0"))  # doctest: +SKIP
1767225600000
"""

from __future__ import annotations

from typing import Any

import redis

from .._text import text

#: At most this many shared producers and waiters are listed per partition (counts are exact).
LIST_LIMIT = 1000
SCAN_COUNT = 500
PIPELINE_CHUNK = 64


def server_time_ms(r: redis.Redis) -> int:
    """The server's clock in milliseconds (``TIME``): the only clock leases are judged by."""
    return time_ms(r.time())


def time_ms(reply: Any) -> int:
    """Milliseconds from a ``TIME`` reply (seconds, microseconds), e.g. one in a pipeline."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def decode_hash(reply: Any) -> dict[str, str]:
    """An ``HGETALL`` reply as text (an empty dict for a missing key)."""
    return {text(k): text(v) for k, v in (reply or {}).items()}


def to_int(value: str | None, default: int = 0) -> int:
    """A field as an int: ``default`` when it is missing, empty or not a number."""
    try:
        return int(value) if value else default
    except ValueError:
        return default

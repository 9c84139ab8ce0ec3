"""The server's clock: the only clock leases, expiries and terms are judged by.

>>> server_ms(raw)                                                     # doctest: +SKIP
>>> wait_server_past(raw, grant.expires_at_ms)                         # doctest: +SKIP
"""

from __future__ import annotations

import redis

from .polling import wait_until

__all__ = ["server_ms", "wait_server_past"]


def server_ms(r: redis.Redis) -> int:
    """The server's clock in milliseconds (the only clock leases are judged by)."""
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_server_past(r: redis.Redis, deadline_ms: int, timeout: float = 10.0) -> None:
    """Wait until the server's clock is past ``deadline_ms``."""
    wait_until(lambda: server_ms(r) > deadline_ms, timeout=timeout)

"""What a successful claim returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Grant:
    """One grant of the ownership table.

    ``token`` is the fencing token: it grows by one on every grant to a new session and
    never goes down, so a store of your own can refuse a stale writer with
    ``... WHERE token <= $token``. ``generation`` is the ownership table's generation
    number (it can be reset to 0 by a ``generation=0`` claim). ``lease_expires_ms`` is the
    lease end in the Redis server's clock (milliseconds since the epoch), and
    ``incarnation`` identifies this row's history.
    ``new`` is False when the claim kept a grant this session already had.
    ``lapsed_ms`` is how long the lease had already ended by server time when the renewal
    that returned this grant extended it (0 when it had not): nobody claimed it meanwhile,
    but anyone could have, and a holder that acted all along (an election's callbacks) did
    so without a lease for that long.

    >>> g = Grant("journal", "orders/0", generation=1, token=1,
    ...           lease_expires_ms=0, incarnation="ab", new=True)
    >>> g.token
    1
    """

    group: str
    resource: str
    generation: int
    token: int
    lease_expires_ms: int
    incarnation: str
    new: bool
    lapsed_ms: int = 0

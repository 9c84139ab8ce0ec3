"""The CLI's only reaches into a :class:`~fencing.Client`'s internals, kept here so they can
be switched in one place: a raw connection on its server, and an ownership handle that may
claim in the reserved election group (which ``client.ownership`` refuses).

>>> r = raw_redis(client, timeout=2.0)                                # doctest: +SKIP
>>> election = "__election__"
>>> owner = operator_ownership(client, election, "me", 10.0, allow_reserved=True)  # doctest: +SKIP
"""

from __future__ import annotations

import redis

from .._sync.client import Client
from .._sync.context import context_of
from .._sync.ownership import Ownership


def raw_redis(client: Client, timeout: float) -> redis.Redis:
    """A raw client on the library client's server, its socket timeout ``timeout``."""
    raw: redis.Redis = context_of(client).driver(timeout).redis
    return raw


def operator_ownership(
    client: Client, group: str, owner_id: str, ttl: float, *, allow_reserved: bool
) -> Ownership:
    """An ownership handle on ``group``, in a reserved group if ``allow_reserved``."""
    return Ownership(context_of(client), group, owner_id, ttl, _allow_reserved=allow_reserved)

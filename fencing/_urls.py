"""Redis URLs: opening one with the library's own error, and showing one without its password."""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio

from .errors import InvalidArgument, InvalidArgumentType


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs).

    >>> redact("redis://:secret@127.0.0.1:6379/0")
    'redis://:***@127.0.0.1:6379/0'
    """
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return "<unparsable URL>"
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


R = TypeVar("R", redis.Redis, redis.asyncio.Redis)

#: URL schemes that name a Redis Cluster (any node's address; the others are discovered).
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def redis_from_url(url: object, cls: type[R], cluster_cls: type[Any] | None = None) -> Any:
    """``cls.from_url`` (``redis.Redis`` or ``redis.asyncio.Redis``) that refuses a URL it
    cannot use with InvalidArgument.

    >>> redis_from_url("bogus://")                                   # doctest: +SKIP
    Traceback (most recent call last):
    fencing.errors.InvalidArgument: bad Redis URL 'bogus://': ...
    """
    if not isinstance(url, str):
        raise InvalidArgumentType(f"the Redis URL must be a str, got {type(url).__name__}")
    scheme = url.split("://", 1)[0].lower()
    try:
        if scheme in CLUSTER_SCHEMES:
            if cluster_cls is None:
                raise ValueError("this client does not take a cluster URL")
            return cluster_cls.from_url(CLUSTER_SCHEMES[scheme] + url[len(scheme) :])
        return cls.from_url(url)
    except ValueError as exc:
        raise InvalidArgument(
            f"bad Redis URL {redact(url)!r}: {exc}. Use redis://[[user]:password@]host:port/db, "
            "rediss:// for TLS, unix:///path/to/socket, or redis+cluster://host:port "
            "(rediss+cluster:// with TLS) for a Redis Cluster"
        ) from None

"""Redis URLs: opening one with the library's own error, and showing one without its password."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import redis

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


def redis_from_url(url: object) -> redis.Redis:
    """``redis.Redis.from_url`` that refuses a URL it cannot use with InvalidArgument.

    >>> redis_from_url("bogus://")                                   # doctest: +SKIP
    Traceback (most recent call last):
    fencing.errors.InvalidArgument: bad Redis URL 'bogus://': ...
    """
    if not isinstance(url, str):
        raise InvalidArgumentType(f"the Redis URL must be a str, got {type(url).__name__}")
    try:
        return redis.Redis.from_url(url)
    except ValueError as exc:
        raise InvalidArgument(
            f"bad Redis URL {redact(url)!r}: {exc}. Use redis://[[user]:password@]host:port/db, "
            "rediss:// for TLS, or unix:///path/to/socket"
        ) from None

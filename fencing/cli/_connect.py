"""Reaching the server a command names: ``--url``/``--embedded``/``--namespace`` to a client
that answers, and a topic that exists there (checked with plain reads).

>>> with connect(args, read_only=True) as conn:                       # doctest: +SKIP
...     meta = existing_topic(conn, "orders")
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import redis
import redis.exceptions

from .. import _inspection as insp
from .._keys import Keys
from .._protocol.refusals import AUTH_ERRORS, auth_refusal
from .._sync.client import Client
from .._urls import redact
from ..embedded import EmbeddedServer
from ..errors import InvalidArgument, Unavailable
from ._client import raw_redis

#: Socket and connect timeout of the CLI's connections: a server that is down or a host
#: that does not answer fails within about this long, with no retry loop.
TIMEOUT = 2.0


@dataclass
class Conn:
    """What a command works with: the library client and a raw client on the same server."""

    client: Client
    r: redis.Redis
    where: str

    @property
    def keys(self) -> Keys:
        """The client's keys (its namespace)."""
        return self.client.keys


@contextlib.contextmanager
def connect(args: argparse.Namespace, *, read_only: bool) -> Iterator[Conn]:
    """Connect (starting an embedded server for --embedded) and check the server answers.

    Read-only commands skip the maxmemory-policy check (a restricted ACL user may not run
    CONFIG GET, and reading cannot be hurt by eviction); release keeps it.
    """
    with contextlib.ExitStack() as stack:
        url: str | None = args.url
        if args.embedded:
            if url:
                raise InvalidArgument("--embedded and --url exclude each other: pass one")
            try:
                server = EmbeddedServer.start()
            except (OSError, RuntimeError) as exc:
                raise Unavailable(f"could not start an embedded server: {exc}") from exc
            stack.callback(server.stop)
            url = server.url
        try:
            client = Client.from_url(
                url,
                namespace=args.namespace,
                socket_timeout=TIMEOUT,
                allow_eviction=True if read_only else None,
            )
        except redis.exceptions.RedisClusterException as exc:
            shown = redact(url or "") or "$FENCING_REDIS_URL"
            raise Unavailable(
                f"cannot reach the Redis Cluster at {shown}: {exc} (is it running? check "
                "--url or FENCING_REDIS_URL: redis+cluster://HOST:PORT of any of its nodes)"
            ) from exc
        stack.callback(client.close)
        where = redact(client.settings.redis_url)
        r = raw_redis(client, TIMEOUT)
        try:
            r.ping()
        except AUTH_ERRORS as exc:
            raise auth_refusal(exc) from exc
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise Unavailable(
                f"cannot reach Redis at {where}: {exc} (is it running? check --url or "
                "FENCING_REDIS_URL, or try --embedded)"
            ) from exc
        yield Conn(client, r, where)


def existing_topic(conn: Conn, name: str) -> insp.TopicMeta:
    """The metadata of a topic that exists and is fully created, checked with plain reads:
    opening an unknown topic through the library must not create it, and opening one still
    being created could create its partitions."""
    meta = insp.topic_meta(conn.r, conn.keys, name, where=f"server {conn.where}")
    if not meta.ready:
        raise InvalidArgument(
            f"topic {meta.name!r} is still being created (or its creation was interrupted): "
            f"open it with client.topic({meta.name!r}, partitions={meta.partitions}), then "
            "try again"
        )
    return meta

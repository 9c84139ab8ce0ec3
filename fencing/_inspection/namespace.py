"""A namespace at a glance: its topics, elections and consumer groups, and the keys of the
wrong type it skipped.

>>> import redis
>>> from fencing._keys import Keys
>>> r = redis.Redis.from_url("redis://localhost:6379/0")
>>> status = namespace_status(r, Keys("fencing"))                   # doctest: +SKIP
>>> [t.name for t in status.topics], [g.group for g in status.groups]  # doctest: +SKIP
(['orders'], ['billing'])
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import redis

from .._keys import Keys
from .._text import text
from .elections import ElectionStatus, elections
from .groups import GroupStatus, consumer_rows, topic_groups
from .reading import SkippedKey, server_time_ms
from .topics import TopicMeta, topics


@dataclass(frozen=True, slots=True)
class NamespaceStatus:
    """Everything of a namespace at a glance: topics, elections and consumer groups.

    ``skipped`` lists the keys that hold another Redis type than redis-fencing keeps there
    (another program wrote them), each with what it left out of the listing.
    """

    namespace: str
    server_time_ms: int
    topics: list[TopicMeta]
    elections: list[ElectionStatus]
    groups: list[GroupStatus]
    skipped: list[SkippedKey]


def namespace_status(r: redis.Redis, keys: Keys) -> NamespaceStatus:
    """The topics, elections and consumer groups (of every ready topic) of a namespace.

    A key of the wrong type does not fail the listing: what it is about (a topic, an
    election, a partition in consumer groups) is left out, and the key is listed in
    ``skipped``.
    """
    now = server_time_ms(r)
    skipped: list[SkippedKey] = []
    metas = topics(r, keys, skipped=skipped)
    rows = consumer_rows(r, keys, f"{keys.namespace}:{{*}}:own:*")
    groups: list[GroupStatus] = []
    for meta in metas:
        if meta.ready:
            wanted = range(meta.partitions)
            groups.extend(topic_groups(r, keys, meta, wanted, rows, skipped=skipped))
    groups.sort(key=lambda g: (g.group, g.topic))
    found = elections(r, keys, skipped=skipped)
    return NamespaceStatus(keys.namespace, now, metas, found, groups, skipped)


#: A key redis-fencing writes: ``<namespace>:{<tag>}:...``.
_LIBRARY_KEY = re.compile(r"([A-Za-z0-9._-]{1,200}):\{[^}]*\}:")
#: At most this many keys are looked at to find the namespaces on a server.
NAMESPACE_SCAN_LIMIT = 10_000


def namespaces_found(r: redis.Redis, *, limit: int = NAMESPACE_SCAN_LIMIT) -> list[str]:
    """The namespaces that have redis-fencing keys on the server, sorted, from a SCAN of at
    most ``limit`` matching keys (a listing for people: a namespace may be missed on a
    server with more keys than that)."""
    found: set[str] = set()
    for seen, raw in enumerate(r.scan_iter(match="*:{*}:*", count=1000)):
        if seen >= limit:
            break
        match = _LIBRARY_KEY.match(text(raw))
        if match is not None:
            found.add(match.group(1))
    return sorted(found)

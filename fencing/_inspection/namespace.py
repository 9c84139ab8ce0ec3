"""A namespace at a glance: its topics, elections and consumer groups.

>>> import redis
>>> from fencing._keys import Keys
>>> r = redis.Redis.from_url("redis://localhost:6379/0")
>>> status = namespace_status(r, Keys("fencing"))                   # doctest: +SKIP
>>> [t.name for t in status.topics], [g.group for g in status.groups]  # doctest: +SKIP
(['orders'], ['billing'])
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from .._keys import Keys
from .elections import ElectionStatus, elections
from .groups import GroupStatus, consumer_rows, topic_groups
from .reading import server_time_ms
from .topics import TopicMeta, topics


@dataclass(frozen=True, slots=True)
class NamespaceStatus:
    """Everything of a namespace at a glance: topics, elections and consumer groups."""

    namespace: str
    server_time_ms: int
    topics: list[TopicMeta]
    elections: list[ElectionStatus]
    groups: list[GroupStatus]


def namespace_status(r: redis.Redis, keys: Keys) -> NamespaceStatus:
    """The topics, elections and consumer groups (of every ready topic) of a namespace."""
    now = server_time_ms(r)
    metas = topics(r, keys)
    rows = consumer_rows(r, keys, f"{keys.namespace}:{{*}}:own:*")
    groups: list[GroupStatus] = []
    for meta in metas:
        if meta.ready:
            groups.extend(topic_groups(r, keys, meta, range(meta.partitions), rows))
    groups.sort(key=lambda g: (g.group, g.topic))
    return NamespaceStatus(keys.namespace, now, metas, elections(r, keys), groups)

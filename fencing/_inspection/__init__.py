"""Read-only views of what redis-fencing keeps in Redis, for operators and tests.

Nothing here writes, creates or repairs anything, and nothing prints: each function reads
keys built by :mod:`fencing._keys` with plain commands (HGETALL, ZRANGE, XLEN, TIME, SCAN)
and returns frozen dataclasses that :func:`dataclasses.asdict` turns into JSON-ready
dicts. Leases are judged by the *server's* clock (one ``TIME`` read with each snapshot),
never by the caller's (G7). ``fencing status``, ``fencing owners`` and ``fencing elections``
print these.

A key that holds another Redis type than the library keeps there (another program wrote
it) raises :class:`~fencing.WrongKeyType` naming it, never a raw ``WRONGTYPE`` reply; the
namespace listing skips it instead, lists the rest and names it (:class:`SkippedKey`).

One module per view: :mod:`.topics` (topic metadata), :mod:`.partitions` (offsets,
epochs, producers, PIDs), :mod:`.ownership` (ownership rows), :mod:`.elections`,
:mod:`.groups` (consumer groups and their lag), :mod:`.sinks` (the Spark sinks' totals per
app id), :mod:`.namespace` (all of it at a glance);
:mod:`.reading` holds what they share (bounded steps, reply decoding, the server's clock,
keys of the wrong type).

>>> import redis
>>> from fencing import _inspection as insp
>>> from fencing._keys import Keys
>>> r = redis.Redis.from_url("redis://localhost:6379/0")
>>> status = insp.topic_status(r, Keys("fencing"), "orders")         # doctest: +SKIP
>>> status.partitions[0].next_offset, status.partitions[0].epoch      # doctest: +SKIP
(42, 3)
"""

from __future__ import annotations

from .elections import Candidate, ElectionStatus, elections
from .groups import GroupPartition, GroupStatus, consumer_groups
from .namespace import NamespaceStatus, namespace_status, namespaces_found
from .ownership import OwnerRow, owners, ownership_row
from .partitions import (
    Holder,
    Lease,
    NameInfo,
    PartitionStatus,
    PidInfo,
    TopicStatus,
    topic_status,
)
from .reading import LIST_LIMIT, UNKNOWN_TYPE, SkippedKey, server_time_ms
from .sinks import SinkPartition, SinkStatus, spark_sinks
from .topics import TopicMeta, topic_meta, topics

__all__ = [
    "LIST_LIMIT",
    "UNKNOWN_TYPE",
    "Candidate",
    "ElectionStatus",
    "GroupPartition",
    "GroupStatus",
    "Holder",
    "Lease",
    "NameInfo",
    "NamespaceStatus",
    "OwnerRow",
    "PartitionStatus",
    "PidInfo",
    "SinkPartition",
    "SinkStatus",
    "SkippedKey",
    "TopicMeta",
    "TopicStatus",
    "consumer_groups",
    "elections",
    "namespace_status",
    "namespaces_found",
    "owners",
    "ownership_row",
    "server_time_ms",
    "spark_sinks",
    "topic_meta",
    "topic_status",
    "topics",
]

"""Consumer groups: per topic, every group with a committed offset or an ownership row on a
partition, with its offsets, lag and owners (like ``kafka-consumer-groups.sh --describe``).

>>> import redis
>>> from fencing._keys import Keys
>>> r = redis.Redis.from_url("redis://localhost:6379/0")
>>> [(g.group, g.lag) for g in consumer_groups(r, Keys("fencing"), "orders")]  # doctest: +SKIP
[('billing', 12)]
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from .._keys import NAME_RE, RESERVED_PREFIX, Keys, decode_resource, encode_resource
from .._text import text
from .ownership import OwnerRow, owner_row, row_key
from .reading import (
    PIPELINE_CHUNK,
    SCAN_COUNT,
    Reads,
    SkippedKey,
    WrongType,
    decode_hash,
    partition_key,
    skip,
    time_ms,
    to_int,
)
from .topics import TopicMeta, topic_meta, wanted_partitions

# The partition number of a consumer resource "<topic>/<p>", written as the library writes it.
_PARTITION_RE = re.compile(r"0|[1-9][0-9]{0,8}")

#: The groups with an ownership row on a resource ``"<topic>/<p>"``, per (topic, p).
ConsumerRows = dict[tuple[str, int], set[str]]


@dataclass(frozen=True, slots=True)
class GroupPartition:
    """One partition of a topic as a consumer group sees it (like a row of
    ``kafka-consumer-groups.sh --describe``).

    ``committed_offset`` is the next offset the group reads (None: it never committed) and
    ``committed_token`` the fencing token of the grant that committed it. ``lag`` is
    ``next_offset - committed_offset``, or ``next_offset - start_offset`` when nothing was
    committed (a consumer then starts at the first retained record): ``lag_from`` says
    which, ``"committed"`` or ``"start"``. ``owner`` is the ownership row (group,
    ``"<topic>/<p>"``), None if no member ever claimed the partition. ``note`` says what is
    wrong, if anything: a committed offset trimmed away or past the end, or partition
    metadata the server lost (``present`` False; the lag is then 0).
    """

    partition: int
    present: bool
    start_offset: int
    next_offset: int
    committed_offset: int | None
    committed_token: int | None
    lag: int
    lag_from: str
    owner: OwnerRow | None
    note: str | None


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """A consumer group on one topic: the partitions it committed offsets on or owns.

    ``lag`` is the sum of those partitions' lags, ``owned`` how many of them have a live
    owner by server time.
    """

    group: str
    topic: str
    lag: int
    owned: int
    partitions: list[GroupPartition]


def consumer_groups(
    r: redis.Redis,
    keys: Keys,
    topic: str,
    partitions: Iterable[int] | None = None,
    *,
    where: str = "",
) -> list[GroupStatus]:
    """The consumer groups of a topic, sorted by group: every group with a committed offset
    or an ownership row on one of ``partitions`` (all by default). Read-only.

    A group's rows are (group, ``"<topic>/<p>"``), found with one ``SCAN MATCH
    <ns>:{<topic>/*}:own:*``; committed offsets are read from each partition's hash.
    Groups whose names start with ``__`` (the library's own rows) are not consumer groups.
    A key that holds another Redis type raises :class:`~fencing.WrongKeyType`.
    """
    meta = topic_meta(r, keys, topic, where=where)
    wanted = wanted_partitions(meta, partitions)
    pattern = f"{keys.namespace}:{{{encode_resource(meta.name)}/*}}:own:*"
    rows = consumer_rows(r, keys, pattern)
    return topic_groups(r, keys, meta, wanted, rows)


def consumer_rows(r: redis.Redis, keys: Keys, pattern: str) -> ConsumerRows:
    """The groups with an ownership row on a resource ``"<topic>/<p>"``, per (topic, p),
    among the keys that match ``pattern``."""
    found: ConsumerRows = {}
    for raw in r.scan_iter(match=pattern, count=SCAN_COUNT):
        parsed = _consumer_row_key(keys, text(raw))
        if parsed is not None:
            group, topic, partition = parsed
            found.setdefault((topic, partition), set()).add(group)
    return found


def _consumer_row_key(keys: Keys, key: str) -> tuple[str, str, int] | None:
    head = keys.namespace + ":{"
    if not key.startswith(head):
        return None
    # An encoded resource holds no braces: the first '}' closes the tag.
    encoded, sep, group = key[len(head) :].partition("}:own:")
    if not sep or not encoded or ":" in encoded or not NAME_RE.fullmatch(group):
        return None
    if group.startswith(RESERVED_PREFIX):  # producer and election rows
        return None
    try:
        resource = decode_resource(encoded)
    except ValueError:
        return None
    topic, slash, number = resource.rpartition("/")
    if not (slash and NAME_RE.fullmatch(topic) and _PARTITION_RE.fullmatch(number)):
        return None
    if keys.ownership(group, resource) != key:
        return None
    return group, topic, int(number)


def topic_groups(
    r: redis.Redis,
    keys: Keys,
    meta: TopicMeta,
    wanted: Iterable[int],
    rows: ConsumerRows,
    *,
    skipped: list[SkippedKey] | None = None,
) -> list[GroupStatus]:
    """The groups of topic ``meta`` on the ``wanted`` partitions, given the ownership
    ``rows`` found by :func:`consumer_rows`, sorted by group.

    A key that holds another Redis type raises :class:`~fencing.WrongKeyType`; given a
    ``skipped`` list, what it is about is left out instead (a partition's metadata or
    committed offsets: that partition in every group; an ownership row: that partition in
    that group) and the key added to the list.
    """
    parts = list(wanted)
    per_group: dict[str, list[GroupPartition]] = {}
    for i in range(0, len(parts), PIPELINE_CHUNK):
        chunk = parts[i : i + PIPELINE_CHUNK]
        reads = Reads(r).time()
        owners_of: dict[int, list[str]] = {}
        for p in chunk:
            pk = keys.partition(meta.name, p)
            reads.hmget(partition_key(pk, pk.meta, "hash", "metadata"), ["inc", "start", "next"])
            reads.hgetall(partition_key(pk, pk.committed, "hash", "committed offsets"))
            owners_of[p] = sorted(rows.get((meta.name, p), ()))
            for group in owners_of[p]:
                reads.hgetall(row_key(keys, group, pk.resource))
        replies = iter(reads.replies())
        now = time_ms(next(replies))
        for p in chunk:
            offsets, committed = next(replies), next(replies)
            owned = {group: next(replies) for group in owners_of[p]}
            found = _partition_groups(
                meta.name, p, (offsets, committed, owned), now=now, skipped=skipped
            )
            for group, gp in found.items():
                per_group.setdefault(group, []).append(gp)
    out: list[GroupStatus] = []
    for group in sorted(per_group):
        listed = sorted(per_group[group], key=lambda gp: gp.partition)
        out.append(
            GroupStatus(
                group=group,
                topic=meta.name,
                lag=sum(gp.lag for gp in listed),
                owned=sum(1 for gp in listed if gp.owner is not None and gp.owner.state == "live"),
                partitions=listed,
            )
        )
    return out


def _partition_groups(
    topic: str,
    p: int,
    replies: tuple[Any, Any, dict[str, Any]],
    *,
    now: int,
    skipped: list[SkippedKey] | None,
) -> dict[str, GroupPartition]:
    """Partition ``p`` of ``topic`` in each group, from the ``replies`` of its metadata
    (HMGET inc start next), of its committed offsets and of each group's ownership row."""
    offsets, committed_reply, owned_replies = replies
    wrong = [reply for reply in (offsets, committed_reply) if isinstance(reply, WrongType)]
    for w in wrong:
        skip(skipped, w, f"partition {p} of topic {topic!r} in every consumer group")
    if wrong:
        return {}
    inc, start, end = (None if v is None else text(v) for v in offsets)
    committed = decode_hash(committed_reply)
    owned: dict[str, dict[str, str]] = {}
    left_out: set[str] = set()
    for group, reply in owned_replies.items():
        if isinstance(reply, WrongType):
            skip(skipped, reply, f"partition {p} of topic {topic!r} in consumer group {group!r}")
            left_out.add(group)
        else:
            owned[group] = decode_hash(reply)
    groups = {g for g in committed if NAME_RE.fullmatch(g)} | {g for g, row in owned.items() if row}
    out: dict[str, GroupPartition] = {}
    for group in groups - left_out:
        row = owned.get(group)
        out[group] = _group_partition(
            p,
            present=inc is not None,
            start=to_int(start),
            end=to_int(end),
            committed=committed.get(group),
            token=committed.get(group + "#t"),
            owner=owner_row(group, f"{topic}/{p}", row, now) if row else None,
        )
    return out


def _group_partition(
    p: int,
    *,
    present: bool,
    start: int,
    end: int,
    committed: str | None,
    token: str | None,
    owner: OwnerRow | None,
) -> GroupPartition:
    offset = None if committed is None else to_int(committed)
    note = None
    if not present:
        note = (
            "partition metadata missing: the server lost state (every handle on the "
            "partition raises StateLost)"
        )
    elif offset is not None and offset > end:
        note = (
            f"committed offset {offset} is past the end ({end}): the partition went back in "
            "history; the group's consumers raise StateLost"
        )
    elif offset is not None and offset < start:
        note = (
            f"committed offset {offset} was trimmed away: the group resumes at the first "
            f"retained offset {start}"
        )
    lag = 0 if not present else end - (start if offset is None else offset)
    return GroupPartition(
        partition=p,
        present=present,
        start_offset=start,
        next_offset=end,
        committed_offset=offset,
        committed_token=None if token is None else to_int(token),
        lag=lag,
        lag_from="start" if offset is None else "committed",
        owner=owner,
        note=note,
    )

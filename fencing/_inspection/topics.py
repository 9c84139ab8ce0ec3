"""Topics: a topic's metadata hash, every topic of a namespace, and partition numbers checked
against a topic.

>>> import redis
>>> from fencing._keys import Keys
>>> r = redis.Redis.from_url("redis://localhost:6379/0")
>>> [t.name for t in topics(r, Keys("fencing"))]                    # doctest: +SKIP
['orders']
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis

from .._keys import Keys, validate_name
from .._text import text
from ..errors import InvalidArgument, UnknownTopic
from .reading import (
    PIPELINE_CHUNK,
    SCAN_COUNT,
    Key,
    Reads,
    SkippedKey,
    WrongType,
    decode_hash,
    skip,
    to_int,
)


@dataclass(frozen=True, slots=True)
class TopicMeta:
    """A topic's metadata hash: incarnation, partition count, creation time (server ms),
    and the election that guards it ("" for none: see ``leadership.producer``)."""

    name: str
    incarnation: str
    partitions: int
    ready: bool
    created_ms: int
    guard: str = ""


def _unknown(keys: Keys, topic: str, where: str) -> UnknownTopic:
    return UnknownTopic(
        f"topic {topic!r} does not exist in namespace {keys.namespace!r} ({where}; check "
        f"--namespace and --url, or create it with client.topic({topic!r}, partitions=N))",
        topic=topic,
    )


def meta_key(keys: Keys, topic: str) -> Key:
    """The :class:`Key` of a topic's metadata hash."""
    return Key(keys.topic_meta(topic), "hash", f"the metadata of topic {topic!r}")


def topic_meta(r: redis.Redis, keys: Keys, topic: str, *, where: str = "") -> TopicMeta:
    """A topic's metadata; :class:`~fencing.UnknownTopic` if there is none (nothing is
    created), :class:`~fencing.WrongKeyType` if its key holds another Redis type.

    ``where`` (the server, say) is put in the error message.

    >>> topic_meta(r, Keys("fencing"), "orders").partitions            # doctest: +SKIP
    4
    """
    name = validate_name("topic", topic)
    [reply] = Reads(r).hgetall(meta_key(keys, name)).execute()
    row = decode_hash(reply)
    if not row:
        raise _unknown(keys, name, where or "no topic metadata")
    return meta_from_row(name, row)


def meta_from_row(name: str, row: dict[str, str]) -> TopicMeta:
    """The :class:`TopicMeta` of a decoded metadata hash."""
    return TopicMeta(
        name=name,
        incarnation=row.get("inc", ""),
        partitions=to_int(row.get("partitions")),
        ready=row.get("ready") == "1",
        created_ms=to_int(row.get("created_ms")),
        guard=row.get("guard", ""),
    )


def wanted_partitions(meta: TopicMeta, partitions: Iterable[int] | None) -> list[int]:
    """``partitions`` as a list (all of the topic's by default); InvalidArgument for one the
    topic does not have."""
    wanted = list(range(meta.partitions)) if partitions is None else list(partitions)
    for p in wanted:
        if not 0 <= p < meta.partitions:
            raise InvalidArgument(
                f"topic {meta.name!r} has partitions 0 to {meta.partitions - 1}; there is no "
                f"partition {p}"
            )
    return wanted


def topics(
    r: redis.Redis, keys: Keys, *, skipped: list[SkippedKey] | None = None
) -> list[TopicMeta]:
    """Every topic of the namespace (ready or still being created), sorted by name.

    Found with ``SCAN MATCH <ns>:{*}:topic`` in bounded steps. A metadata key of another
    Redis type raises :class:`~fencing.WrongKeyType`; given a ``skipped`` list, that topic
    is left out and the key added to the list instead.
    """
    names = (
        keys.topic_of(text(raw))
        for raw in r.scan_iter(match=keys.topic_meta_pattern(), count=SCAN_COUNT)
    )
    found = sorted({name for name in names if name is not None})
    out: list[TopicMeta] = []
    for i in range(0, len(found), PIPELINE_CHUNK):
        chunk = found[i : i + PIPELINE_CHUNK]
        reads = Reads(r)
        for name in chunk:
            reads.hgetall(meta_key(keys, name))
        for name, reply in zip(chunk, reads.replies(), strict=True):
            if isinstance(reply, WrongType):
                skip(skipped, reply, f"topic {name!r}")
                continue
            row = decode_hash(reply)
            if row:  # else deleted after the SCAN
                out.append(meta_from_row(name, row))
    return out

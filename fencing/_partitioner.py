"""Which partition a send goes to: the caller's, else the key's, exactly as Kafka's default
partitioner does it (murmur2), else round-robin.

Python's ``hash()`` is salted per process and must never pick a partition: two producers
would disagree. Kafka's murmur2 is stable and puts keys on the same partition numbers as a
Kafka producer would, so a topic can move between the two without reshuffling keys.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from ._record import Record, to_bytes
from .errors import InvalidArgument, InvalidArgumentType

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash of ``data``.

    >>> murmur2(b"21")
    -973932308
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - length % 4
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's ``toPositive(murmur2(key)) % partitions``.

    >>> partition_for_key(b"user-1", 4)
    0
    """
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class _Topic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> int: ...
    def partition_for(self, key: bytes | str) -> int: ...


def choose_partition(
    topic: _Topic, key: bytes | None, expected_offset: int | None, round_robin: Iterator[int]
) -> int:
    """The partition of one record sent without ``partition=``: the key's, else the next of
    ``round_robin``. ``expected_offset`` needs an explicit partition on several partitions."""
    n = topic.partitions
    if n == 1:
        return 0
    if expected_offset is not None:
        raise InvalidArgument(
            f"expected_offset needs an explicit partition: topic {topic.name!r} has {n} partitions"
        )
    if key is not None:
        return topic.partition_for(key)
    return next(round_robin) % n


def placing_key(parts: Sequence[bytes], key: object, message_id: str | None) -> bytes | None:
    """What places a record sent without ``partition=`` (its encoded ``parts``: value, then
    key): its key, else its message id (a resend then goes where the original went), else
    nothing (round-robin).

    >>> placing_key((b"v",), None, "order-17")
    b'order-17'
    """
    if key is not None:
        return parts[1]
    if message_id is not None:
        return message_id.encode("utf-8")
    return None


class Placement:
    """Where a producer's records go: the partition asked for, else by murmur2 of the key
    (or of the message id), else the next partition round-robin.

    >>> placement = Placement(topic)
    >>> placement.partition(None, entry.parts, b"user-1", None)     # doctest: +SKIP
    2
    """

    def __init__(self, topic: _Topic) -> None:
        self._topic = topic
        self._round_robin = itertools.count()

    def partition(
        self,
        partition: int | None,
        parts: Sequence[bytes],
        key: object,
        message_id: str | None,
        expected_offset: int | None = None,
    ) -> int:
        """The partition of one record (``parts``: its encoded parts)."""
        if partition is not None:
            return partition
        placing = placing_key(parts, key, message_id)
        return choose_partition(self._topic, placing, expected_offset, self._round_robin)


def batch_partition(topic: _Topic, batch: list[Record], expected_offset: int | None) -> int:
    """The partition of a batch sent without ``partition=``: its one key's (a single
    record without a key: its message id's, if it has one)."""
    if topic.partitions == 1:
        return 0
    keys = {r.key for r in batch}
    (first_key,) = keys if len(keys) == 1 else (None,)
    if first_key is None and len(batch) == 1 and batch[0].message_id is not None:
        first_key = batch[0].message_id.encode("utf-8")
    if first_key is not None and expected_offset is None:
        return topic.partition_for(first_key)
    raise InvalidArgument(
        "a batch goes to one partition: pass partition= (it is required with "
        "expected_offset on a topic of several partitions)"
    )


def as_records(records: Iterable[Record | bytes | str]) -> list[Record]:
    """A batch's items as records (a bare value is a record without key or headers)."""
    if isinstance(records, (bytes, str, Record)):
        raise InvalidArgumentType(
            "send_batch takes a list of records; use send() for a single record"
        )
    return [item if type(item) is Record else _as_record(item) for item in records]


def _as_record(item: Record | bytes | str) -> Record:
    return item if isinstance(item, Record) else Record(to_bytes("record", item))

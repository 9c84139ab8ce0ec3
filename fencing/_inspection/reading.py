"""How the views read: bounded steps, reply decoding, the server's clock, and keys of the
wrong type.

Every view reads with plain commands in pipelines of at most :data:`PIPELINE_CHUNK` keys,
finds keys with ``SCAN`` in steps of :data:`SCAN_COUNT` (never ``KEYS``), and judges leases
by the server's ``TIME``. A Redis Cluster client refuses ``TIME`` in a pipeline, so there it
is asked of the node that holds the first key the reads name, just before the pipeline.
Every read names the :class:`Key` it reads (the Redis type kept there and what it holds),
so that a key of another type, written there by another program, becomes a
:class:`~fencing.WrongKeyType` naming that key (or, for a listing, a :class:`SkippedKey`),
never a raw ``WRONGTYPE`` reply.

>>> import redis
>>> server_time_ms(redis.Redis.from_url("redis://localhost:6379/0"))  # doctest: +SKIP
1767225600000
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
import redis.exceptions
from redis.cluster import RedisCluster

from .._text import text
from ..errors import WrongKeyType

if TYPE_CHECKING:
    from .._keys import PartitionKeys

#: At most this many shared producers and waiters are listed per partition (counts are exact).
LIST_LIMIT = 1000
SCAN_COUNT = 500
PIPELINE_CHUNK = 64
#: What :class:`WrongType` says when the key no longer holds another type when it is looked at.
UNKNOWN_TYPE = "unknown"


def server_time_ms(r: redis.Redis) -> int:
    """The server's clock in milliseconds (``TIME``): the only clock leases are judged by."""
    return time_ms(r.time())


def time_ms(reply: Any) -> int:
    """Milliseconds from a ``TIME`` reply (seconds, microseconds), e.g. one in a pipeline."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def decode_hash(reply: Any) -> dict[str, str]:
    """An ``HGETALL`` reply as text (an empty dict for a missing key)."""
    return {text(k): text(v) for k, v in (reply or {}).items()}


def to_int(value: str | None, default: int = 0) -> int:
    """A field as an int: ``default`` when it is missing, empty or not a number."""
    try:
        return int(value) if value else default
    except ValueError:
        return default


@dataclass(frozen=True, slots=True)
class Key:
    """A key redis-fencing keeps state at: its name, the Redis type kept there (as ``TYPE``
    names it) and what it holds, in words.

    >>> Key("fencing:{orders}:topic", "hash", "the metadata of topic 'orders'").kind
    'hash'
    """

    name: str
    kind: str
    what: str


def partition_key(pk: PartitionKeys, name: str, kind: str, noun: str) -> Key:
    """The :class:`Key` ``name`` of a partition: ``the <noun> of partition P of topic 'T'``."""
    return Key(name, kind, f"the {noun} of partition {pk.partition} of topic {pk.topic!r}")


@dataclass(frozen=True, slots=True)
class SkippedKey:
    """A key of the wrong type that a listing skipped instead of failing on it.

    ``key_type`` is the Redis type the key holds (``"unknown"`` if it changed before it
    was looked at), ``expected`` the type redis-fencing keeps there, ``what`` what it is to
    redis-fencing, and ``left_out`` what the listing does not show because of it.
    """

    key: str
    key_type: str
    expected: str
    what: str
    left_out: str


@dataclass(frozen=True, slots=True)
class WrongType:
    """What a read of a key holding another Redis type replied (see :meth:`Reads.replies`).

    >>> wrong = WrongType(Key("ns:{t}:topic", "hash", "the metadata of topic 't'"), "string")
    >>> wrong.skipped("topic 't'").left_out
    "topic 't'"
    """

    key: Key
    key_type: str

    def error(self) -> WrongKeyType:
        """The :class:`~fencing.WrongKeyType` naming the key, in one line."""
        k = self.key
        held = "another Redis type" if self.key_type == UNKNOWN_TYPE else f"a Redis {self.key_type}"
        return WrongKeyType(
            f"key {k.name!r} ({k.what}) holds {held}, not a {k.kind}: another program uses "
            "this name; choose another namespace or remove that key",
            key=k.name,
            key_type=self.key_type,
        )

    def skipped(self, left_out: str) -> SkippedKey:
        """The :class:`SkippedKey` of a listing that leaves ``left_out`` out because of it."""
        k = self.key
        return SkippedKey(k.name, self.key_type, k.kind, k.what, left_out)


def skip(skipped: list[SkippedKey] | None, wrong: WrongType, left_out: str) -> None:
    """Add ``wrong`` to a listing's ``skipped`` keys as leaving ``left_out`` out; without a
    ``skipped`` list (a caller that lists nothing it could skip), raise its error."""
    if skipped is None:
        raise wrong.error()
    skipped.append(wrong.skipped(left_out))


def first_wrong(replies: Sequence[Any]) -> WrongType | None:
    """The first :class:`WrongType` among ``replies``, None if every read found its type."""
    return next((reply for reply in replies if isinstance(reply, WrongType)), None)


class Reads:
    """Plain reads sent in one pipeline, each naming the :class:`Key` it reads.

    A read of a key that holds another Redis type (``WRONGTYPE``) does not fail the
    others: :meth:`replies` gives a :class:`WrongType` in its place, :meth:`execute` raises
    its :class:`~fencing.WrongKeyType`. Any other refusal by the server raises as is.

    >>> meta = Key("fencing:{orders}:topic", "hash", "the metadata of topic 'orders'")
    >>> time_reply, row = Reads(r).time().hgetall(meta).execute()     # doctest: +SKIP
    """

    def __init__(self, r: redis.Redis) -> None:
        self._r = r
        self._pipe = r.pipeline(transaction=False)
        self._keys: list[Key | None] = []
        # Positions of the TIME reads a cluster pipeline refuses, asked of a node apart.
        self._times: list[int] = []

    def _read(self, key: Key | None) -> Reads:
        self._keys.append(key)
        return self

    def time(self) -> Reads:
        """``TIME``: the server's clock (see :func:`time_ms`); on a cluster, the clock of the
        node holding the first key read (a random node if the reads name no key)."""
        if isinstance(self._r, RedisCluster):
            self._times.append(len(self._keys))
        else:
            self._pipe.time()
        return self._read(None)

    def hgetall(self, key: Key) -> Reads:
        """``HGETALL key``."""
        self._pipe.hgetall(key.name)
        return self._read(key)

    def hmget(self, key: Key, fields: list[str]) -> Reads:
        """``HMGET key field...``."""
        self._pipe.hmget(key.name, fields)
        return self._read(key)

    def xlen(self, key: Key) -> Reads:
        """``XLEN key``."""
        self._pipe.xlen(key.name)
        return self._read(key)

    def zcard(self, key: Key) -> Reads:
        """``ZCARD key``."""
        self._pipe.zcard(key.name)
        return self._read(key)

    def zcount(self, key: Key, low: str, high: str) -> Reads:
        """``ZCOUNT key low high``."""
        self._pipe.zcount(key.name, low, high)
        return self._read(key)

    def zrange(self, key: Key, start: int, end: int, *, withscores: bool = False) -> Reads:
        """``ZRANGE key start end [WITHSCORES]``."""
        self._pipe.zrange(key.name, start, end, withscores=withscores)
        return self._read(key)

    def zrangebyscore(self, key: Key, low: str, high: str, *, num: int) -> Reads:
        """``ZRANGEBYSCORE key low high WITHSCORES LIMIT 0 num``."""
        self._pipe.zrangebyscore(key.name, low, high, start=0, num=num, withscores=True)
        return self._read(key)

    def replies(self) -> list[Any]:
        """Send the reads; their replies in order, a :class:`WrongType` for each read of a
        key of another type (for a listing that skips it and lists the rest)."""
        clock = self._cluster_time() if self._times else None
        piped = iter(self._pipe.execute(raise_on_error=False))
        replies: list[Any] = [
            clock if i in self._times else next(piped) for i in range(len(self._keys))
        ]
        for i, (key, reply) in enumerate(zip(self._keys, replies, strict=True)):
            if not isinstance(reply, redis.exceptions.ResponseError):
                continue
            if key is None or not str(reply).startswith("WRONGTYPE"):
                raise reply
            replies[i] = WrongType(key, _key_type(self._r, key))
        return replies

    def _cluster_time(self) -> Any:
        """``TIME`` of the node holding the first key read (see :meth:`time`)."""
        assert isinstance(self._r, RedisCluster)
        first = next((key for key in self._keys if key is not None), None)
        if first is None:
            return self._r.time()
        return self._r.time(target_nodes=self._r.get_node_from_key(first.name))

    def execute(self) -> list[Any]:
        """Send the reads; their replies in order. Raises :class:`~fencing.WrongKeyType`
        for the first key of another type."""
        replies = self.replies()
        wrong = first_wrong(replies)
        if wrong is not None:
            raise wrong.error()
        return replies


def _key_type(r: redis.Redis, key: Key) -> str:
    """The Redis type ``key`` holds, :data:`UNKNOWN_TYPE` if it holds no other type now
    (deleted or rewritten since it was read) or ``TYPE`` is refused."""
    try:
        kind = text(r.type(key.name))
    except redis.exceptions.ResponseError:
        return UNKNOWN_TYPE
    return UNKNOWN_TYPE if kind in ("none", key.kind) else kind

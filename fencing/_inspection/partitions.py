"""A topic's partitions: offsets, epoch, the producers on each and their PID state.

>>> import redis
>>> from fencing._keys import Keys
>>> r = redis.Redis.from_url("redis://localhost:6379/0")
>>> status = topic_status(r, Keys("fencing"), "orders")              # doctest: +SKIP
>>> status.partitions[0].next_offset, status.partitions[0].epoch      # doctest: +SKIP
(42, 3)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .._keys import Keys
from .._protocol.producer import decode_pid_state
from .._protocol.topic import DEFAULT_DEDUP_WINDOW, DEFAULT_PID_EXPIRY_MS
from .._text import text
from .reading import (
    LIST_LIMIT,
    PIPELINE_CHUNK,
    Reads,
    decode_hash,
    partition_key,
    server_time_ms,
    time_ms,
    to_int,
)
from .topics import TopicMeta, topic_meta, wanted_partitions

_MODES = {"x": "exclusive", "s": "shared", "": "none"}
# The replies each partition adds to the pipeline of topic_status, in order.
_REPLIES_PER_PARTITION = 10


@dataclass(frozen=True, slots=True)
class Lease:
    """A shared producer or a waiter: its session and its lease left by server time (ms).

    A lease at or below 0 has lapsed; the next script on the partition removes it.

    >>> Lease.at("3f2a", expires_ms=1_500, now_ms=1_000)
    Lease(session='3f2a', lease_left_ms=500, live=True)
    """

    session: str
    lease_left_ms: int
    live: bool

    @classmethod
    def at(cls, session: str, expires_ms: int, now_ms: int) -> Lease:
        """The lease of ``session`` ending at ``expires_ms``, seen at server time ``now_ms``."""
        return cls(session, expires_ms - now_ms, expires_ms > now_ms)


@dataclass(frozen=True, slots=True)
class Holder:
    """The session named on an ownership row (or a partition's exclusive-producer row)."""

    label: str
    session: str
    lease_left_ms: int
    live: bool


@dataclass(frozen=True, slots=True)
class PidInfo:
    """Idempotence state of one producer id on a partition (G5).

    ``last_sequence`` is -1 before its first batch; ``window`` is how many of its last
    batches are remembered for duplicate detection (at most 5).
    """

    pid: int
    generation: int
    last_sequence: int
    last_write_age_ms: int | None
    window: int
    expired: bool


@dataclass(frozen=True, slots=True)
class NameInfo:
    """A producer name and the PID incarnation it points at."""

    name: str
    pid: int
    generation: int


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """One partition: offsets, epoch, the producers on it and their PID state.

    ``present`` is False when the partition's metadata is missing although its topic is
    there: the store lost state (G9), and every handle on the partition raises StateLost.
    ``mode`` is the producer regime of the exclusive-producer row: ``"exclusive"``,
    ``"shared"`` or ``"none"``. ``epoch`` is that row's token.
    """

    partition: int
    present: bool
    incarnation: str
    start_offset: int
    next_offset: int
    retained: int
    max_len: int
    epoch: int
    generation: int
    mode: str
    holder: Holder | None
    shared_count: int
    shared: list[Lease]
    waiter_count: int
    waiters: list[Lease]
    pids: list[PidInfo]
    names: list[NameInfo]


@dataclass(frozen=True, slots=True)
class TopicStatus:
    """A topic and the status of (some of) its partitions, read at ``server_time_ms``."""

    namespace: str
    topic: TopicMeta
    server_time_ms: int
    partitions: list[PartitionStatus]


def topic_status(
    r: redis.Redis,
    keys: Keys,
    topic: str,
    partitions: Iterable[int] | None = None,
    *,
    where: str = "",
) -> TopicStatus:
    """The status of a topic's partitions (all by default). Read-only.

    PID states older than the partition's own producer state expiry are marked expired (the
    scripts treat them as gone even before they remove them). A key of the topic or of a
    partition that holds another Redis type raises :class:`~fencing.WrongKeyType`.

    >>> topic_status(r, Keys("fencing"), "orders", [0]).partitions[0].mode  # doctest: +SKIP
    'exclusive'
    """
    meta = topic_meta(r, keys, topic, where=where)
    wanted = wanted_partitions(meta, partitions)
    now = 0
    out: list[PartitionStatus] = []
    for i in range(0, len(wanted), PIPELINE_CHUNK):
        chunk = wanted[i : i + PIPELINE_CHUNK]
        reads = Reads(r).time()
        for p in chunk:
            pk = keys.partition(meta.name, p)
            shared = partition_key(pk, pk.shared, "zset", "shared producers")
            waiters = partition_key(pk, pk.waiters, "zset", "waiting producers")
            reads.hgetall(partition_key(pk, pk.meta, "hash", "metadata"))
            reads.xlen(partition_key(pk, pk.stream, "stream", "log"))
            reads.hgetall(partition_key(pk, pk.owner, "hash", "exclusive-producer row"))
            reads.zcard(shared)
            reads.zrange(shared, 0, LIST_LIMIT - 1, withscores=True)
            reads.zcard(waiters)
            reads.zrange(waiters, 0, LIST_LIMIT - 1)
            reads.hgetall(partition_key(pk, pk.waiting_leases, "hash", "waiters' leases"))
            reads.hgetall(partition_key(pk, pk.pids, "hash", "producer id states"))
            reads.hgetall(partition_key(pk, pk.names, "hash", "producer names"))
        replies = reads.execute()
        now = time_ms(replies[0])
        per = _REPLIES_PER_PARTITION
        for j, p in enumerate(chunk):
            part = replies[1 + j * per : 1 + (j + 1) * per]
            out.append(_partition(p, part, now))
    return TopicStatus(keys.namespace, meta, now or server_time_ms(r), out)


def _partition(p: int, replies: Sequence[Any], now: int) -> PartitionStatus:
    meta, xlen, owner, shared_n, shared, waiters_n, waiters, wleases, pids, names = replies
    part = decode_hash(meta)
    state_ttl_ms = int(part.get("pidexp") or DEFAULT_PID_EXPIRY_MS)
    window_size = int(part.get("dedupw") or DEFAULT_DEDUP_WINDOW)
    row = decode_hash(owner)
    leases = decode_hash(wleases)
    holder = None
    if row.get("session"):
        left = to_int(row.get("expires")) - now
        holder = Holder(row.get("label", ""), row["session"], left, left > 0)
    return PartitionStatus(
        partition=p,
        present=bool(part),
        incarnation=part.get("inc", ""),
        start_offset=to_int(part.get("start")),
        next_offset=to_int(part.get("next")),
        retained=int(xlen),
        max_len=to_int(part.get("maxlen")),
        epoch=to_int(row.get("token")),
        generation=to_int(row.get("gen")),
        mode=_MODES.get(row.get("mode", ""), row.get("mode", "")),
        holder=holder,
        shared_count=int(shared_n),
        shared=[Lease.at(text(s), int(score), now) for s, score in shared],
        waiter_count=int(waiters_n),
        waiters=[Lease.at(text(s), to_int(leases.get(text(s))), now) for s in waiters],
        pids=sorted(
            (
                _pid(text(k), text(v), now, state_ttl_ms, window_size)
                for k, v in (pids or {}).items()
            ),
            key=lambda info: info.pid,
        ),
        names=sorted(
            # '#<pid>' fields are PID fences and '!<key>' the newest open's ticket, not
            # names (names cannot start with either).
            (_name(k, v) for k, v in decode_hash(names).items() if not k.startswith(("#", "!"))),
            key=lambda n: n.name,
        ),
    )


def _pid(pid: str, raw: str, now: int, state_ttl_ms: int, window_size: int) -> PidInfo:
    try:
        state = decode_pid_state(raw)
    except ValueError:  # not a state the scripts wrote: show what can be told
        return PidInfo(
            pid=to_int(pid),
            generation=0,
            last_sequence=-1,
            last_write_age_ms=None,
            window=0,
            expired=False,
        )
    age = now - state.last_write_ms
    return PidInfo(
        pid=to_int(pid),
        generation=state.generation,
        last_sequence=state.last_sequence,
        last_write_age_ms=age,
        window=min(state.batches, window_size),
        expired=age > state_ttl_ms,
    )


def _name(name: str, value: str) -> NameInfo:
    pid, _, gen = value.partition(" ")
    return NameInfo(name, to_int(pid), to_int(gen))

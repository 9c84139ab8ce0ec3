"""Read-only introspection of what redis-fencing keeps in Redis, for operators and tests.

Nothing here writes, creates or repairs anything, and nothing prints: each function reads
keys built by :mod:`fencing.keys` with plain commands (HGETALL, ZRANGE, XLEN, TIME, SCAN)
and returns frozen dataclasses that :func:`dataclasses.asdict` turns into JSON-ready
dicts. Leases are judged by the *server's* clock (one ``TIME`` read with each snapshot),
never by the caller's (G7). ``fencing status`` and ``fencing owners`` print these.

>>> import redis
>>> from fencing.keys import Keys
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

from .errors import InvalidArgument, UnknownTopic
from .keys import Keys, validate_name, validate_resource
from .protocol.producer import decode_pid_state
from .protocol.topic import DEFAULT_PID_EXPIRY_MS
from .text import text

#: At most this many shared producers and waiters are listed per partition (counts are exact).
LIST_LIMIT = 1000
_SCAN_COUNT = 500
_PIPELINE_CHUNK = 64

_MODES = {"x": "exclusive", "s": "shared", "": "none"}


@dataclass(frozen=True, slots=True)
class TopicMeta:
    """A topic's metadata hash: incarnation, partition count, creation time (server ms)."""

    name: str
    incarnation: str
    partitions: int
    ready: bool
    created_ms: int


@dataclass(frozen=True, slots=True)
class Lease:
    """A shared producer or a waiter: its session and its lease left by server time (ms).

    A lease at or below 0 has lapsed; the next script on the partition removes it.
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


@dataclass(frozen=True, slots=True)
class OwnerRow:
    """One row of the ownership table.

    ``state`` is ``"live"`` (a holder whose lease runs), ``"lapsed"`` (a holder whose lease
    ended by server time; it may still renew unless someone else claims) or ``"free"``.
    """

    group: str
    resource: str
    state: str
    label: str
    session: str
    generation: int
    token: int
    lease_left_ms: int
    expires_ms: int


def server_time_ms(r: redis.Redis) -> int:
    """The server's clock in milliseconds (``TIME``): the only clock leases are judged by."""
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _hash(reply: Any) -> dict[str, str]:
    return {text(k): text(v) for k, v in (reply or {}).items()}


def _int(value: str | None, default: int = 0) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default


def _unknown(keys: Keys, topic: str, where: str) -> UnknownTopic:
    return UnknownTopic(
        f"topic {topic!r} does not exist in namespace {keys.namespace!r} ({where}; check "
        f"--namespace and --url, or create it with client.topic({topic!r}, partitions=N))",
        topic=topic,
    )


def topic_meta(r: redis.Redis, keys: Keys, topic: str, *, where: str = "") -> TopicMeta:
    """A topic's metadata; :class:`~fencing.UnknownTopic` if there is none (nothing is created).

    ``where`` (the server, say) is put in the error message.
    """
    name = validate_name("topic", topic)
    row = _hash(r.hgetall(keys.topic_meta(name)))
    if not row:
        raise _unknown(keys, name, where or "no topic metadata")
    return TopicMeta(
        name=name,
        incarnation=row.get("inc", ""),
        partitions=_int(row.get("partitions")),
        ready=row.get("ready") == "1",
        created_ms=_int(row.get("created_ms")),
    )


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
    scripts treat them as gone even before they remove them).
    """
    meta = topic_meta(r, keys, topic, where=where)
    wanted = list(range(meta.partitions)) if partitions is None else list(partitions)
    for p in wanted:
        if not 0 <= p < meta.partitions:
            raise InvalidArgument(
                f"topic {meta.name!r} has partitions 0 to {meta.partitions - 1}; there is no "
                f"partition {p}"
            )
    now = 0
    out: list[PartitionStatus] = []
    for i in range(0, len(wanted), _PIPELINE_CHUNK):
        chunk = wanted[i : i + _PIPELINE_CHUNK]
        pipe = r.pipeline(transaction=False)
        pipe.time()
        for p in chunk:
            pk = keys.partition(meta.name, p)
            pipe.hgetall(pk.meta)
            pipe.xlen(pk.stream)
            pipe.hgetall(pk.owner)
            pipe.zcard(pk.shared)
            pipe.zrange(pk.shared, 0, LIST_LIMIT - 1, withscores=True)
            pipe.zcard(pk.waiters)
            pipe.zrange(pk.waiters, 0, LIST_LIMIT - 1)
            pipe.hgetall(pk.waiting_leases)
            pipe.hgetall(pk.pids)
            pipe.hgetall(pk.names)
        replies = pipe.execute()
        seconds, micros = replies[0]
        now = int(seconds) * 1000 + int(micros) // 1000
        per = 10
        for j, p in enumerate(chunk):
            part = replies[1 + j * per : 1 + (j + 1) * per]
            out.append(_partition(p, part, now))
    return TopicStatus(keys.namespace, meta, now or server_time_ms(r), out)


def _partition(p: int, replies: Sequence[Any], now: int) -> PartitionStatus:
    meta, xlen, owner, shared_n, shared, waiters_n, waiters, wleases, pids, names = replies
    part = _hash(meta)
    state_ttl_ms = int(part.get("pidexp") or DEFAULT_PID_EXPIRY_MS)
    row = _hash(owner)
    leases = _hash(wleases)
    holder = None
    if row.get("session"):
        left = _int(row.get("expires")) - now
        holder = Holder(row.get("label", ""), row["session"], left, left > 0)
    return PartitionStatus(
        partition=p,
        present=bool(part),
        incarnation=part.get("inc", ""),
        start_offset=_int(part.get("start")),
        next_offset=_int(part.get("next")),
        retained=int(xlen),
        max_len=_int(part.get("maxlen")),
        epoch=_int(row.get("token")),
        generation=_int(row.get("gen")),
        mode=_MODES.get(row.get("mode", ""), row.get("mode", "")),
        holder=holder,
        shared_count=int(shared_n),
        shared=[Lease.at(text(s), int(score), now) for s, score in shared],
        waiter_count=int(waiters_n),
        waiters=[Lease.at(text(s), _int(leases.get(text(s))), now) for s in waiters],
        pids=sorted(
            (_pid(text(k), text(v), now, state_ttl_ms) for k, v in (pids or {}).items()),
            key=lambda info: info.pid,
        ),
        names=sorted(
            # '#<pid>' fields are PID fences, not names (names cannot start with '#').
            (_name(k, v) for k, v in _hash(names).items() if not k.startswith("#")),
            key=lambda n: n.name,
        ),
    )


def _pid(pid: str, raw: str, now: int, state_ttl_ms: int) -> PidInfo:
    try:
        state = decode_pid_state(raw)
    except ValueError:  # not a state the scripts wrote: show what can be told
        return PidInfo(
            pid=_int(pid),
            generation=0,
            last_sequence=-1,
            last_write_age_ms=None,
            window=0,
            expired=False,
        )
    age = now - state.last_write_ms
    return PidInfo(
        pid=_int(pid),
        generation=state.generation,
        last_sequence=state.last_sequence,
        last_write_age_ms=age,
        window=len(state.window),
        expired=age > state_ttl_ms,
    )


def _name(name: str, value: str) -> NameInfo:
    pid, _, gen = value.partition(" ")
    return NameInfo(name, _int(pid), _int(gen))


def _owner_row(group: str, resource: str, row: dict[str, str], now: int) -> OwnerRow:
    session = row.get("session", "")
    expires = _int(row.get("expires"))
    left = expires - now
    state = "free" if not session else ("live" if left > 0 else "lapsed")
    return OwnerRow(
        group=group,
        resource=resource,
        state=state,
        label=row.get("label", "") if session else "",
        session=session,
        generation=_int(row.get("gen")),
        token=_int(row.get("token")),
        lease_left_ms=left if session else 0,
        expires_ms=expires,
    )


def ownership_row(r: redis.Redis, keys: Keys, group: str, resource: str) -> OwnerRow | None:
    """One row of the ownership table, or None if it was never created."""
    group = validate_name("group", group, allow_reserved=True)
    resource = validate_resource(resource)
    pipe = r.pipeline(transaction=False)
    pipe.time()
    pipe.hgetall(keys.ownership(group, resource))
    (seconds, micros), reply = pipe.execute()
    row = _hash(reply)
    if not row:
        return None
    return _owner_row(group, resource, row, int(seconds) * 1000 + int(micros) // 1000)


def owners(r: redis.Redis, keys: Keys, group: str) -> list[OwnerRow]:
    """Every row of a group's ownership table, sorted by resource.

    Found with ``SCAN MATCH <ns>:{*}:own:<group>`` in bounded steps (never KEYS, which
    would stall the server and every lease on it).
    """
    group = validate_name("group", group, allow_reserved=True)
    pattern = keys.ownership_pattern(group)
    found = sorted({text(k) for k in r.scan_iter(match=pattern, count=_SCAN_COUNT)})
    rows: list[OwnerRow] = []
    for i in range(0, len(found), _PIPELINE_CHUNK):
        chunk = found[i : i + _PIPELINE_CHUNK]
        pipe = r.pipeline(transaction=False)
        pipe.time()
        for key in chunk:
            pipe.hgetall(key)
        (seconds, micros), *replies = pipe.execute()
        now = int(seconds) * 1000 + int(micros) // 1000
        for key, reply in zip(chunk, replies, strict=True):
            resource = keys.ownership_resource(group, key)
            row = _hash(reply)
            # An empty row was deleted after the SCAN.
            if row and resource is not None:
                rows.append(_owner_row(group, resource, row, now))
    return sorted(rows, key=lambda row: row.resource)

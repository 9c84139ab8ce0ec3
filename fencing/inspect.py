"""Read-only introspection of what redis-fencing keeps in Redis, for operators and tests.

Nothing here writes, creates or repairs anything, and nothing prints: each function reads
keys built by :mod:`fencing._keys` with plain commands (HGETALL, ZRANGE, XLEN, TIME, SCAN)
and returns frozen dataclasses that :func:`dataclasses.asdict` turns into JSON-ready
dicts. Leases are judged by the *server's* clock (one ``TIME`` read with each snapshot),
never by the caller's (G7). ``fencing status``, ``fencing owners`` and ``fencing elections``
print these.

>>> import redis
>>> from fencing._keys import Keys
>>> r = redis.Redis.from_url("redis://localhost:6379/0")
>>> status = topic_status(r, Keys("fencing"), "orders")              # doctest: +SKIP
>>> status.partitions[0].next_offset, status.partitions[0].epoch      # doctest: +SKIP
(42, 3)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from ._keys import (
    ELECTION_GROUP,
    NAME_RE,
    RESERVED_PREFIX,
    Keys,
    decode_resource,
    encode_resource,
    validate_name,
    validate_resource,
)
from ._protocol.producer import decode_pid_state
from ._protocol.topic import DEFAULT_DEDUP_WINDOW, DEFAULT_PID_EXPIRY_MS
from ._text import text
from .errors import InvalidArgument, UnknownTopic

#: At most this many shared producers and waiters are listed per partition (counts are exact).
LIST_LIMIT = 1000
_SCAN_COUNT = 500
_PIPELINE_CHUNK = 64

_MODES = {"x": "exclusive", "s": "shared", "": "none"}
# The partition number of a consumer resource "<topic>/<p>", written as the library writes it.
_PARTITION_RE = re.compile(r"0|[1-9][0-9]{0,8}")


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
    return _topic_meta(name, row)


def _topic_meta(name: str, row: dict[str, str]) -> TopicMeta:
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
    wanted = _wanted(meta, partitions)
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


def _wanted(meta: TopicMeta, partitions: Iterable[int] | None) -> list[int]:
    wanted = list(range(meta.partitions)) if partitions is None else list(partitions)
    for p in wanted:
        if not 0 <= p < meta.partitions:
            raise InvalidArgument(
                f"topic {meta.name!r} has partitions 0 to {meta.partitions - 1}; there is no "
                f"partition {p}"
            )
    return wanted


def _partition(p: int, replies: Sequence[Any], now: int) -> PartitionStatus:
    meta, xlen, owner, shared_n, shared, waiters_n, waiters, wleases, pids, names = replies
    part = _hash(meta)
    state_ttl_ms = int(part.get("pidexp") or DEFAULT_PID_EXPIRY_MS)
    window_size = int(part.get("dedupw") or DEFAULT_DEDUP_WINDOW)
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
            (
                _pid(text(k), text(v), now, state_ttl_ms, window_size)
                for k, v in (pids or {}).items()
            ),
            key=lambda info: info.pid,
        ),
        names=sorted(
            # '#<pid>' fields are PID fences and '!<key>' the newest open's ticket, not
            # names (names cannot start with either).
            (_name(k, v) for k, v in _hash(names).items() if not k.startswith(("#", "!"))),
            key=lambda n: n.name,
        ),
    )


def _pid(pid: str, raw: str, now: int, state_ttl_ms: int, window_size: int) -> PidInfo:
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
        window=min(state.batches, window_size),
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


def topics(r: redis.Redis, keys: Keys) -> list[TopicMeta]:
    """Every topic of the namespace (ready or still being created), sorted by name.

    Found with ``SCAN MATCH <ns>:{*}:topic`` in bounded steps.
    """
    head, tail = f"{keys.namespace}:{{", "}:topic"
    names: set[str] = set()
    for raw in r.scan_iter(match=f"{head}*{tail}", count=_SCAN_COUNT):
        key = text(raw)
        name = key[len(head) : -len(tail)]
        # Another key can match the pattern (an ownership row of a group called 'topic').
        if NAME_RE.fullmatch(name) and keys.topic_meta(name) == key:
            names.add(name)
    found = sorted(names)
    out: list[TopicMeta] = []
    for i in range(0, len(found), _PIPELINE_CHUNK):
        chunk = found[i : i + _PIPELINE_CHUNK]
        pipe = r.pipeline(transaction=False)
        for name in chunk:
            pipe.hgetall(keys.topic_meta(name))
        for name, reply in zip(chunk, pipe.execute(), strict=True):
            row = _hash(reply)
            if row:  # else deleted after the SCAN
                out.append(_topic_meta(name, row))
    return out


# -- elections ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidate:
    """A candidate campaigning in an election (waiting to be elected), by server time.

    ``lease_left_ms`` is what is left of its entry in the candidates' register; a campaign
    refreshes it every third of its TTL, so an entry that runs out is a candidate that died.
    """

    label: str
    session: str
    lease_left_ms: int


@dataclass(frozen=True, slots=True)
class ElectionStatus:
    """One election: its row (``"__election__"``, name) and its waiting candidates.

    ``state`` is the row's state as in :class:`OwnerRow`: ``"live"`` (``leader`` leads; its
    lease runs by server time), ``"lapsed"`` (the last leader's lease ended and nobody was
    elected since) or ``"free"`` (resigned or released). ``leader`` is the leader's
    ``candidate_id``, None unless the state is live; ``label`` and ``session`` name the
    row's holder, lapsed or not. ``token`` is the fencing token of the current (or last)
    term and ``since_ms`` when that term began (server ms, 0 if unknown).
    ``candidate_count`` is exact; ``candidates`` lists at most :data:`LIST_LIMIT` of them.
    """

    name: str
    state: str
    leader: str | None
    label: str
    session: str
    token: int
    generation: int
    since_ms: int
    lease_left_ms: int
    expires_ms: int
    candidate_count: int
    candidates: list[Candidate]


def elections(
    r: redis.Redis, keys: Keys, names: Iterable[str] | None = None
) -> list[ElectionStatus]:
    """Every election of the namespace, or those of ``names`` that exist; sorted by name.

    Found with ``SCAN MATCH <ns>:{*}:own:__election__`` like :func:`owners`. A candidate
    counts while its register entry's lease runs by server time.
    """
    if names is None:
        pattern = keys.ownership_pattern(ELECTION_GROUP)
        scanned = (
            keys.ownership_resource(ELECTION_GROUP, text(k))
            for k in r.scan_iter(match=pattern, count=_SCAN_COUNT)
        )
        found = sorted({name for name in scanned if name is not None})
    else:
        found = sorted({validate_name("election name", name) for name in names})
    out: list[ElectionStatus] = []
    for i in range(0, len(found), _PIPELINE_CHUNK):
        chunk = found[i : i + _PIPELINE_CHUNK]
        # The time first: the candidates' count needs it, and the rows are judged by it.
        now = server_time_ms(r)
        live = f"({now}"
        pipe = r.pipeline(transaction=False)
        for name in chunk:
            register = keys.election_candidates(name)
            pipe.hgetall(keys.ownership(ELECTION_GROUP, name))
            pipe.zcount(register, live, "+inf")
            pipe.zrangebyscore(register, live, "+inf", start=0, num=LIST_LIMIT, withscores=True)
        replies = pipe.execute()
        for j, name in enumerate(chunk):
            row, count, listed = replies[3 * j : 3 * j + 3]
            if row:  # else never created, or deleted after the SCAN
                out.append(_election(name, _hash(row), int(count), listed, now))
    return out


def _election(
    name: str, row: dict[str, str], count: int, listed: Sequence[Any], now: int
) -> ElectionStatus:
    base = _owner_row(ELECTION_GROUP, name, row, now)
    candidates: list[Candidate] = []
    for member, score in listed:
        session, _, label = text(member).partition(" ")
        candidates.append(Candidate(label, session, int(score) - now))
    return ElectionStatus(
        name=name,
        state=base.state,
        leader=base.label if base.state == "live" else None,
        label=base.label,
        session=base.session,
        token=base.token,
        generation=base.generation,
        since_ms=_int(row.get("since")),
        lease_left_ms=base.lease_left_ms,
        expires_ms=base.expires_ms,
        candidate_count=count,
        candidates=sorted(candidates, key=lambda c: (c.label, c.session)),
    )


# -- consumer groups ------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class NamespaceStatus:
    """Everything of a namespace at a glance: topics, elections and consumer groups."""

    namespace: str
    server_time_ms: int
    topics: list[TopicMeta]
    elections: list[ElectionStatus]
    groups: list[GroupStatus]


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
    """
    meta = topic_meta(r, keys, topic, where=where)
    wanted = _wanted(meta, partitions)
    pattern = f"{keys.namespace}:{{{encode_resource(meta.name)}/*}}:own:*"
    rows = _consumer_rows(r, keys, pattern)
    return _groups(r, keys, meta, wanted, rows)


def namespace_status(r: redis.Redis, keys: Keys) -> NamespaceStatus:
    """The topics, elections and consumer groups (of every ready topic) of a namespace."""
    now = server_time_ms(r)
    metas = topics(r, keys)
    rows = _consumer_rows(r, keys, f"{keys.namespace}:{{*}}:own:*")
    groups: list[GroupStatus] = []
    for meta in metas:
        if meta.ready:
            groups.extend(_groups(r, keys, meta, range(meta.partitions), rows))
    groups.sort(key=lambda g: (g.group, g.topic))
    return NamespaceStatus(keys.namespace, now, metas, elections(r, keys), groups)


def _consumer_rows(r: redis.Redis, keys: Keys, pattern: str) -> dict[tuple[str, int], set[str]]:
    """The groups with an ownership row on a resource ``"<topic>/<p>"``, per (topic, p)."""
    found: dict[tuple[str, int], set[str]] = {}
    for raw in r.scan_iter(match=pattern, count=_SCAN_COUNT):
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


def _groups(
    r: redis.Redis,
    keys: Keys,
    meta: TopicMeta,
    wanted: Iterable[int],
    rows: dict[tuple[str, int], set[str]],
) -> list[GroupStatus]:
    parts = list(wanted)
    per_group: dict[str, list[GroupPartition]] = {}
    for i in range(0, len(parts), _PIPELINE_CHUNK):
        chunk = parts[i : i + _PIPELINE_CHUNK]
        pipe = r.pipeline(transaction=False)
        pipe.time()
        owners_of: dict[int, list[str]] = {}
        for p in chunk:
            pk = keys.partition(meta.name, p)
            pipe.hmget(pk.meta, ["inc", "start", "next"])
            pipe.hgetall(pk.committed)
            owners_of[p] = sorted(rows.get((meta.name, p), ()))
            for group in owners_of[p]:
                pipe.hgetall(keys.ownership(group, pk.resource))
        replies = iter(pipe.execute())
        seconds, micros = next(replies)
        now = int(seconds) * 1000 + int(micros) // 1000
        for p in chunk:
            inc, start, end = (None if v is None else text(v) for v in next(replies))
            committed = _hash(next(replies))
            owned = {group: _hash(next(replies)) for group in owners_of[p]}
            groups = {g for g in committed if NAME_RE.fullmatch(g)} | {
                g for g, row in owned.items() if row
            }
            for group in groups:
                row = owned.get(group)
                per_group.setdefault(group, []).append(
                    _group_partition(
                        p,
                        present=inc is not None,
                        start=_int(start),
                        end=_int(end),
                        committed=committed.get(group),
                        token=committed.get(group + "#t"),
                        owner=_owner_row(group, f"{meta.name}/{p}", row, now) if row else None,
                    )
                )
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
    offset = None if committed is None else _int(committed)
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
        committed_token=None if token is None else _int(token),
        lag=lag,
        lag_from="start" if offset is None else "committed",
        owner=owner,
        note=note,
    )

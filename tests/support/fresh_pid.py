"""What the fresh-PID reviews (tests/test_review_s9b.py, s9c, s9d) share: the wire
patterns the proxy matches, lease lengths, and helpers that expire a PID's state and read
the log back (their client through the proxy is the ``fclient`` fixture of conftest)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

import fencing
from fencing._lua_loader import script
from fencing._protocol.producer import decode_pid_state
from fencing.faults import Proxy

#: The append script as it appears on the wire: its SHA1 follows EVALSHA.
APPEND = script("append").sha1.encode()
#: The producer-id allocation on the wire (redis-py's incr() sends INCRBY key 1).
INCR = b"$6\r\nINCRBY\r\n"
#: Long: no lease renewal runs inside a test unless it says so.
LEASE_TTL = 60.0
#: With the proxied client's socket timeout (0.5 s), a retry budget of about a second.
SHORT_LEASE = 3.0


def expire(raw: redis.Redis, topic: Any, pid: int, partition: int = 0) -> None:
    """Remove a PID's state on a partition as its expiry would."""
    pk = topic.partition_keys(partition)
    assert raw.hdel(pk.pids, str(pid)) == 1
    raw.zrem(pk.pid_expiry, str(pid))


def log(client: fencing.Client, name: str, partition: int = 0) -> list[tuple[Any, bytes, Any]]:
    """(offset, value, producer id) of every record of a partition."""
    records = client.topic(name).reader(partition, 0).read(max_records=1000)
    return [(r.offset, r.value, r.producer_id) for r in records]


def pid_state(raw: redis.Redis, topic: Any, pid: int, partition: int = 0) -> Any:
    pk = topic.partition_keys(partition)
    stored = raw.hget(pk.pids, str(pid))
    if stored is None:
        return None
    return decode_pid_state(stored, raw.hgetall(pk.window), pid=pid, size=topic.dedup_window)


def issued(raw: redis.Redis, client: Any) -> int:
    """How many producer ids the namespace's counter handed out."""
    return int(raw.get(client.keys.producer_ids()) or 0)


def offsets(mds: list[fencing.RecordMetadata]) -> list[int]:
    return [m.offset for m in mds]


def wait_for(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.001)


def outcome(call: Any) -> Any:
    """What a call returned, or the type and reason of the FencingError it raised."""
    try:
        return call()
    except fencing.FencingError as exc:
        return (type(exc).__name__, getattr(exc, "reason", None))


def lost_then_settled_as_not_landed(p: Any, proxy: Proxy, client: fencing.Client, old: int) -> None:
    """Send ``b`` on partition 0 of topic ``t`` with every reply lost (nothing lands), then
    check it settles as not landed and ``c`` lands next at offset 1: the log is [a, c]."""
    with proxy.drop_replies(APPEND, count=None) as lost, pytest.raises(fencing.OutcomeUnknown):
        p.send_batch([b"b"], partition=0)
    assert lost.hits >= 1
    assert log(client, "t") == [(0, b"a", old)]  # nothing landed, provably
    resolved = outcome(lambda: p.resolve(0))
    sent = outcome(lambda: offsets(p.send_batch([b"c"], partition=0)))
    assert (resolved, sent) == (None, [1])
    assert [v for _, v, _ in log(client, "t")] == [b"a", b"c"]

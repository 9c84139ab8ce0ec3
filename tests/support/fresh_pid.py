"""What the fresh-PID tests (``tests/producers/test_fresh_pid*.py``) share: lease lengths,
and helpers that expire a PID's state at once, read it, and read the log back (their
client through the proxy is the ``fclient`` fixture of conftest).

The expiry is made at once as the expiry itself does it: the PID's entry is removed from
the partition's ``pids`` hash and ``pid_expiry`` index (:func:`expire`); tests that need
the real rule let a real one-second expiry run out instead.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

import fencing
from fencing._protocol.producer import decode_pid_state
from fencing.faults import Proxy

from ..conftest import ServerInfo
from .internals import metadata_of
from .wire import APPEND

#: Long: no lease renewal runs inside a test unless it says so.
LEASE_TTL = 60.0
#: With the proxied client's socket timeout (0.5 s), a retry budget of about a second.
SHORT_LEASE = 3.0


def expire(raw: redis.Redis, topic: Any, pid: int, partition: int = 0) -> None:
    """Remove a PID's state on a partition as its expiry would."""
    pk = metadata_of(topic).partition_keys(partition)
    assert raw.hdel(pk.pids, str(pid)) == 1
    raw.zrem(pk.pid_expiry, str(pid))


def log(client: fencing.Client, name: str, partition: int = 0) -> list[tuple[Any, bytes, Any]]:
    """(offset, value, producer id) of every record of a partition."""
    records = client.topic(name).reader(partition, 0).read(max_records=1000)
    return [(r.offset, r.value, r.producer_id) for r in records]


def pid_state(raw: redis.Redis, topic: Any, pid: int, partition: int = 0) -> Any:
    pk = metadata_of(topic).partition_keys(partition)
    stored = raw.hget(pk.pids, str(pid))
    if stored is None:
        return None
    return decode_pid_state(stored, raw.hgetall(pk.window), pid=pid, size=topic.dedup_window)


def issued(raw: redis.Redis, client: Any) -> int:
    """How many producer ids the namespace's counter handed out."""
    return int(raw.get(client.keys.producer_ids()) or 0)


def offsets(mds: list[fencing.RecordMetadata]) -> list[int]:
    return [m.offset for m in mds]


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


def plain_log(server: ServerInfo, namespace: str) -> list[Any]:
    """The records of topic ``t``, partition 0, read with a client of its own (not through
    any proxy)."""
    with fencing.Client.from_url(server.url, namespace=namespace) as c:
        return c.topic("t").reader(0, 0).read(max_records=100)

"""The sync driver's script path on held connections: NOSCRIPT recovery, connections after a
lost reply, and fork safety. Against real servers."""

from __future__ import annotations

import os
import time

import pytest
import redis

import fencing
from fencing import AccessMode

from .conftest import ServerInfo


def _calls(raw: redis.Redis, command: str) -> int:
    stats = raw.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def test_a_flushed_script_cache_costs_one_eval_then_evalsha_again(
    own: tuple[fencing.Client, redis.Redis],
) -> None:
    client, raw = own
    topic = client.topic("t", partitions=1)
    with topic.producer(AccessMode.EXCLUSIVE) as producer:
        assert producer.send(b"a").offset == 0
        raw.script_flush()
        raw.config_resetstat()
        assert producer.send(b"b").offset == 1  # NOSCRIPT, answered by one EVAL
        assert producer.send(b"c").offset == 2  # cached again: EVALSHA only
        assert _calls(raw, "eval") == 1
        assert _calls(raw, "evalsha") == 2  # the refused one and the last one
    values = [r.value for r in topic.reader(0, "earliest").read()]
    assert values == [b"a", b"b", b"c"]


def test_a_reply_that_arrives_after_the_timeout_is_never_read_as_another_calls(
    fresh_server: ServerInfo, namespace: str
) -> None:
    # The server is blocked (DEBUG SLEEP) while a send is on the wire: the send times out,
    # the library retries, and the first attempt's reply arrives late on the old socket.
    # Were that connection put back on the driver's stack and reused without a reconnect
    # (redis-py disconnects on a read timeout; the driver also does on any interruption),
    # the next send would read the late reply (offset 0) as its own.
    client = fencing.Client.from_url(fresh_server.url, namespace=namespace)
    topic = client.topic("t", partitions=1)
    producer = topic.producer(AccessMode.EXCLUSIVE, lease_ttl=3.0)
    blocker = redis.Redis.from_url(fresh_server.url)
    probe = redis.Redis.from_url(fresh_server.url, socket_timeout=0.05)
    blocker.connection_pool.get_connection().send_command("DEBUG", "SLEEP", "1.0")
    deadline = time.monotonic() + 5
    while True:  # wait until the server is really blocked
        try:
            probe.ping()
        except redis.exceptions.TimeoutError:
            break
        assert time.monotonic() < deadline, "the server never blocked"
    first = producer.send(b"first")  # times out, then a retry lands once the server wakes
    mds = [producer.send(f"v{i}".encode()) for i in range(20)]
    assert first.offset == 0
    assert [m.offset for m in mds] == list(range(1, 21))
    producer.close()
    records = topic.reader(0, "earliest").read()
    assert [r.value for r in records] == [b"first"] + [f"v{i}".encode() for i in range(20)]
    client.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_uses_the_parents_held_connections(
    server: ServerInfo, namespace: str
) -> None:
    client = fencing.Client.from_url(server.url, namespace=namespace)
    topic = client.topic("t", partitions=1)
    topic.open()
    driver = client._driver(client._budget_default().timeout)
    # Warm the held-connection stack in the parent.
    client.ownership("g", "parent", ttl=10).claim(["r"])
    parent_idle = list(driver._idle)
    assert parent_idle
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            conn = driver._connection()
            ok = all(conn is not c for c in parent_idle)
            os.write(write_end, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 1)
    os.waitpid(pid, 0)
    os.close(read_end)
    assert answer == b"1"
    client.close()

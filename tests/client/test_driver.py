"""The sync driver's script path: NOSCRIPT recovery, connections after a late reply, the
pool's connection limit, and connections the server closed while idle. Against real
servers."""

from __future__ import annotations

import os
import threading
import time

import pytest
import redis
from redis.credentials import UsernamePasswordCredentialProvider

import fencing
from fencing import AccessMode, Client
from fencing._runtime.threads.connections import ScriptConnections
from tests.support.internals import context_of

from ..conftest import ServerInfo
from ..support.polling import wait_until


def _calls(raw: redis.Redis, command: str) -> int:
    stats = raw.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def test_a_flushed_script_cache_is_loaded_again_and_the_send_lands_once(
    own: tuple[fencing.Client, redis.Redis],
) -> None:
    client, raw = own
    topic = client.topic("t", partitions=1)
    with topic.producer(AccessMode.EXCLUSIVE) as producer:
        assert producer.send(b"a").offset == 0
        raw.script_flush()
        raw.config_resetstat()
        assert producer.send(b"b").offset == 1  # NOSCRIPT: SCRIPT LOAD, then EVALSHA again
        assert producer.send(b"c").offset == 2  # cached again: EVALSHA only
        assert _calls(raw, "script|load") == 1
        assert _calls(raw, "eval") == 0  # never the full source per call
        assert _calls(raw, "evalsha") == 3  # the refused one, its repeat, the last one
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
    _block_server(fresh_server.url, 1.0)
    first = producer.send(b"first")  # times out, then a retry lands once the server wakes
    mds = [producer.send(f"v{i}".encode()) for i in range(20)]
    assert first.offset == 0
    assert [m.offset for m in mds] == list(range(1, 21))
    producer.close()
    records = topic.reader(0, "earliest").read()
    assert [r.value for r in records] == [b"first"] + [f"v{i}".encode() for i in range(20)]
    client.close()


def _block_server(url: str, seconds: float) -> None:
    """Make the server sleep, and return once it really is blocked (polled, not slept)."""
    redis.Redis.from_url(url).connection_pool.get_connection().send_command(
        "DEBUG", "SLEEP", str(seconds)
    )
    probe = redis.Redis.from_url(url, socket_timeout=0.05)
    deadline = time.monotonic() + 5
    while True:
        try:
            probe.ping()
        except redis.exceptions.TimeoutError:
            return
        assert time.monotonic() < deadline, "the server never blocked"


def test_sends_in_flight_together_under_a_connection_limit_leave_the_pool_usable(
    fresh_server: ServerInfo, namespace: str
) -> None:
    # Every script call checks a connection out of the client's pool and gives it back:
    # two sends in flight at once (the server is blocked meanwhile) must not keep the
    # pool's two connections after they finish, or every later call finds none.
    base = redis.Redis.from_url(fresh_server.url, max_connections=2)
    client = fencing.Client(base, namespace=namespace)
    topic = client.topic("t", partitions=2)  # one partition each: sends are not serialised
    producer = topic.producer(AccessMode.SHARED, lease_ttl=30.0)
    _block_server(fresh_server.url, 0.5)
    threads = [
        threading.Thread(target=producer.send, args=(f"v{p}".encode(),), kwargs={"partition": p})
        for p in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    # A read through the same pool still gets a connection, and so does a new producer id.
    assert [topic.offsets(p) for p in range(2)] == [(0, 1), (0, 1)]
    assert client.topic("t2", partitions=1).producer().send(b"x").offset == 0
    assert [r.value for p in range(2) for r in topic.reader(p, "earliest").read()] == [
        b"v0",
        b"v1",
    ]
    producer.close()
    client.close()


def test_a_connection_the_server_closed_while_idle_keeps_refusals_definite(
    fresh_server: ServerInfo, namespace: str
) -> None:
    # The server drops idle clients after 1 s. The next call must not be written into the
    # dead socket and retried: a refusal after a retry is ambiguous (OutcomeUnknown), while
    # a conditional append with a stale offset is definitely refused (OffsetMismatch).
    raw = redis.Redis.from_url(fresh_server.url)
    client = fencing.Client.from_url(fresh_server.url, namespace=namespace)
    producer = client.topic("t", partitions=1).producer(AccessMode.EXCLUSIVE, lease_ttl=30.0)
    producer.send(b"a")
    producer.send(b"b")
    raw.config_set("timeout", 1)
    me = raw.client_id()

    def ours_connected() -> bool:  # the server is this test's own: every other client is ours
        return any(c["id"] != str(me) and "P" not in c["flags"] for c in raw.client_list())

    deadline = time.monotonic() + 10
    while ours_connected():  # the server closes idle connections (not pub/sub) within seconds
        assert time.monotonic() < deadline, "the server never closed the idle connection"
        time.sleep(0.05)
    with pytest.raises(fencing.OffsetMismatch) as info:
        producer.send(b"stale", expected_offset=1)
    assert (info.value.expected, info.value.actual) == (1, 2)
    raw.config_set("timeout", 0)
    producer.close()
    client.close()


def test_a_client_with_a_credential_provider_releases_every_connection_to_its_pool(
    server: ServerInfo, namespace: str
) -> None:
    # The pool re-authenticates connections on release (streaming credentials): such a
    # client's script connections go back to the pool after every call.
    provider = UsernamePasswordCredentialProvider("default", "any")  # nopass: any password
    base = redis.Redis.from_url(server.url, credential_provider=provider)
    client = fencing.Client(base, namespace=namespace)
    producer = client.topic("t", partitions=1).producer(AccessMode.EXCLUSIVE)
    assert [producer.send(b"x").offset for _ in range(3)] == [0, 1, 2]
    driver = context_of(client).driver(producer._calls.budget.timeout)
    connections = driver._scripts
    assert connections._stack == []
    assert connections.pool._in_use_connections == set()  # type: ignore[attr-defined]
    producer.close()
    client.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_takes_its_parents_script_connections(server: ServerInfo) -> None:
    pool = redis.ConnectionPool.from_url(server.url)
    connections = ScriptConnections(pool)
    first = connections.checkout()
    first.send_command("PING")
    assert first.read_response() in (b"PONG", "PONG")
    connections.checkin(first)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.write(write_end, b"1" if connections.checkout() is not first else b"0")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 1)
    os.waitpid(pid, 0)
    os.close(read_end)
    assert answer == b"1"
    assert connections.checkout() is first  # the parent still reuses its own
    connections.close()


def test_server_refusals_are_typed_and_apply_nothing(own: tuple[Client, redis.Redis]) -> None:
    client, raw = own
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    producer.send(b"a")
    raw.config_set("maxmemory", 1)  # under noeviction every write is refused: OOM
    try:
        with pytest.raises(fencing.Unavailable, match="applied nothing"):
            producer.send(b"b")
        with pytest.raises(fencing.Unavailable):
            client.ownership("g", "host-a", ttl=10).claim("r")
    finally:
        raw.config_set("maxmemory", 0)
    assert [r.value for r in topic.reader(0, 0).read()] == [b"a"]


def test_blocking_reads_and_lease_lengths_do_not_make_a_pool_each(
    server: ServerInfo, namespace: str
) -> None:
    client = Client.from_url(server.url, namespace=namespace, socket_timeout=0.2)
    try:
        topic = client.topic("t", partitions=1)
        reader = topic.reader(0)
        for block_ms in range(1, 21):
            assert reader.read(block_ms=block_ms) == []
        for i in range(20):
            topic.producer(lease_ttl=1.0 + i / 100).close()
        # One driver for the client's default timeout, and the few lease-derived steps.
        assert len(context_of(client).drivers._drivers) <= 3, sorted(
            context_of(client).drivers._drivers
        )

        # A read blocks longer than the socket timeout, across steps, and gets the record.
        got: list[list[fencing.Record]] = []
        thread = threading.Thread(target=lambda: got.append(reader.read(block_ms=10_000)))
        thread.start()
        r = redis.Redis.from_url(server.url)
        wait_until(lambda: r.info("clients")["blocked_clients"] >= 1)
        time.sleep(0.5)  # pacing: well past one blocking step (0.1 s)
        topic.producer().send(b"late")
        thread.join(15)
        r.close()
        assert [rec.value for rec in got[0]] == [b"late"]
    finally:
        client.close()

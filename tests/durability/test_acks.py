"""Durability per handle (``acks``), written once for both flavours, on a primary with one
replica of each server kind: a wait that falls short is NotEnoughReplicas, never a success."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

import fencing
import fencing.aio
from fencing import AccessMode
from fencing.acl import acl_rule
from fencing.embedded import EmbeddedServer

from ..conftest import ServerInfo
from ..support.flavours import Api
from ..support.logs import read_values
from ..support.polling import wait_until

#: Also on Redis 8: WAIT and WAITAOF (Redis 7.0 has no WAITAOF).
pytestmark = pytest.mark.server_specific


@dataclass
class Pair:
    primary: EmbeddedServer
    replica: EmbeddedServer


#: A replica syncs at once (the default waits 5 s for more replicas to share a transfer).
_NO_SYNC_DELAY = ("--repl-diskless-sync-delay", "0")


@pytest.fixture
def pair(server: ServerInfo) -> Iterator[Pair]:
    """A primary and its replica, of the kind of the test's server."""
    if not server.owned:
        pytest.skip("needs servers the suite starts (FENCING_TEST_REDIS_URL is set)")
    kind = server.kind
    with EmbeddedServer.start(kind, extra_args=_NO_SYNC_DELAY) as primary:  # type: ignore[arg-type]
        replica_of = ("--replicaof", "127.0.0.1", str(primary.port))
        with EmbeddedServer.start(kind, extra_args=replica_of) as replica:  # type: ignore[arg-type]
            r = redis.Redis(port=replica.port, socket_timeout=5)
            deadline = time.monotonic() + 15
            while r.info("replication").get("master_link_status") != "up":
                assert time.monotonic() < deadline, "the replica never synced"
                time.sleep(0.02)
            r.close()
            yield Pair(primary, replica)


async def caught_up(pair: Pair) -> None:
    """Wait until the replica (just resumed) acknowledged everything the primary wrote."""
    r = redis.Redis(port=pair.primary.port, socket_timeout=5)
    try:
        deadline = time.monotonic() + 15
        while True:
            info = r.info("replication")
            replica = info.get("slave0") or {}
            if replica.get("offset") == info["master_repl_offset"] and replica.get("lag", 9) <= 1:
                return
            assert time.monotonic() < deadline, "the replica never caught up"
            await asyncio.sleep(0.02)
    finally:
        r.close()


def replica_values(pair: Pair, api: Api, topic: str) -> list[bytes]:
    r = redis.Redis(port=pair.replica.port, socket_timeout=5)
    try:
        entries = r.xrange(f"{api.namespace}:{{{topic}/0}}:log")
        return [fields[b"v"] for _, fields in entries]  # type: ignore[index, union-attr]
    finally:
        r.close()


async def test_replicated_sends_are_on_the_replica_when_acknowledged(api: Api, pair: Pair) -> None:
    topic = api.client(pair.primary.url).topic("t", partitions=1)
    async with await topic.producer(AccessMode.EXCLUSIVE, acks="replicated") as producer:
        offsets = [(await producer.send(f"v{i}".encode())).offset for i in range(5)]
        # Acknowledged means copied: the replica has every record already.
        assert replica_values(pair, api, "t") == [f"v{i}".encode() for i in range(5)]
    assert offsets == [0, 1, 2, 3, 4]


async def test_a_wait_that_falls_short_is_not_enough_replicas_then_settled(
    api: Api, pair: Pair
) -> None:
    topic = api.client(pair.primary.url).topic("t", partitions=1)
    producer = await topic.producer(AccessMode.EXCLUSIVE, acks="replicated", lease_ttl=8.0)
    await producer.send(b"a")
    os.kill(pair.replica.process.pid, signal.SIGSTOP)
    try:
        with pytest.raises(fencing.NotEnoughReplicas) as err:
            await producer.send(b"b")
        assert isinstance(err.value, fencing.OutcomeUnknown)
        assert (err.value.acks, err.value.wanted, err.value.confirmed) == ("replicated", 1, 0)
    finally:
        os.kill(pair.replica.process.pid, signal.SIGCONT)
    await caught_up(pair)
    md = await producer.send(b"c")  # the pending batch is settled first: it had landed
    assert producer.last_resolution is not None
    assert producer.last_resolution[1] is not None
    assert md.offset == 2
    reader = await topic.reader(0)
    assert [r.value for r in await reader.read()] == [b"a", b"b", b"c"]
    await producer.close()


async def test_a_replicated_claim_that_falls_short_is_not_held(api: Api, pair: Pair) -> None:
    client = api.client(pair.primary.url)
    owner = client.ownership("g", "a", ttl=8.0, acks="replicated")
    os.kill(pair.replica.process.pid, signal.SIGSTOP)
    try:
        with pytest.raises(fencing.NotEnoughReplicas):
            await owner.claim("r")
    finally:
        os.kill(pair.replica.process.pid, signal.SIGCONT)
    assert owner.grants == {}
    await caught_up(pair)
    other = client.ownership("g", "b", ttl=8.0, acks="replicated")
    assert (await other.claim("r"))["r"].token == 2  # given back at once, not at lapse
    await other.close()
    await owner.close()


def has_waitaof(r: redis.Redis) -> bool:
    try:
        r.execute_command("WAITAOF", 0, 0, 0)
    except redis.exceptions.ResponseError:
        return False
    return True


async def test_fsync_needs_waitaof_and_the_append_only_file(api: Api, pair: Pair) -> None:
    topic = api.client(pair.primary.url).topic("t", partitions=1)
    r = redis.Redis(port=pair.primary.port, socket_timeout=5)
    waitaof = has_waitaof(r)
    with pytest.raises(
        fencing.ConfigurationError, match="WAITAOF" if not waitaof else "appendonly"
    ):
        await topic.producer(acks="fsync")
    if waitaof:
        r.config_set("appendonly", "yes")
        r.config_set("appendfsync", "always")
        async with await topic.producer(acks="fsync") as producer:
            assert (await producer.send(b"durable")).offset == 0
    r.close()


@pytest.fixture
def aof_server(fresh_server: ServerInfo) -> Iterator[redis.Redis]:
    """A server of the test's own with WAITAOF and the append-only file (``everysec``)."""
    r = redis.Redis.from_url(fresh_server.url, socket_timeout=5)
    if not has_waitaof(r):
        r.close()
        pytest.skip(f"{fresh_server.kind} here has no WAITAOF (Redis/Valkey 7.2+)")
    r.config_set("appendonly", "yes")
    assert r.config_get("appendfsync") == {"appendfsync": "everysec"}
    yield r
    r.close()


async def test_fsync_under_appendfsync_everysec_on_redis_needs_a_wait_of_over_a_second(
    api: Api, fresh_server: ServerInfo, aof_server: redis.Redis
) -> None:
    """Under ``appendfsync everysec`` Redis 8 answers ``WAITAOF 1 0`` only at its
    once-a-second fsync (up to a second after the write), while Valkey 8 fsyncs at once for
    a waiting WAITAOF: on Redis a handle whose wait is shorter is refused at open, saying
    what to change; on Valkey it is confirmed; a handle that waits over a second is confirmed
    on both."""
    short = api.client(fresh_server.url)  # wait: half of min(2 s, 10 s / 8) = 595 ms
    topic = short.topic("t", partitions=1)
    if fresh_server.kind == "valkey":
        async with await topic.producer(acks="fsync") as producer:
            assert (await producer.send(b"at once")).offset == 0
        return
    with pytest.raises(fencing.ConfigurationError, match=r"appendfsync 'everysec'.* 595 ms"):
        await topic.producer(acks="fsync")
    with pytest.raises(fencing.ConfigurationError, match=r"appendfsync 'everysec'"):
        await short.ownership("g", "a", acks="fsync").claim("r")
    # (The socket step min(3 s, 24 s / 8), rounded down to its ladder: 2.83 s.)
    patient = api.client(fresh_server.url, socket_timeout=3.0)
    topic = patient.topic("t", partitions=1)
    async with await topic.producer(acks="fsync", lease_ttl=24.0) as producer:
        assert producer.durability.timeout_ms == 1414
        offsets = [(await producer.send(f"v{i}".encode())).offset for i in range(2)]
    assert offsets == [0, 1]


async def test_fsync_under_appendfsync_no_is_refused(
    api: Api, fresh_server: ServerInfo, aof_server: redis.Redis
) -> None:
    """Under ``appendfsync no`` the server never fsyncs itself and WAITAOF never confirms
    one: acks='fsync' is refused at open, whatever the wait."""
    aof_server.config_set("appendfsync", "no")
    client = api.client(fresh_server.url, socket_timeout=3.0)
    with pytest.raises(fencing.ConfigurationError, match=r"appendfsync 'no'.* no wait ever"):
        await client.topic("t", partitions=1).producer(acks="fsync", lease_ttl=24.0)


def test_a_write_whose_fsync_wait_the_server_refuses_is_unknown_and_then_settled(
    fresh_server: ServerInfo, aof_server: redis.Redis
) -> None:
    """The append lands, then the server refuses its WAITAOF (appendonly turned off since
    the open): the send's outcome is unknown (NotEnoughReplicas), never a refusal that
    wrote nothing, so the next send settles it as landed and goes on after it."""
    aof_server.config_set("appendfsync", "always")
    client = fencing.Client.from_url(fresh_server.url, namespace="refused-wait")
    topic = client.topic("t", partitions=1)
    try:
        with topic.producer(acks="fsync") as p:
            assert p.send(b"a", partition=0).offset == 0
            aof_server.config_set("appendonly", "no")
            with pytest.raises(fencing.NotEnoughReplicas, match="refused"):
                p.send(b"x", partition=0)
            aof_server.config_set("appendonly", "yes")
            assert p.send(b"y", partition=0).offset == 2
        assert read_values(client, "t", 0) == [b"a", b"x", b"y"]
    finally:
        client.close()


def test_fsync_works_for_a_user_with_the_librarys_own_acl_rule(
    fresh_server: ServerInfo, aof_server: redis.Redis
) -> None:
    """The ACL rule the library documents grants no INFO: the open-time check still opens
    (it cannot tell the server's kind, so each write's wait is the judge)."""
    aof_server.config_set("appendfsync", "always")
    aof_server.execute_command("ACL", "SETUSER", "fen", *acl_rule("acl", password="pw"))
    url = fresh_server.url.replace("redis://", "redis://fen:pw@", 1)
    client = fencing.Client.from_url(url, namespace="acl")
    try:
        with client.topic("t", partitions=1).producer(acks="fsync") as p:
            assert p.send(b"durable", partition=0).offset == 0
    finally:
        client.close()


def test_fsync_where_config_is_renamed_opens_and_each_wait_is_the_judge() -> None:
    """A server with CONFIG renamed away (as managed services do): the configuration cannot
    be read, so the handle opens and each write's WAITAOF says whether it was fsynced."""
    args = ("--appendonly", "yes", "--appendfsync", "always", "--rename-command", "CONFIG", "")
    try:
        server = EmbeddedServer.start("valkey", extra_args=args)
    except RuntimeError as exc:  # pragma: no cover - no valkey binary here
        pytest.skip(f"no valkey-server: {exc}")
    with server:
        client = fencing.Client.from_url(server.url, namespace="ns", allow_eviction=True)
        try:
            with client.topic("t", partitions=1).producer(acks="fsync") as p:
                assert p.send(b"durable", partition=0).offset == 0
        finally:
            client.close()


async def test_bad_acks_are_refused_before_any_io(api: Api) -> None:
    client = api.client()
    with pytest.raises(fencing.InvalidArgument):
        await client.topic("t", partitions=1).producer(acks="all")
    with pytest.raises(fencing.InvalidArgumentType):
        client.ownership("g", "a", acks=2)
    with pytest.raises(fencing.InvalidArgument):
        client.election("e", "a", acks="quorum")


@pytest.fixture
def valkey_pair() -> Iterator[tuple[EmbeddedServer, EmbeddedServer]]:
    """A Valkey master (DEBUG enabled) and a replica of it, online."""
    try:
        master = EmbeddedServer.start(
            "valkey", extra_args=("--enable-debug-command", "yes", *_NO_SYNC_DELAY)
        )
    except Exception as exc:  # pragma: no cover - no valkey binary here
        pytest.skip(f"no valkey-server: {exc}")
    with master, EmbeddedServer.start("valkey") as replica:
        with redis.Redis(port=replica.port) as r:
            r.replicaof("127.0.0.1", master.port)
        with redis.Redis(port=master.port, decode_responses=True) as m:
            for _ in range(200):
                slave = m.info("replication").get("slave0")
                if isinstance(slave, dict) and slave.get("state") == "online":
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the replica did not come online")
        yield master, replica


def send_replicated(producer: fencing.Producer, master: EmbeddedServer, value: bytes) -> None:
    """Send ``value`` to partition 0 and see the replica acknowledge it, however slow the
    machine: the handle's own wait (half its request timeout) can end before a busy
    replica's acknowledgement; the record then settles once the replica has caught up with
    what the master had when the send returned, and nothing stays pending."""
    try:
        producer.send(value, partition=0)
    except fencing.NotEnoughReplicas:
        pass
    else:
        return
    with redis.Redis(port=master.port, decode_responses=True) as m:
        written = m.info("replication")["master_repl_offset"]

        def caught_up() -> bool:
            slave = m.info("replication").get("slave0")
            return isinstance(slave, dict) and slave["offset"] >= written

        wait_until(caught_up, timeout=15.0, interval=0.05, what="the replica caught up")

    def settled() -> bool:
        try:
            producer.resolve(0)  # the record landed: its metadata, or None once settled
        except fencing.NotEnoughReplicas:
            return False
        return True

    wait_until(settled, timeout=15.0, interval=0.05, what="the warm-up send settled")


def test_a_deduplicated_retry_is_not_reported_replicated(
    valkey_pair: tuple[EmbeddedServer, EmbeddedServer],
) -> None:
    """acks='replicated', the replica stopped (SIGSTOP): the first attempt of a send runs on the
    primary but its reply is late (the server is busy: DEBUG SLEEP), the driver resends on a new
    connection and the append script finds the batch in the duplicate window. The send is never
    reported replicated for a record no replica has: it raises NotEnoughReplicas or
    OutcomeUnknown (a WAIT counts only its own connection's writes, and the duplicate wrote
    nothing)."""
    master, replica = valkey_pair
    client = fencing.Client.from_url(master.url, namespace="dup")
    producer = client.topic("t", partitions=1).producer(lease_ttl=4.0, acks="replicated")
    send_replicated(producer, master, b"warm")
    os.kill(replica.process.pid, signal.SIGSTOP)
    sleeper = threading.Thread(
        target=lambda: redis.Redis(port=master.port).execute_command("DEBUG", "SLEEP", 1.2)
    )
    try:
        sleeper.start()
        time.sleep(0.05)
        try:
            md = producer.send(b"x", partition=0)
        except fencing.OutcomeUnknown:
            pass  # NotEnoughReplicas or OutcomeUnknown: honest
        else:
            with redis.Redis(port=master.port, decode_responses=True) as m:
                acked = m.info("replication")["slave0"]
            pytest.fail(
                f"send with acks='replicated' returned {md} while the only replica was "
                f"stopped and never received it (replica ack: {acked})"
            )
    finally:
        sleeper.join()
        os.kill(replica.process.pid, signal.SIGCONT)
        producer.close()
        client.close()


def test_resolve_after_not_enough_replicas_still_waits(
    valkey_pair: tuple[EmbeddedServer, EmbeddedServer],
) -> None:
    """acks='replicated' and a stopped replica: send raises NotEnoughReplicas, and
    ``producer.resolve(p)`` waits for the replicas too: it never answers "landed once, here are
    its offsets" for a batch no replica has (a failover would still lose it)."""
    master, replica = valkey_pair
    client = fencing.Client.from_url(master.url, namespace="res")
    producer = client.topic("t", partitions=1).producer(lease_ttl=4.0, acks="replicated")
    send_replicated(producer, master, b"warm")
    os.kill(replica.process.pid, signal.SIGSTOP)
    try:
        with pytest.raises(fencing.NotEnoughReplicas):
            producer.send(b"x", partition=0)
        try:
            landed = producer.resolve(0)
        except fencing.OutcomeUnknown:
            return  # still short: honest
        pytest.fail(f"resolve() reported {landed} as landed; no replica has it")
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)
        producer.close()
        client.close()

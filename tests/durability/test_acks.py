"""Durability per handle (``acks``), written once for both flavours, on a primary with one
replica of each server kind: a wait that falls short is NotEnoughReplicas, never a success."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

import fencing
from fencing import AccessMode
from fencing.embedded import EmbeddedServer

from ..conftest import ServerInfo
from ..support.flavours import Api


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
    assert producer.last_resolution is not None and producer.last_resolution[1] is not None
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


async def test_fsync_needs_waitaof_and_the_append_only_file(api: Api, pair: Pair) -> None:
    topic = api.client(pair.primary.url).topic("t", partitions=1)
    r = redis.Redis(port=pair.primary.port, socket_timeout=5)
    try:
        r.execute_command("WAITAOF", 0, 0, 0)
        has_waitaof = True
    except redis.exceptions.ResponseError:
        has_waitaof = False
    with pytest.raises(
        fencing.ConfigurationError, match="WAITAOF" if not has_waitaof else "appendonly"
    ):
        await topic.producer(acks="fsync")
    if has_waitaof:
        r.config_set("appendonly", "yes")
        async with await topic.producer(acks="fsync") as producer:
            assert (await producer.send(b"durable")).offset == 0
    r.close()


async def test_bad_acks_are_refused_before_any_io(api: Api) -> None:
    client = api.client()
    with pytest.raises(fencing.InvalidArgument):
        await client.topic("t", partitions=1).producer(acks="all")
    with pytest.raises(fencing.InvalidArgumentType):
        client.ownership("g", "a", acks=2)
    with pytest.raises(fencing.InvalidArgument):
        client.election("e", "a", acks="quorum")

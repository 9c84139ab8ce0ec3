"""FLUSHALL on every primary of the cluster while producers, owners, consumers and an
election are live: every handle raises StateLost (or is fenced), and nothing is written
after (G9)."""

from __future__ import annotations

import asyncio

import pytest
import redis

import fencing
from fencing import AccessMode
from fencing.embedded import EmbeddedCluster

from ..support.flavours import Api

#: Also on Redis 8: FLUSHALL on every primary of a Redis 8 cluster.
pytestmark = pytest.mark.server_specific

LOST = (fencing.StateLost, fencing.Fenced, fencing.LeaseExpired)


async def test_flushall_on_every_primary_is_state_lost_for_every_handle(
    api: Api, cluster: EmbeddedCluster | None
) -> None:
    if cluster is None:
        pytest.skip("flushes every primary: needs a cluster the suite starts")
    client = api.client()
    topic = client.topic("t", partitions=6)
    producer = await topic.producer(AccessMode.EXCLUSIVE)
    for p in range(6):
        await producer.send(b"before", partition=p)
    owner = client.ownership("g", "a", ttl=10.0)
    await owner.claim(["r1", "r2", "r3"])
    consumer = await topic.consumer("readers", "m", [0, 1])
    assert len(await consumer.poll()) == 2
    await consumer.commit()
    election = client.election("e", "c", ttl=3.0)
    async with election.campaign() as term:
        for node in cluster.nodes[: cluster.masters]:
            with redis.Redis(port=node.port) as r:
                r.flushall()
        for p in range(6):
            with pytest.raises(fencing.StateLost):
                await producer.send(b"after", partition=p)
        for resource in ("r1", "r2", "r3"):
            with pytest.raises(fencing.StateLost):
                await owner.check(resource)
        with pytest.raises(fencing.StateLost):
            await consumer.commit({0: 1})
        # The leader's renewal finds its row gone: the term ends here, before its lease.
        assert await term.lost.wait(3.0)
        with pytest.raises(LOST):
            await term.check()
    # Nothing was written after the flush: no partition, stream or row came back.
    for node in cluster.nodes[: cluster.masters]:
        with redis.Redis(port=node.port) as r:
            left = [
                k for k in r.scan_iter(match=f"{api.namespace}:*") if b":log" in k or b":part" in k
            ]
            assert left == []
    await consumer.close()
    await owner.close()
    await producer.close()
    await asyncio.sleep(0)

"""Producers bound to an election term on a 3-master cluster, with the guarded topic's
partitions on other slots (and nodes) than the election's row: a new term fences every
partition before its campaign() returns, a lower token is refused there, and nobody outside
the election opens the topic."""

from __future__ import annotations

import pytest
import redis
from redis.cluster import RedisCluster

import fencing
from fencing._keys import ELECTION_GROUP
from fencing._lua_loader import script

from ..conftest import ServerInfo

#: Also on Redis 8: the scripts in their own slots, sharded pub/sub.
pytestmark = pytest.mark.server_specific

PARTITIONS = 6


def test_a_new_term_fences_every_partition_on_every_node_before_campaign_returns(
    server: ServerInfo, namespace: str
) -> None:
    rc = RedisCluster.from_url(server.url.replace("+cluster", ""), decode_responses=True)
    client = fencing.Client.from_url(server.url, namespace=namespace)
    topic = client.topic("decisions", partitions=PARTITIONS)
    row_key = client.keys.ownership(ELECTION_GROUP, "sched")
    owners = [client.keys.partition("decisions", p).owner for p in range(PARTITIONS)]
    row_node = rc.get_node_from_key(row_key).name
    nodes = {rc.get_node_from_key(k).name for k in owners}
    assert len(nodes - {row_node}) >= 1 and len(nodes) >= 2

    first = client.election("sched", "one", ttl=5.0)
    with first.campaign() as term, term.producer(topic) as producer:
        mds = [producer.send(b"a", partition=p) for p in range(PARTITIONS)]
        assert {md.epoch for md in mds} == {1}
    second = client.election("sched", "two", ttl=5.0)
    with second.campaign() as term2:
        assert term2.token == 2
        for key in owners:
            assert rc.hmget(key, "token", "session", "guard") == ["2", "", "sched"]
        # A deposed term's open at a lower token is refused on every node.
        pk = client.keys.partition("decisions", PARTITIONS - 1)
        keys = (pk.owner, pk.shared, pk.waiters, pk.waiting_leases, pk.meta)
        args = ("old", "old", "term", 10_000, "inc", "", "", pk.session_prefix, pk.released,
                "0", rc.hget(pk.meta, "inc"), "sched", 1)  # fmt: skip
        with pytest.raises(redis.ResponseError, match="PRODUCER_FENCED 1 2 term-ended"):
            rc.eval(script("producer_open").source, 5, *keys, *args)
        with pytest.raises(fencing.ProducerBusy, match="guarded by election 'sched'"):
            topic.producer(access_mode=fencing.AccessMode.EXCLUSIVE_WITH_FENCING)
        with term2.producer(topic) as producer2:
            mds = [producer2.send(b"b", partition=p) for p in range(PARTITIONS)]
            assert [(md.offset, md.epoch) for md in mds] == [(1, 2)] * PARTITIONS
    first.close()
    second.close()
    client.close()
    rc.close()

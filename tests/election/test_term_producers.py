"""Producers bound to an election term (``leadership.producer(topic)``), written once for
both flavours: the term's token is the guarded topic's epoch, a later term fences the topic
before its campaign returns, an ended term never writes again, and nobody outside the
election opens a producer there."""

from __future__ import annotations

import pytest
import redis

import fencing
from fencing._keys import ELECTION_GROUP
from fencing.faults import Proxy

from ..support.flavours import Api
from ..support.polling import wait_until


def row(raw: redis.Redis, client_keys: fencing.Client, topic: str, p: int) -> dict[str, str]:
    """The exclusive-producer row of a partition, as text."""
    key = client_keys.keys.partition(topic, p).owner
    return {k.decode(): v.decode() for k, v in raw.hgetall(key).items()}


async def test_the_terms_token_is_the_epoch_and_a_later_term_fences_at_its_grant(
    api: Api, client: fencing.Client, raw: redis.Redis
) -> None:
    c = api.client()
    topic = c.topic("decisions", partitions=2)
    first = c.election("sched", "one", ttl=5.0)
    second = c.election("sched", "two", ttl=5.0)
    async with first.campaign() as term:
        assert term.token == 1
        async with term.producer(topic) as producer:
            assert producer.token == 1
            md = await producer.send(b"a", partition=1)
            assert (md.partition, md.offset, md.epoch) == (1, 0, 1)
            assert [producer.epoch(0), producer.epoch(1)] == [1, 1]
    # Resigned: the producer was closed with the term.
    with pytest.raises(fencing.InvalidArgument, match="closed"):
        await producer.send(b"late", partition=1)
    async with second.campaign() as term2:
        assert term2.token == 2
        # Fenced at the grant, before campaign() returned, though no producer was opened.
        for p in (0, 1):
            stored = row(raw, client, "decisions", p)
            assert (stored["token"], stored["session"], stored["guard"]) == ("2", "", "sched")
        async with term2.producer(topic) as producer2:
            md = await producer2.send(b"b", partition=1)
            assert (md.offset, md.epoch) == (1, 2)
    reader = await topic.reader(partition=1, start_offset=0, end_offset="latest")
    records = await reader.read(max_records=10)
    assert [(r.value, r.epoch) for r in records] == [(b"a", 1), (b"b", 2)]
    await first.close()
    await second.close()
    await c.close()


async def test_opens_from_outside_the_election_are_refused_naming_it(api: Api) -> None:
    c = api.client()
    topic = c.topic("decisions", partitions=1)
    election = c.election("sched", "one", ttl=5.0)
    guarded = "guarded by election 'sched'"
    async with election.campaign() as term, term.producer(topic):
        for mode in fencing.AccessMode:
            with pytest.raises(fencing.ProducerBusy, match=guarded) as info:
                await topic.producer(access_mode=mode, wait_timeout=1.0)
            assert (info.value.reason, info.value.holder_label) == ("guarded", "sched")
    other = c.election("other", "one", ttl=5.0)
    async with other.campaign() as term:
        with pytest.raises(fencing.ProducerBusy, match=guarded):
            await term.producer(topic)
    await election.close()
    await other.close()
    await c.close()


def test_an_ended_terms_producer_and_sends_are_refused_and_never_disturb_the_next(
    proxied: tuple[Proxy, fencing.Client], client: fencing.Client, raw: redis.Redis
) -> None:
    proxy, pclient = proxied
    old = pclient.election("sched", "old", ttl=2.0)
    term = old.campaign()
    producer = term.producer(pclient.topic("decisions", partitions=1))
    assert producer.send(b"a").offset == 0
    futures = []
    with proxy.drop_requests(b"*", count=None, close=False):
        assert wait_until(term.lost.is_set, timeout=5.0)
        # Ended here before its lease could lapse: refused locally, nothing sent.
        with pytest.raises(fencing.LeaseExpired):
            producer.send(b"late")
        with pytest.raises(fencing.LeaseExpired):
            futures.append(producer.send_async(b"late"))
        new = client.election("sched", "new", ttl=2.0)
        successor = new.campaign(timeout=10)
    proxy.sever()
    with pytest.raises((fencing.Fenced, fencing.LeaseExpired)):
        term.producer(pclient.topic("decisions"))
    with pytest.raises(fencing.LeaseExpired):
        producer.send(b"late")
    with successor.producer(client.topic("decisions")) as current:
        assert (current.send(b"b").offset, current.epoch(0)) == (1, 2)
        with pytest.raises((fencing.Fenced, fencing.LeaseExpired)):
            term.producer(pclient.topic("decisions"))
        assert (current.send(b"c").offset, current.epoch(0)) == (2, 2)
    records = client.topic("decisions").reader(0, "earliest").read(max_records=10)
    assert [(r.value, r.epoch) for r in records] == [(b"a", 1), (b"b", 2), (b"c", 2)]
    successor.resign()
    old.close()
    new.close()


async def test_a_deleted_topic_leaves_the_guarded_set(api: Api, raw: redis.Redis) -> None:
    c = api.client()
    election = c.election("sched", "one", ttl=5.0)
    async with election.campaign() as term:
        async with term.producer(c.topic("gone", partitions=1)):
            pass
        async with term.producer(c.topic("kept", partitions=1)):
            pass
    guards = c.keys.ownership(ELECTION_GROUP, "sched") + ":guards"
    assert sorted(raw.hkeys(guards)) == [b"gone", b"kept"]
    await c.delete_topic("gone")
    async with election.campaign() as term:
        assert raw.hkeys(guards) == [b"kept"]
        # Recreated, it is a topic like any other until a term's producer guards it.
        async with await c.topic("gone", partitions=1).producer() as outside:
            await outside.send(b"free")
    await election.close()
    await c.close()

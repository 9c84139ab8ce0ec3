"""Sharded pub/sub on a real 3+3 cluster: notifications stay on the shard of their resource.

Every channel carries its resource's hash tag; the scripts publish with SPUBLISH, and the
notifier subscribes with SSUBSCRIBE on the primary serving each channel's slot (one pub/sub
connection per primary). Shown here:

- a handover is prompt on every shard (a waiting claim, a WAIT_FOR_EXCLUSIVE producer, an
  election follower): the waiter is woken by the release message, not by its poll (polls
  are made long, and every wait of a subscription is recorded with how it ended);
- a release is not broadcast: plain SUBSCRIBE / PSUBSCRIBE clients on the nodes of the other
  shards never see it (a PUBLISH sent after it, which the cluster bus does broadcast, is the
  first thing they get);
- SIGKILL of the master serving a subscribed channel: its subscribers (sync and asyncio) are
  told ``None``, the subscribers of the other shards are not, and after the replica's
  promotion the channel is subscribed there and later notifications arrive.

Servers are started by the suite (the session's clusters, and one of its own for the kill).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.crc import key_slot

import fencing
import fencing.aio
from fencing import AccessMode
from fencing._async.context import context_of as aio_context_of
from fencing._keys import ELECTION_GROUP, Keys
from fencing._runtime.tasks import notify as tasks_notify
from fencing._runtime.threads import notify as threads_notify
from fencing._sync.context import context_of
from fencing.embedded import EmbeddedCluster

from ..support.polling import wait_until
from ..support.pubsub import Inbox
from ..support.threads import in_thread

pytestmark = [
    pytest.mark.skipif(
        bool(os.environ.get("FENCING_TEST_CLUSTER_URL")),
        reason="reads every node of a cluster the suite starts (and kills a master of its own)",
    ),
    # Also on Redis 8: sharded pub/sub (SSUBSCRIBE, SPUBLISH from scripts) is the server's.
    pytest.mark.server_specific,
]

#: Polls far longer than any test here: a waiter that gets through was woken by a message.
LONG_POLL = 60.0
LEASE = 30.0


# -- the cluster's layout -------------------------------------------------------------------------


def _slots(port: int) -> list[tuple[int, int, int, list[int]]]:
    """(first slot, last slot, primary port, replica ports) per range, as ``port`` sees it."""
    with redis.Redis(port=port, socket_timeout=5) as r:
        return [
            (int(first), int(last), int(primary[1]), [int(rep[1]) for rep in replicas])
            for first, last, primary, *replicas in r.execute_command("CLUSTER", "SLOTS")
        ]


def _primary_of(port: int, key: str) -> int:
    slot = key_slot(key.encode())
    for first, last, primary, _ in _slots(port):
        if first <= slot <= last:
            return primary
    raise AssertionError(f"no primary serves slot {slot}")


def _shard_nodes(port: int) -> dict[int, list[int]]:
    """Primary port -> every node of its shard (the primary, then its replicas)."""
    return {primary: [primary, *replicas] for _, _, primary, replicas in _slots(port)}


def _one_per_shard(port: int, key_of: Callable[[str], str], stem: str) -> dict[int, str]:
    """A name per primary whose key (``key_of(name)``) that primary serves."""
    found: dict[int, str] = {}
    shards = _shard_nodes(port)
    for i in range(10_000):
        name = f"{stem}{i}"
        found.setdefault(_primary_of(port, key_of(name)), name)
        if len(found) == len(shards):
            return found
    raise AssertionError("no name found for some shard")


# -- how each wait of a subscription ended -------------------------------------------------------


class Waits:
    """Every ``Subscription.wait`` of both flavours: the channel, and whether a message (or a
    None) woke it (True) or its timeout ran out (False, a poll)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.entered: list[str] = []
        self.ended: list[tuple[str, bool]] = []

    def enter(self, channel: str) -> None:
        with self._lock:
            self.entered.append(channel)

    def end(self, channel: str, got: bool) -> None:
        with self._lock:
            self.ended.append((channel, got))

    def parked(self, channel: str) -> bool:
        with self._lock:
            return channel in self.entered

    def of(self, channel: str) -> list[bool]:
        with self._lock:
            return [got for ch, got in self.ended if ch == channel]


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Waits:
    """Records subscription waits (the real ones run), with long polls for waiting claims."""
    record = Waits()
    sync_wait = threads_notify.Subscription.wait
    async_wait = tasks_notify.Subscription.wait

    def wait(self: threads_notify.Subscription, timeout: float | None) -> bool:
        record.enter(self.channel)
        got = sync_wait(self, timeout)
        record.end(self.channel, got)
        return got

    async def await_(self: tasks_notify.Subscription, timeout: float | None) -> bool:
        record.enter(self.channel)
        got = await async_wait(self, timeout)
        record.end(self.channel, got)
        return got

    monkeypatch.setattr(threads_notify.Subscription, "wait", wait)
    monkeypatch.setattr(tasks_notify.Subscription, "wait", await_)
    monkeypatch.setattr("fencing._sync.claims.RECHECK_INTERVAL", LONG_POLL)
    monkeypatch.setattr("fencing._async.claims.RECHECK_INTERVAL", LONG_POLL)
    return record


def _woken_by_message(waits: Waits, channel: str) -> None:
    ended = waits.of(channel)
    assert ended, f"the waiter never waited on {channel}"
    assert False not in ended, f"a wait on {channel} ran out (a poll woke it): {ended}"


def _links(client: fencing.Client) -> set[Any]:
    listener = context_of(client).notifier._listener
    assert listener is not None
    return set(listener.links)


# -- a handover is prompt on every shard -----------------------------------------------------------


def test_a_waiting_claim_is_woken_by_the_release_on_every_shard(
    cluster: EmbeddedCluster, namespace: str, waits: Waits
) -> None:
    keys = Keys(namespace)
    port = cluster.ports[0]
    resources = _one_per_shard(port, lambda r: keys.ownership("g", r), "res-")
    with (
        fencing.Client.from_url(cluster.url, namespace=namespace) as holder_client,
        fencing.Client.from_url(cluster.url, namespace=namespace) as waiter_client,
    ):
        holder = holder_client.ownership("g", "holder", ttl=LEASE)
        waiter = waiter_client.ownership("g", "waiter", ttl=LEASE)
        for primary, resource in sorted(resources.items()):
            channel = keys.released_channel("g", resource)
            held = holder.claim(resource)[resource]
            thread, out, _ = in_thread(lambda r=resource: waiter.claim(r, wait=True, timeout=50))
            wait_until(
                lambda c=channel: waits.parked(c), 30.0, what="the waiter was refused and waits"
            )
            holder.release(resource)
            thread.join(50)
            (grants,) = out
            assert isinstance(grants, dict), grants
            assert grants[resource].token == held.token + 1
            _woken_by_message(waits, channel)
            assert _primary_of(port, channel) == primary
        # One pub/sub connection per primary holding a channel: all three.
        assert {node[1] for node in _links(waiter_client)} == set(resources)


def test_a_waiting_producer_is_woken_by_the_close_on_every_shard(
    cluster: EmbeddedCluster, namespace: str, waits: Waits
) -> None:
    keys = Keys(namespace)
    port = cluster.ports[0]
    topics = _one_per_shard(port, lambda t: keys.partition(t, 0).meta, "topic-")
    with (
        fencing.Client.from_url(cluster.url, namespace=namespace) as holder_client,
        fencing.Client.from_url(cluster.url, namespace=namespace) as waiter_client,
    ):
        for topic_name in topics.values():
            channel = keys.partition(topic_name, 0).released
            holder = holder_client.topic(topic_name, partitions=1).producer(
                AccessMode.EXCLUSIVE, lease_ttl=LEASE
            )
            epoch = holder.epoch(0)
            topic = waiter_client.topic(topic_name, partitions=1)
            thread, out, _ = in_thread(
                lambda t=topic: t.producer(
                    AccessMode.WAIT_FOR_EXCLUSIVE, lease_ttl=LEASE, wait_timeout=50
                )
            )
            wait_until(
                lambda c=channel: waits.parked(c), 30.0, what="the producer is queued and waits"
            )
            holder.close()
            thread.join(50)
            (producer,) = out
            assert isinstance(producer, fencing.Producer), producer
            assert producer.epoch(0) == epoch + 1
            producer.close()
            _woken_by_message(waits, channel)


def test_an_election_follower_is_woken_by_the_resignation_on_every_shard(
    cluster: EmbeddedCluster, namespace: str, waits: Waits
) -> None:
    keys = Keys(namespace)
    port = cluster.ports[0]
    names = _one_per_shard(port, lambda n: keys.ownership(ELECTION_GROUP, n), "election-")
    with (
        fencing.Client.from_url(cluster.url, namespace=namespace) as leader_client,
        fencing.Client.from_url(cluster.url, namespace=namespace) as follower_client,
    ):
        for name in names.values():
            channel = keys.released_channel(ELECTION_GROUP, name)
            leader = leader_client.election(name, "leader", ttl=LEASE)
            follower = follower_client.election(name, "follower", ttl=LEASE)
            with leader.campaign(timeout=10) as term:
                token = term.token

                def follow(f: fencing.Election = follower) -> int:
                    with f.campaign(timeout=50) as won:
                        return won.token

                thread, out, _ = in_thread(follow)
                wait_until(
                    lambda c=channel: waits.parked(c), 30.0, what="the follower campaigns and waits"
                )
            thread.join(50)
            assert out == [token + 1], out
            _woken_by_message(waits, channel)


async def test_an_asyncio_waiting_claim_is_woken_by_the_release_on_every_shard(
    cluster: EmbeddedCluster, namespace: str, waits: Waits
) -> None:
    keys = Keys(namespace)
    port = cluster.ports[0]
    resources = _one_per_shard(port, lambda r: keys.ownership("g", r), "ares-")
    holder_client = fencing.aio.Client.from_url(cluster.url, namespace=namespace)
    waiter_client = fencing.aio.Client.from_url(cluster.url, namespace=namespace)
    try:
        holder = holder_client.ownership("g", "holder", ttl=LEASE)
        waiter = waiter_client.ownership("g", "waiter", ttl=LEASE)
        for resource in resources.values():
            channel = keys.released_channel("g", resource)
            held = (await holder.claim(resource))[resource]
            claim = asyncio.ensure_future(waiter.claim(resource, wait=True, timeout=50))
            while not waits.parked(channel):
                assert not claim.done(), claim.result()
                await asyncio.sleep(0.01)
            await holder.release(resource)
            grants = await asyncio.wait_for(claim, 50)
            assert grants[resource].token == held.token + 1
            _woken_by_message(waits, channel)
        links = aio_context_of(waiter_client).notifier._links
        assert {node[1] for node in links if node is not None} == set(resources)
    finally:
        await holder_client.close()
        await waiter_client.close()


# -- no broadcast -------------------------------------------------------------------------------


def test_a_release_is_not_broadcast_to_the_other_shards(
    cluster: EmbeddedCluster, namespace: str
) -> None:
    """A plain SUBSCRIBE and a PSUBSCRIBE * on every node of the other shards: the release
    (Lua SPUBLISH) and an election change (the client's SPUBLISH) never reach them. A plain
    PUBLISH sent right after from the same node is broadcast over the cluster bus, in order
    after anything broadcast before it: it is the first thing each of them gets."""
    keys = Keys(namespace)
    port = cluster.ports[0]
    resource = "not-broadcast"
    released = keys.released_channel("g", resource)
    changed = keys.election_channel(resource)
    home = _primary_of(port, released)
    assert _primary_of(port, changed) == home  # one hash tag: one shard
    others = [
        node for primary, nodes in _shard_nodes(port).items() if primary != home for node in nodes
    ]
    assert len(others) == 4  # two other shards, each a primary and a replica
    listeners = []
    for node in others:
        pubsub = redis.Redis(port=node, socket_timeout=5).pubsub()  # type: ignore[no-untyped-call]
        pubsub.subscribe(released, changed)
        pubsub.psubscribe("*")
        listeners.append(pubsub)
    witness = redis.Redis(port=home, socket_timeout=5).pubsub()  # type: ignore[no-untyped-call]
    witness.ssubscribe(released)
    try:
        for pubsub in [*listeners, witness]:
            for _ in range(3 if pubsub is not witness else 1):
                assert pubsub.get_message(timeout=5)["type"] in (
                    "subscribe",
                    "psubscribe",
                    "ssubscribe",
                )
        with fencing.Client.from_url(cluster.url, namespace=namespace) as client:
            owner = client.ownership("g", "a", ttl=LEASE)
            owner.claim(resource)
            assert owner.release(resource) == {resource: True}
            with client.election(resource, "a", ttl=LEASE).campaign(timeout=10):
                pass
        # The shard of the resource got it (the positive control).
        message = witness.get_message(timeout=5)
        assert message is not None
        assert (message["type"], message["data"]) == ("smessage", b"released 1")
        marker = f"{namespace}:marker:{uuid.uuid4().hex}"
        with redis.Redis(port=home) as r:
            r.publish(marker, b"after")
        for node, pubsub in zip(others, listeners, strict=True):
            message = pubsub.get_message(timeout=10)
            assert message is not None, f"node {node}: not even the marker arrived"
            assert message["channel"] == marker.encode(), (
                f"node {node} of another shard saw {message} before the marker"
            )
    finally:
        for pubsub in [*listeners, witness]:
            pubsub.close()


# -- a master dies ---------------------------------------------------------------------------------


def test_after_the_master_dies_subscribers_are_told_none_and_hear_again(
    own_cluster: EmbeddedCluster,
) -> None:
    namespace = "shk" + uuid.uuid4().hex[:8]
    keys = Keys(namespace)
    port = own_cluster.ports[0]
    resources = _one_per_shard(port, lambda r: keys.ownership("g", r), "res-")
    # (Not the client's seed node: a dead seed is the slot-map refresh's matter, not this.)
    victim_port, resource = next((p, r) for p, r in sorted(resources.items()) if p != port)
    channel = keys.released_channel("g", resource)
    bystander = next(r for p, r in resources.items() if p != victim_port)
    calm_channel = keys.released_channel("g", bystander)
    survivor = next(p for p in own_cluster.ports if p not in _shard_nodes(port)[victim_port])

    client = fencing.Client.from_url(own_cluster.url, namespace=namespace)
    inbox, calm = Inbox(), Inbox()
    sub = context_of(client).notifier.subscribe(channel, inbox)
    calm_sub = context_of(client).notifier.subscribe(calm_channel, calm)
    # The asyncio notifier, on a loop of its own in a thread.
    ainbox = Inbox()
    ready, stop = threading.Event(), threading.Event()

    async def watch() -> None:
        aclient = fencing.aio.Client.from_url(own_cluster.url, namespace=namespace)
        try:
            async with aio_context_of(aclient).notifier.subscribe(channel, ainbox):
                ready.set()
                while not stop.is_set():
                    await asyncio.sleep(0.05)
        finally:
            await aclient.close()

    watcher = threading.Thread(target=lambda: asyncio.run(watch()), daemon=True)
    watcher.start()
    assert ready.wait(10)
    try:
        owner = client.ownership("g", "a", ttl=LEASE)
        owner.claim(resource)
        owner.release(resource)
        for box in (inbox, ainbox):
            assert box.wait_for(lambda got: b"released 1" in got, 10), box.got
        assert calm.got == []

        victim = next(n for n in own_cluster.nodes if n.port == victim_port)
        os.kill(victim.process.pid, signal.SIGKILL)
        for box in (inbox, ainbox):
            assert box.wait_for(lambda got: None in got, 30), box.got  # "you may have missed"
        # The replica is promoted; then a claim and a release there reach both notifiers.
        wait_until(
            lambda: _primary_of(survivor, channel) != victim_port,
            30.0,
            what="a replica took the slot over",
        )
        owner = client.ownership("g", "b", ttl=LEASE)
        for _ in range(100):
            try:
                owner.claim(resource)
                break
            except fencing.Unavailable:
                time.sleep(0.2)
        else:
            raise AssertionError("no claim on the promoted replica in 20 s")
        owner.release(resource)

        def heard_after_none(got: list[bytes | None]) -> bool:
            after = got[got.index(None) + 1 :] if None in got else []
            return any(m is not None and m.startswith(b"released ") for m in after)

        for box in (inbox, ainbox):
            assert box.wait_for(heard_after_none, 30), box.got
        # The other shards' subscribers lost nothing, and were not told they might have.
        assert calm.got == []
    finally:
        stop.set()
        watcher.join(10)
        sub.close()
        calm_sub.close()
        client.close()

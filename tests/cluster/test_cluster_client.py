"""The cluster client: its repr, ASK during a resharding (sync and asyncio), the checks run
on every primary (eviction policy, append-only file for acks='fsync'), and the slot map
refreshed after a master dies.

The cluster is this module's own (the last test kills a master of it).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis
from redis.crc import key_slot

import fencing
import fencing.aio
from fencing._keys import Keys
from fencing.embedded import EmbeddedCluster
from tests.support.internals import metadata_of

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("FENCING_TEST_CLUSTER_URL")), reason="starts and kills its own servers"
)


def _master_port(cluster: EmbeddedCluster, key: str) -> int:
    slot = key_slot(key.encode())
    with redis.Redis(port=cluster.ports[0]) as r:
        for first, last, primary, *_ in r.execute_command("CLUSTER", "SLOTS"):
            if first <= slot <= last:
                return int(primary[1])
    raise AssertionError(f"no primary serves slot {slot}")


def _node_ids(cluster: EmbeddedCluster) -> dict[int, str]:
    ids = {}
    for node in cluster.nodes[: cluster.masters]:
        with redis.Redis(port=node.port, decode_responses=True) as r:
            ids[node.port] = str(r.execute_command("CLUSTER", "MYID"))
    return ids


def test_repr_of_a_cluster_client(own_cluster: EmbeddedCluster) -> None:
    """repr() of a cluster client (a log line, a debugger, pytest's own report) works and names
    it."""
    client = fencing.Client.from_url(own_cluster.url, namespace="clusterrepr")
    try:
        assert "fencing.Client" in repr(client)
    finally:
        client.close()


def _migrating(cluster: EmbeddedCluster, key: str) -> tuple[int, int]:
    """Mark ``key``'s slot MIGRATING from its master to another one; (source, target) ports."""
    slot = key_slot(key.encode())
    ids = _node_ids(cluster)
    source = _master_port(cluster, key)
    target = next(port for port in ids if port != source)
    with redis.Redis(port=source) as src, redis.Redis(port=target) as dst:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source])
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target])
    return source, target


def _stable(cluster: EmbeddedCluster, key: str, ports: tuple[int, int]) -> None:
    slot = key_slot(key.encode())
    for port in ports:
        with redis.Redis(port=port) as r:
            r.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")


def test_ask_during_a_resharding_is_followed(own_cluster: EmbeddedCluster) -> None:
    """While a slot is MIGRATING, a script whose keys are all absent from the source gets ``ASK
    <slot> <target>``: the driver sends ``ASKING`` and the script to the target, once (never
    answered like MOVED, asking the source again until the budget is spent), so a fresh claim
    succeeds during the migration. The row is written on the importing node, and nothing on the
    source."""
    client = fencing.Client.from_url(own_cluster.url, namespace="clusterask")
    key = Keys("clusterask").ownership("g", "fresh")
    ports = _migrating(own_cluster, key)
    try:
        owner = client.ownership("g", owner_id="a", ttl=6.0, acks="replicated")
        grants = owner.claim(["fresh"])
        assert grants["fresh"].token == 1
        # The key lives on the target now (the importing node), not on the source.
        with redis.Redis(port=ports[0]) as src, redis.Redis(port=ports[1]) as dst:
            assert src.execute_command("CLUSTER", "COUNTKEYSINSLOT", key_slot(key.encode())) == 0
            dst.execute_command("ASKING")
            assert dst.exists(key) == 1
        owner.release(["fresh"])
    finally:
        _stable(own_cluster, key, ports)
        client.close()


async def test_ask_is_followed_by_the_asyncio_client(own_cluster: EmbeddedCluster) -> None:
    """The same through ``fencing.aio`` (the driver is generated from one source; this
    checks the asyncio path of ASKING, with a durability wait behind it)."""
    client = fencing.aio.Client.from_url(own_cluster.url, namespace="clusteraska")
    key = Keys("clusteraska").ownership("g", "fresh")
    ports = _migrating(own_cluster, key)
    try:
        owner = client.ownership("g", owner_id="a", ttl=6.0, acks="replicated")
        grants = await owner.claim(["fresh"])
        assert grants["fresh"].token == 1
        await owner.release(["fresh"])
    finally:
        _stable(own_cluster, key, ports)
        await client.close()


def test_every_primary_is_checked_for_eviction(own_cluster: EmbeddedCluster) -> None:
    """The maxmemory-policy check (no silent eviction) reads every primary of a cluster,
    not one node: a single evicting shard is refused at first use, and the message names
    it."""
    third = own_cluster.nodes[2].port
    with redis.Redis(port=third) as r:
        r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        client = fencing.Client.from_url(own_cluster.url, namespace="clusterevict")
        try:
            with pytest.raises(fencing.ConfigurationError, match=f"{third}.*allkeys-lru"):
                client.topic("t", partitions=6).producer()
        finally:
            client.close()
    finally:
        with redis.Redis(port=third) as r:
            r.config_set("maxmemory-policy", "noeviction")


@pytest.mark.server_specific
def test_every_primary_is_checked_for_fsync(cluster: EmbeddedCluster | None) -> None:
    """acks='fsync' is refused at open when one primary of the cluster runs without the
    append-only file, and the message names that node (Valkey 8 and Redis 8: Redis 7.0 has
    no WAITAOF)."""
    if cluster is None:
        pytest.skip("reconfigures every primary: needs a cluster the suite starts")
    with redis.Redis(port=cluster.ports[0]) as r:
        try:
            r.execute_command("WAITAOF", 0, 0, 0)
        except redis.exceptions.ResponseError:
            pytest.skip(f"{cluster.kind} here has no WAITAOF (Redis/Valkey 7.2+)")
    third = cluster.nodes[2].port
    primaries = cluster.ports[: cluster.masters]
    with redis.Redis(port=third) as r:
        before = r.config_get("appendonly")["appendonly"]
    for port in primaries:
        with redis.Redis(port=port) as r:
            r.config_set("appendonly", "yes" if port != third else "no")
    try:
        client = fencing.Client.from_url(cluster.url, namespace="clusteraof")
        try:
            topic = client.topic("t", partitions=6)
            with pytest.raises(fencing.ConfigurationError, match=f"{third}.*appendonly 'no'"):
                topic.producer(acks="fsync")
        finally:
            client.close()
    finally:
        for port in primaries:
            with redis.Redis(port=port) as r:
                r.config_set("appendonly", before)


@pytest.mark.slow
def test_a_slot_is_remapped_after_its_master_dies(own_cluster: EmbeddedCluster) -> None:
    """SIGKILL the master of a partition's slot: its replica is promoted within seconds, and the
    driver follows it. A connection error to a cluster node refreshes the slot map (a dead node
    sends no MOVED/ASK), so the partition's sends reach the promoted primary within 20 s, which
    kept the acknowledged record."""
    client = fencing.Client.from_url(own_cluster.url, namespace="clusterkill")
    try:
        topic = client.topic("t", partitions=1)
        producer = topic.producer(fencing.AccessMode.EXCLUSIVE, lease_ttl=6.0, acks="replicated")
        assert producer.send(b"before", partition=0).offset == 0
        victim_port = _master_port(own_cluster, metadata_of(topic).partition_keys(0).meta)
        victim = next(n for n in own_cluster.nodes if n.port == victim_port)
        os.kill(victim.process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 20.0
        errors: list[str] = []
        while time.monotonic() < deadline:
            try:
                producer.send(b"after", partition=0)
            except fencing.NotEnoughReplicas:
                # It ran on the promoted replica, which has no replica of its own in a
                # 3+3 cluster once its master died: acks='replicated' is honestly short.
                pass
            except fencing.FencingError as exc:
                errors.append(f"{type(exc).__name__}: {str(exc)[:120]}")
                time.sleep(0.5)
                continue
            # The promoted primary kept the acknowledged record and took the new one.
            values = [r.value for r in topic.reader(0).read()]
            assert values[0] == b"before" and b"after" in values, values
            break
        else:
            slot = key_slot(metadata_of(topic).partition_keys(0).meta.encode())
            pytest.fail(
                f"20 s after the master of slot {slot}"
                f" died, the partition is still unreachable; last errors: {errors[-2:]}"
            )
        producer.close()
    finally:
        client.close()

"""The nodes of a local Redis Cluster as a failover test sees them: which are alive, which
master and replica serve a key now, a node's role, whether a replica is in sync.

>>> master, replica = shard_of(cluster, key)                          # doctest: +SKIP
>>> wait_until(lambda: role_of(replica) == "master", 20)               # doctest: +SKIP
"""

from __future__ import annotations

import redis
from redis.crc import key_slot

from fencing.embedded import EmbeddedCluster, EmbeddedServer

from .polling import wait_until

__all__ = ["live_nodes", "role_of", "shard_of", "synced"]


def live_nodes(cluster: EmbeddedCluster) -> list[EmbeddedServer]:
    """The nodes whose process still runs."""
    return [n for n in cluster.nodes if n.process.poll() is None]


def shard_of(cluster: EmbeddedCluster, key: str) -> tuple[EmbeddedServer, EmbeddedServer]:
    """(master, its replica) serving ``key``'s slot now, once a node lists both."""
    slot = key_slot(key.encode())
    by_port = {n.port: n for n in cluster.nodes}
    found: list[tuple[EmbeddedServer, EmbeddedServer]] = []

    def listed() -> bool:
        for node in live_nodes(cluster):
            try:
                with redis.Redis(port=node.port, socket_timeout=1) as r:
                    table = r.execute_command("CLUSTER", "SLOTS")
            except redis.RedisError:
                continue
            for first, last, primary, *replicas in table:
                if first <= slot <= last and replicas:
                    found.append((by_port[int(primary[1])], by_port[int(replicas[0][1])]))
                    return True
        return False

    wait_until(listed, 15, 0.02, what=f"a master and a replica listed for slot {slot}")
    return found[-1]


def role_of(node: EmbeddedServer) -> str:
    """``"master"``, ``"slave"``, or ``"unreachable"`` (killed, stopped, busy)."""
    try:
        with redis.Redis(port=node.port, socket_timeout=0.5) as r:
            return str(r.info("replication")["role"])
    except redis.RedisError:
        return "unreachable"


def synced(replica: EmbeddedServer) -> bool:
    """Whether the replica's link to its master is up."""
    with redis.Redis(port=replica.port, socket_timeout=1) as r:
        return r.info("replication").get("master_link_status") == "up"

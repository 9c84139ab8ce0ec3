"""Redis Cluster, sync flavour: what redis-py's ``RedisCluster`` calls differently from
``redis.asyncio.cluster`` (see :mod:`fencing._runtime.tasks.cluster`, same names)."""

from __future__ import annotations

from typing import Any

from redis.cluster import ClusterNode, RedisCluster

Cluster = RedisCluster


def is_cluster(client: object) -> bool:
    """Whether ``client`` is a cluster client."""
    return isinstance(client, RedisCluster)


def seeds(cluster: RedisCluster) -> list[tuple[str, int]]:
    """The nodes the cluster client was started from (host, port)."""
    return [(n.host, int(n.port)) for n in cluster.nodes_manager.startup_nodes.values()]


def node_settings(cluster: RedisCluster) -> tuple[type, dict[str, Any]]:
    """The connection class and keyword arguments of the cluster's node connections."""
    for node in cluster.nodes_manager.startup_nodes.values():
        if node.redis_connection is not None:
            pool = node.redis_connection.connection_pool
            return pool.connection_class, dict(pool.connection_kwargs)
    raise RuntimeError("the cluster client has no node connection to copy settings from")


def new_cluster(nodes: list[tuple[str, int]], **kwargs: Any) -> RedisCluster:
    """A cluster client started from ``nodes``."""
    startup = [ClusterNode(h, p) for h, p in nodes]  # type: ignore[no-untyped-call]
    return RedisCluster(startup_nodes=startup, **kwargs)


def close(cluster: RedisCluster) -> None:
    """Close every connection of the cluster client."""
    cluster.close()


def ready(cluster: RedisCluster) -> None:
    """Nothing to do: a sync cluster client maps its slots when it is made."""


def refresh(cluster: RedisCluster) -> None:
    """Read the slot map again (after MOVED, a failover)."""
    cluster.nodes_manager.initialize()


def primary_for(cluster: RedisCluster, slot: int) -> tuple[str, int]:
    """(host, port) of the primary serving ``slot``."""
    node = cluster.nodes_manager.get_node_from_slot(slot)
    return node.host, int(node.port)


def primaries(cluster: RedisCluster) -> set[tuple[str, int]]:
    """(host, port) of every primary in the cluster client's slot map."""
    return {(node.host, int(node.port)) for node in cluster.get_primaries()}  # type: ignore[no-untyped-call]

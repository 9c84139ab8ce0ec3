"""Redis Cluster, asyncio flavour: what ``redis.asyncio.cluster.RedisCluster`` calls
differently from the sync client (see :mod:`fencing._runtime.threads.cluster`, same names)."""

from __future__ import annotations

from typing import Any

from redis.asyncio.cluster import ClusterNode, RedisCluster

Cluster = RedisCluster

#: Keyword arguments of the cluster client that are not connection settings.
_NOT_CONNECTION = ("connection_class", "max_connections", "response_callbacks")


def is_cluster(client: object) -> bool:
    """Whether ``client`` is a cluster client."""
    return isinstance(client, RedisCluster)


def seeds(cluster: RedisCluster) -> list[tuple[str, int]]:
    """The nodes the cluster client was started from (host, port)."""
    return [(n.host, int(n.port)) for n in cluster.nodes_manager.startup_nodes.values()]


def node_settings(cluster: RedisCluster) -> tuple[type, dict[str, Any]]:
    """The connection class and keyword arguments of the cluster's node connections."""
    kwargs = dict(cluster.connection_kwargs)
    connection_class = kwargs["connection_class"]
    for name in _NOT_CONNECTION:
        kwargs.pop(name, None)
    return connection_class, kwargs


def new_cluster(nodes: list[tuple[str, int]], **kwargs: Any) -> RedisCluster:
    """A cluster client started from ``nodes``."""
    return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes], **kwargs)


async def close(cluster: RedisCluster) -> None:
    """Close every connection of the cluster client."""
    await cluster.aclose()


async def ready(cluster: RedisCluster) -> None:
    """Map the slots once (an asyncio cluster client does it on first use)."""
    if not cluster.nodes_manager.slots_cache:
        await cluster.initialize()


async def refresh(cluster: RedisCluster) -> None:
    """Read the slot map again (after MOVED, a failover)."""
    await cluster.nodes_manager.initialize()


def primary_for(cluster: RedisCluster, slot: int) -> tuple[str, int]:
    """(host, port) of the primary serving ``slot``."""
    node = cluster.nodes_manager.get_node_from_slot(slot)
    return node.host, int(node.port)


def primaries(cluster: RedisCluster) -> set[tuple[str, int]]:
    """(host, port) of every primary in the cluster client's slot map."""
    return {(node.host, int(node.port)) for node in cluster.get_primaries()}

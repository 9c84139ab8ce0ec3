"""Routing script calls on a Redis Cluster: each call goes to the primary of its keys' slot.

Every script's keys share one hash tag (:mod:`fencing._keys`), so a call has one slot, and
the primary serving it is read from the cluster client's slot map. Each primary gets a
script path of its own (:class:`ScriptConnections` over a pool for that node), so scripts
are loaded per node (NOSCRIPT is answered by SCRIPT LOAD there, as on one server). A node
that answers MOVED, TRYAGAIN or CLUSTERDOWN did not run the script: the slot map is read
again and the call is sent anew, within its retry budget (a failover, a resharding). An ASK
(the slot is migrating and the keys are not on the source) is followed at once: ASKING and
the script on the node it names (:meth:`for_node`), without remapping.

>>> routes = ClusterRoutes(cluster, pool_for, wait=1.0)              # doctest: +SKIP
>>> connections = await routes.for_key("fencing:{orders/0}:part")
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import redis.exceptions
from redis.crc import key_slot

from .._protocol.refusals import NotDelivered
from .._runtime.tasks import cluster as runtime_cluster
from .._runtime.tasks.connections import ScriptConnections


class ClusterRoutes:
    """The script path of every primary of one cluster client."""

    def __init__(
        self, cluster: runtime_cluster.Cluster, pool_for: Callable[[str, int], Any], wait: float
    ) -> None:
        self.cluster = cluster
        self._pool_for = pool_for
        self._wait = wait
        self._nodes: dict[tuple[str, int], ScriptConnections] = {}

    async def for_key(self, key: str) -> ScriptConnections:
        """The script connections of the primary serving ``key``'s slot."""
        try:
            await runtime_cluster.ready(self.cluster)
            node = runtime_cluster.primary_for(self.cluster, key_slot(key.encode()))
        except (redis.exceptions.RedisClusterException, redis.exceptions.ConnectionError) as exc:
            raise NotDelivered(f"no node of the cluster could be reached: {exc}") from exc
        return self.for_node(node)

    def for_node(self, node: tuple[str, int]) -> ScriptConnections:
        """The script connections of ``node`` (host, port): a primary, or the target an ASK
        redirection names."""
        connections = self._nodes.get(node)
        if connections is None:
            connections = ScriptConnections(self._pool_for(*node), wait=self._wait)
            self._nodes[node] = connections
        return connections

    async def failed(self, connections: ScriptConnections) -> None:
        """A node's connection failed (refused, reset, timed out): forget its script path
        and map the slots again, so that a primary promoted in a failover is found."""
        for node, known in list(self._nodes.items()):
            if known is connections:
                del self._nodes[node]
                with contextlib.suppress(Exception):
                    await known.close()
        await self.refresh()

    async def refresh(self) -> None:
        """Read the slot map again (a node answered that it does not serve a slot)."""
        # (Unreachable: the next attempt maps the slots again, or reports the outage.)
        with contextlib.suppress(
            redis.exceptions.RedisClusterException, redis.exceptions.ConnectionError
        ):
            await runtime_cluster.refresh(self.cluster)

    async def close(self) -> None:
        """Disconnect every node's script connections."""
        nodes, self._nodes = list(self._nodes.values()), {}
        for connections in nodes:
            await connections.close()

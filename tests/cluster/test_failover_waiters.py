"""A WAIT_FOR_EXCLUSIVE producer without ``wait_timeout`` through a master SIGKILL: its open
is safe to repeat, so it rides through the failover (the shard answering nothing, then
moved) and takes the partition over once the replica is promoted and the holder lets go.
A cluster of this module's own: the test kills a master."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import fencing
from fencing import AccessMode
from fencing._keys import Keys
from fencing.embedded import EmbeddedCluster, EmbeddedServer

from ..support.cluster_nodes import role_of, shard_of, synced
from ..support.polling import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(os.environ.get("FENCING_TEST_CLUSTER_URL")), reason="starts and kills its own servers"
    ),
]


def test_a_waiter_without_a_timeout_takes_over_after_a_master_is_killed(
    own_cluster: EmbeddedCluster,
) -> None:
    ns = "fw-sigkill"
    meta = Keys(ns).partition("orders", 0).meta
    waiters = Keys(ns).partition("orders", 0).waiters
    holder_client = fencing.Client.from_url(own_cluster.url, namespace=ns)
    waiter_client = fencing.Client.from_url(own_cluster.url, namespace=ns)
    topic = holder_client.topic("orders", partitions=1)
    got: list[object] = []
    thread: threading.Thread | None = None
    try:
        holder = topic.producer(AccessMode.EXCLUSIVE, name="a", lease_ttl=6.0)
        assert holder.send(b"before").offset == 0

        def wait_for_it() -> None:
            try:
                got.append(
                    waiter_client.topic("orders").producer(
                        AccessMode.WAIT_FOR_EXCLUSIVE, name="b", lease_ttl=6.0, wait_timeout=None
                    )
                )
            except BaseException as exc:
                got.append(exc)

        thread = threading.Thread(target=wait_for_it)
        thread.start()
        master, replica = shard_of(own_cluster, meta)
        probe = master.probe()
        wait_until(lambda: probe.zcard(waiters) == 1, what="the waiter to queue")
        # The holder's grant and the queue are on the replica before the master dies.
        wait_until(lambda: int(probe.execute_command("WAIT", 1, 200)) >= 1, 15, 0.02)
        probe.close()

        os.kill(master.process.pid, signal.SIGKILL)
        master.process.wait()
        wait_until(lambda: role_of(replica) == "master", 20, 0.02, what="the replica promoted")
        assert got == []  # still waiting: no timeout, and the outage is no answer

        holder.close()  # the holder lets go on the promoted replica
        thread.join(30)
        assert not thread.is_alive(), "the waiter never took over"
        [waiter] = got
        assert isinstance(waiter, fencing.Producer), waiter
        assert waiter.epoch(0) == 2
        assert (waiter.send(b"after").offset, waiter.send(b"again").epoch) == (1, 2)
        assert [r.value for r in topic.reader(0, "earliest").read()] == [
            b"before",
            b"after",
            b"again",
        ]
        waiter.close()
    finally:
        # The killed node comes back as a replica (its nodes.conf), for whatever runs next.
        for index, dead in enumerate(own_cluster.nodes):
            if dead.process.poll() is None:
                continue
            own_cluster.nodes[index] = back = EmbeddedServer._launch(
                dead.kind, dead.binary, dead.port, dead.directory, dead.extra_args
            )
            wait_until(lambda back=back: synced(back), 20, 0.02, what="the node to sync")
        if thread is not None:
            thread.join(30)
        holder_client.close()
        waiter_client.close()

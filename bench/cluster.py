"""Fenced appends on a 3-master Redis Cluster against one node, and what each ``acks``
level costs against ``acks="leader"``. One process, one run, same machine.

    .venv/bin/python -m bench.cluster

Aggregate: ``WRITERS`` threads, each with its own SHARED idempotent producer, send single
100-byte records round-robin over a topic of 6 partitions for a fixed time, on a local
cluster of 3 masters (each with a replica) and on one node. acks: the same on one primary
with one replica, per level (``fsync`` where the server has WAITAOF: Valkey 8 here, with
``appendonly yes``). Every acknowledged send is counted once; the partitions' next offsets
are checked to add up to the acknowledged count. On a 2-core VM the client and all the
servers share the cores, so the cluster figure says more about routing overhead than about
how a real deployment scales.
"""

from __future__ import annotations

import threading
import time
import uuid

import redis

import fencing
from fencing import AccessMode
from fencing.embedded import EmbeddedCluster, EmbeddedServer

PARTITIONS = 6
WRITERS = 12
SECONDS = 3.0
VALUE = b"x" * 100


def aggregate(url: str, acks: str = "leader") -> float:
    """Fenced sends/s of WRITERS threads over PARTITIONS partitions at ``url``."""
    client = fencing.Client.from_url(url, namespace="b" + uuid.uuid4().hex[:8])
    topic = client.topic("t", partitions=PARTITIONS)
    producers = [topic.producer(AccessMode.SHARED, acks=acks) for _ in range(WRITERS)]
    counts = [0] * WRITERS
    start = threading.Barrier(WRITERS + 1)
    stop = threading.Event()

    def run(i: int) -> None:
        p, n = producers[i], 0
        start.wait()
        while not stop.is_set():
            p.send(VALUE, partition=(i + n) % PARTITIONS)
            n += 1
        counts[i] = n

    threads = [threading.Thread(target=run, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    landed = sum(topic.offsets(p)[1] for p in range(PARTITIONS))
    assert landed == sum(counts), f"acknowledged {sum(counts)}, landed {landed}"
    for p in producers:
        p.close()
    client.close()
    return sum(counts) / elapsed


def replicated_pair(kind: str, *extra: str) -> tuple[EmbeddedServer, EmbeddedServer]:
    primary = EmbeddedServer.start(kind, extra_args=("--repl-diskless-sync-delay", "0", *extra))  # type: ignore[arg-type]
    replica = EmbeddedServer.start(kind, extra_args=("--replicaof", "127.0.0.1", str(primary.port)))  # type: ignore[arg-type]
    r = redis.Redis(port=replica.port)
    while r.info("replication").get("master_link_status") != "up":
        time.sleep(0.02)
    r.close()
    return primary, replica


def main() -> None:
    rows: list[tuple[str, float, str]] = []
    with EmbeddedCluster.start("redis") as cluster, EmbeddedServer.start("redis") as single:
        one = aggregate(single.url)
        three = aggregate(cluster.url)
        rows.append(("one node, redis 7 (sends/s)", one, ""))
        rows.append(("3-master cluster, redis 7 (sends/s)", three, f"{three / one:.2f}x one node"))
    for kind, extra in (("redis", ()), ("valkey", ("--appendonly", "yes"))):
        primary, replica = replicated_pair(kind, *extra)
        try:
            leader = aggregate(primary.url, "leader")
            rows.append((f"{kind}: acks='leader' (sends/s)", leader, ""))
            replicated = aggregate(primary.url, "replicated")
            rows.append(
                (f"{kind}: acks='replicated'", replicated, f"{replicated / leader:.2f}x leader")
            )
            if kind == "valkey":
                fsync = aggregate(primary.url, "fsync")
                rows.append(
                    (
                        f"{kind}: acks='fsync' (appendfsync everysec)",
                        fsync,
                        f"{fsync / leader:.2f}x leader",
                    )
                )
        finally:
            replica.stop()
            primary.stop()
    print(f"{WRITERS} writer threads, {PARTITIONS} partitions, {SECONDS:g} s each, 100 B values")
    for name, value, ratio in rows:
        print(f"{name:<48} {value:>10,.0f}  {ratio}")


if __name__ == "__main__":
    main()

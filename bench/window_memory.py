"""Redis memory of the duplicate window, per producer and partition, at several sizes.

    .venv/bin/python -m bench.window_memory

For each window size W, ten idempotent producers send 2 x W + 10 one-record batches each to
partition 0 of a topic made with ``dedup_window=W`` (so every window is full and has wrapped
round its ring). ``MEMORY USAGE`` of the partition's PID states and windows, divided by the
producers, is what one producer costs on one partition; divided again by W, what one
remembered batch costs. A resend of the producer's oldest batch still in the window is sent
last, to show it is answered with its original offset.
"""

from __future__ import annotations

import dataclasses

import redis

import fencing
from fencing._sync.metadata import metadata_of

from .common import server

SIZES = (5, 100, 1000)
PRODUCERS = 10


def main() -> None:
    with server() as s:
        r = redis.Redis.from_url(s.url)
        client = fencing.Client.from_url(s.url, namespace="winmem")
        print(f"server: {s.kind} {s.version}; {PRODUCERS} producers per size")
        print("  window W   bytes per producer and partition   bytes per batch kept")
        for size in SIZES:
            topic = client.topic(f"w{size}", partitions=1, dedup_window=size)
            producers = [topic.producer() for _ in range(PRODUCERS)]
            for p in producers:
                for i in range(2 * size + 10):
                    p.send_batch([f"{i:08d}".encode()], partition=0)
            pk = metadata_of(topic).partition_keys(0)
            used = sum(r.memory_usage(key, samples=0) or 0 for key in (pk.pids, pk.window))
            per_producer = used / PRODUCERS
            # The oldest batch still in the window of the last producer: a duplicate answer.
            p = producers[-1]
            state = p.state
            oldest = state.next_sequence(0) - size
            resent = client.topic(f"w{size}").producer(
                resume=dataclasses.replace(state, sequences={0: oldest})
            )
            try:
                md = resent.send_batch([f"{2 * size + 10 - size:08d}".encode()], partition=0)
            finally:
                resent.close()
            print(
                f"  {size:8d}   {per_producer:32.0f}   {per_producer / size:20.1f}"
                f"   (resend of batch {oldest}: offset {md[0].offset})"
            )
            for p in producers:
                p.close()
        client.close()


if __name__ == "__main__":
    main()

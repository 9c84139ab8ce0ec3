"""Reading a partition back: ``topic.reader(0)`` iterated against raw XRANGE paging.

Run from the repository root:

    .venv/bin/python -m bench.reader                    # 1,000,000 records (about two minutes)
    .venv/bin/python -m bench.reader --records 100000   # a smoke run

One process, one throwaway local server (redis-server from PATH, else Valkey; never port
6379). A one-partition topic is filled with ``--records`` records of ``--size`` bytes
(``send_batch`` of 1,000), then read from the start to the end, four ways:

- sync raw: redis-py ``XRANGE key (last-id + COUNT page`` over the partition's stream key,
  replies as bytes (redis-py's own stream parsing), until the stream is exhausted;
- sync fenced: ``for record in topic.reader(0)`` until every record was seen;
- aio raw: the same paging with ``redis.asyncio``;
- aio fenced: ``async for record in await topic.reader(0)`` on ``fencing.aio``.

The raw pages use the reader's own page size (the records one read of an iterated reader
asks for). Each fenced side alternates with its raw baseline in rounds (a shared machine
drifts); records/s is the median of the rounds, and the ratio is the median of each round's
fenced / raw (the two measured back to back), with the lowest and highest round's.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import redis
import redis.asyncio

import fencing
import fencing.aio
from fencing import AccessMode, Record
from fencing._sync import reader as sync_reader

from .common import server, table

#: The records one read of an iterated reader asks for: the raw side pages by the same.
PAGE = sync_reader.ITER_RECORDS


def fill(url: str, namespace: str, total: int, size: int) -> str:
    """Write ``total`` records to partition 0 of topic "read"; return its stream key."""
    client = fencing.Client.from_url(url, namespace=namespace)
    topic = client.topic("read", partitions=1)
    batch = [Record(b"x" * size) for _ in range(1000)]
    with topic.producer(AccessMode.EXCLUSIVE) as producer:
        left = total
        while left > 0:
            producer.send_batch(batch[: min(left, 1000)], partition=0)
            left -= 1000
    stream = client.keys.partition("read", 0).stream
    client.close()
    return stream


def sync_sides(url: str, namespace: str, stream: str, total: int) -> tuple[Side, Side]:
    r = redis.Redis.from_url(url)
    client = fencing.Client.from_url(url, namespace=namespace)
    topic = client.topic("read")

    def raw() -> int:
        got = 0
        low: str | bytes = "-"
        while True:
            page = r.xrange(stream, min=low, max="+", count=PAGE)
            if not page:
                return got
            got += len(page)
            last = page[-1][0]
            assert isinstance(last, bytes)
            low = b"(" + last

    def fenced() -> int:
        for got, _record in enumerate(topic.reader(0, "earliest"), 1):
            if got == total:
                return got
        raise AssertionError("unreachable: a reader tails forever")

    return raw, fenced


async def aio_sides(url: str, namespace: str, stream: str, total: int) -> tuple[ASide, ASide]:
    r = redis.asyncio.Redis.from_url(url)
    client = fencing.aio.Client.from_url(url, namespace=namespace)
    topic = client.topic("read")

    async def raw() -> int:
        got = 0
        low: str | bytes = "-"
        while True:
            page = await r.xrange(stream, min=low, max="+", count=PAGE)
            if not page:
                return got
            got += len(page)
            last = page[-1][0]
            assert isinstance(last, bytes)
            low = b"(" + last

    async def fenced() -> int:
        got = 0
        async for _record in await topic.reader(0, "earliest"):
            got += 1
            if got == total:
                return got
        raise AssertionError("unreachable: a reader tails forever")

    return raw, fenced


Side = Callable[[], int]
ASide = Callable[[], Awaitable[int]]


def timed(side: Side, total: int) -> float:
    t0 = time.perf_counter()
    got = side()
    elapsed = time.perf_counter() - t0
    assert got == total, (got, total)
    return got / elapsed


async def atimed(side: ASide, total: int) -> float:
    t0 = time.perf_counter()
    got = await side()
    elapsed = time.perf_counter() - t0
    assert got == total, (got, total)
    return got / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records to read back")
    parser.add_argument("--size", type=int, default=100, help="bytes per record value")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per side")
    args = parser.parse_args()
    total, rounds = args.records, args.rounds

    with server() as s:
        namespace = "br" + uuid.uuid4().hex[:8]
        t0 = time.perf_counter()
        stream = fill(s.url, namespace, total, args.size)
        print(
            f"redis-fencing reader benchmark: {total:,} records of {args.size} B, page {PAGE}, "
            f"{rounds} rounds, filled in {time.perf_counter() - t0:.1f} s; Python "
            f"{platform.python_version()}, redis-py {redis.__version__}, {s.kind} {s.version} "
            f"on 127.0.0.1:{s.port}"
        )

        raw, fenced = sync_sides(s.url, namespace, stream, total)
        sync_raw: list[float] = []
        sync_mine: list[float] = []
        for _ in range(rounds):
            sync_raw.append(timed(raw, total))
            sync_mine.append(timed(fenced, total))

        async def aio() -> tuple[list[float], list[float]]:
            araw, afenced = await aio_sides(s.url, namespace, stream, total)
            base: list[float] = []
            mine: list[float] = []
            for _ in range(rounds):
                base.append(await atimed(araw, total))
                mine.append(await atimed(afenced, total))
            return mine, base

        aio_mine, aio_raw = asyncio.run(aio())

    rows = []
    for name, mine, base, baseline in (
        ("sync: for record in topic.reader(0)", sync_mine, sync_raw, "redis-py XRANGE paging"),
        ("aio: async for record in reader", aio_mine, aio_raw, "redis.asyncio XRANGE paging"),
    ):
        ratios = [m / b for m, b in zip(mine, base, strict=True)]
        rows.append(
            (
                f"{name} (records/s)",
                f"{statistics.median(mine):,.0f}",
                f"{statistics.median(base):,.0f} {baseline}",
                f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}x)",
                ">= 0.9x",
            )
        )
    print(table(rows))


if __name__ == "__main__":
    main()

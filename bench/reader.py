"""Reading a partition back: ``topic.reader(0)`` iterated against raw XRANGE paging.

Run from the repository root:

    .venv/bin/python -m bench.reader                    # 1,000,000 records (about two minutes)
    .venv/bin/python -m bench.reader --records 100000   # a smoke run

One process, one throwaway local server (redis-server from PATH, else Valkey; never port
6379). A one-partition topic is filled with ``--records`` records of ``--size`` bytes
(``send_batch`` of 1,000), and a plain stream with as many one-field entries (``XADD key *
v <value>``, pipelined); each is read from the start to the end, in sync and in asyncio:

- raw, 1 field: redis-py ``XRANGE key (last-id + COUNT page`` over the plain stream, replies
  as bytes (redis-py's own stream parsing), until the stream is exhausted: what reading
  the same values costs without the library;
- raw, own entries: the same paging over the partition's stream key (the library's entries
  carry timestamp, epoch and producer id beside the value);
- fenced: ``for record in topic.reader(0)`` (``async for`` on ``fencing.aio``) until every
  record was seen.

The raw pages use the reader's own page size (the records one read of an iterated reader
asks for). The three sides alternate in rounds (a shared machine drifts); records/s is the
median of the rounds, and a ratio is the median of each round's fenced / raw (measured back
to back), with the lowest and highest round's. The client's CPU time per record
(``time.process_time``) is given beside it: it moves less with the machine's load.
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


def fill_plain(url: str, key: str, total: int, size: int) -> None:
    """Write ``total`` one-field entries (``v``) of ``size`` bytes to a plain stream."""
    r = redis.Redis.from_url(url)
    value = b"x" * size
    left = total
    while left > 0:
        pipe = r.pipeline(transaction=False)
        for _ in range(min(left, 1000)):
            pipe.xadd(key, {"v": value})
        pipe.execute()
        left -= 1000
    r.close()


def sync_paging(r: redis.Redis, stream: str) -> Side:
    """redis-py XRANGE paging over ``stream`` to its end; returns the entries read."""

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

    return raw


def aio_paging(r: redis.asyncio.Redis, stream: str) -> ASide:
    """redis.asyncio XRANGE paging over ``stream`` to its end; returns the entries read."""

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

    return raw


def sync_sides(url: str, namespace: str, streams: tuple[str, str], total: int) -> list[Side]:
    """Raw paging of the plain stream, of the partition's stream, and the reader."""
    r = redis.Redis.from_url(url)
    client = fencing.Client.from_url(url, namespace=namespace)
    topic = client.topic("read")

    def fenced() -> int:
        for got, _record in enumerate(topic.reader(0, "earliest"), 1):
            if got == total:
                return got
        raise AssertionError("unreachable: a reader tails forever")

    return [sync_paging(r, streams[0]), sync_paging(r, streams[1]), fenced]


async def aio_sides(url: str, namespace: str, streams: tuple[str, str], total: int) -> list[ASide]:
    """As :func:`sync_sides`, on redis.asyncio and fencing.aio."""
    r = redis.asyncio.Redis.from_url(url)
    client = fencing.aio.Client.from_url(url, namespace=namespace)
    topic = client.topic("read")

    async def fenced() -> int:
        got = 0
        async for _record in await topic.reader(0, "earliest"):
            got += 1
            if got == total:
                return got
        raise AssertionError("unreachable: a reader tails forever")

    return [aio_paging(r, streams[0]), aio_paging(r, streams[1]), fenced]


Side = Callable[[], int]
ASide = Callable[[], Awaitable[int]]
#: One side's round: (records/s, client CPU seconds per record).
Round = tuple[float, float]


def timed(side: Side, total: int) -> Round:
    t0, c0 = time.perf_counter(), time.process_time()
    got = side()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert got == total, (got, total)
    return got / elapsed, cpu / got


async def atimed(side: ASide, total: int) -> Round:
    t0, c0 = time.perf_counter(), time.process_time()
    got = await side()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert got == total, (got, total)
    return got / elapsed, cpu / got


def rows_of(flavour: str, rounds: list[list[Round]]) -> list[tuple[str, ...]]:
    """Table rows of one flavour: the reader against each raw side, ``rounds[i]`` being
    the i-th round's (plain, own, fenced)."""
    out: list[tuple[str, ...]] = []
    fenced = [r[2] for r in rounds]
    for index, (baseline, target) in enumerate(
        (
            ("XRANGE paging, 1-field plain stream", ">= 0.95x"),
            ("XRANGE paging, own entries", ">= 1.1x"),
        )
    ):
        base = [r[index] for r in rounds]
        ratios = [m[0] / b[0] for m, b in zip(fenced, base, strict=True)]
        cpu = [b[1] / m[1] for m, b in zip(fenced, base, strict=True)]
        out.append(
            (
                f"{flavour} (records/s; CPU µs/record)",
                f"{statistics.median(m[0] for m in fenced):,.0f}; "
                f"{statistics.median(m[1] for m in fenced) * 1e6:.2f}",
                f"{statistics.median(b[0] for b in base):,.0f}; "
                f"{statistics.median(b[1] for b in base) * 1e6:.2f} {baseline}",
                f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}x); "
                f"CPU {statistics.median(cpu):.2f}x",
                target,
            )
        )
    return out


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
        plain = namespace + ":plain"
        fill_plain(s.url, plain, total, args.size)
        streams = (plain, stream)
        print(
            f"redis-fencing reader benchmark: {total:,} records of {args.size} B, page {PAGE}, "
            f"{rounds} rounds, filled in {time.perf_counter() - t0:.1f} s; Python "
            f"{platform.python_version()}, redis-py {redis.__version__}, {s.kind} {s.version} "
            f"on 127.0.0.1:{s.port}"
        )

        sides = sync_sides(s.url, namespace, streams, total)
        sync_rounds = [[timed(side, total) for side in sides] for _ in range(rounds)]

        async def aio() -> list[list[Round]]:
            asides = await aio_sides(s.url, namespace, streams, total)
            return [[await atimed(side, total) for side in asides] for _ in range(rounds)]

        aio_rounds = asyncio.run(aio())

    print(
        table(
            rows_of("sync: for record in topic.reader(0)", sync_rounds)
            + rows_of("aio: async for record in reader", aio_rounds)
        )
    )


if __name__ == "__main__":
    main()

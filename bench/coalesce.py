"""Group commit: single-record sends from many threads or tasks, against raw XADD.

Run from the repository root:

    .venv/bin/python -m bench.coalesce            # every row, ~2 s per side per row (~1 min)
    .venv/bin/python -m bench.coalesce --quick    # shorter, for a smoke run

Rows (one process, one throwaway local server, baselines measured in the same run, the
sides alternating in rounds so a drifting shared machine favours neither):

1. 8 threads each sending single ~100-byte records to one partition through one SHARED
   idempotent producer, against raw redis-py XADD to one stream from 8 threads;
2. 100 asyncio tasks doing the same through one ``fencing.aio`` producer, against raw
   ``redis.asyncio`` XADD from 100 tasks;
3. one thread calling ``send_async()`` then ``flush()`` every 1,000 records, against
   pipelined raw XADD in batches of 100;
4. one send in flight (one thread, ``send()``), against the physical floor of any fenced
   append (a minimal Lua check-and-write script: TIME, one HMGET, XADD, one HSET) and
   against raw XADD.

Every fenced row is read back after the run: each acknowledged value is in the log exactly
once, and nothing else is (the figures count only sends that landed, once).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable

import redis
import redis.asyncio

import fencing
import fencing.aio

from .common import server

VALUE = b"x" * 100
THREADS = 8
TASKS = 100

#: The floor: what any fenced append must do at least (read the fence, write, stamp).
FLOOR_SCRIPT = """
local now = redis.call('TIME')
local meta = redis.call('HMGET', KEYS[1], 'epoch', 'next')
if meta[1] and tonumber(meta[1]) ~= tonumber(ARGV[1]) then
  return redis.error_reply('FENCED')
end
local id = redis.call('XADD', KEYS[2], '*', 'v', ARGV[2])
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'last', now[1])
return id
"""


def threaded_rate(send: Callable[[bytes], object], threads: int, seconds: float) -> float:
    """Sends/s of ``threads`` threads each calling ``send`` for ``seconds``."""
    stop = threading.Event()
    counts = [0] * threads
    tag = uuid.uuid4().hex[:6].encode()

    def worker(i: int) -> None:
        n = 0
        prefix = tag + b"-%d-" % i
        while not stop.is_set():
            send(prefix + b"%d" % n)
            n += 1
        counts[i] = n

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    return sum(counts) / (time.perf_counter() - start)


async def tasks_rate(
    send: Callable[[bytes], Awaitable[object]], tasks: int, seconds: float
) -> float:
    """Sends/s of ``tasks`` tasks each awaiting ``send`` for ``seconds``."""
    stop = asyncio.Event()
    counts = [0] * tasks
    tag = uuid.uuid4().hex[:6].encode()

    async def worker(i: int) -> None:
        n = 0
        prefix = tag + b"-%d-" % i
        while not stop.is_set():
            await send(prefix + b"%d" % n)
            n += 1
        counts[i] = n

    start = time.perf_counter()
    running = [asyncio.create_task(worker(i)) for i in range(tasks)]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*running)
    return sum(counts) / (time.perf_counter() - start)


def rounds_of(
    mine: Callable[[], float], base: Callable[[], float], rounds: int
) -> tuple[float, float]:
    a, b = [], []
    for _ in range(rounds):
        b.append(base())
        a.append(mine())
    return statistics.median(a), statistics.median(b)


def check_log(url: str, namespace: str, topic_name: str) -> int:
    """Every value of the topic's partition 0 is there once; returns how many records."""
    with fencing.Client.from_url(url, namespace=namespace) as client:
        topic = client.topic(topic_name)
        _, end = topic.offsets(0)
        reader = topic.reader(0, start_offset="earliest")
        records: list[fencing.Record] = []
        while len(records) < end:
            records += reader.read(max_records=1000)
    values = [r.value for r in records]
    assert len(values) == len(set(values)), "a value landed twice"
    assert [r.offset for r in records] == list(range(len(records))), "offsets have a gap"
    return len(records)


def row(name: str, mine: float, base: float, base_name: str) -> str:
    return f"| {name} | {mine:,.0f} | {base_name} {base:,.0f} | {mine / base:.2f}x |"


def bench_threads(url: str, seconds: float, rounds: int) -> str:
    raw = redis.Redis.from_url(url, max_connections=THREADS + 2)
    ns = "bench-co-" + uuid.uuid4().hex[:6]
    with fencing.Client.from_url(url, namespace=ns) as client:
        topic = client.topic("t", partitions=1)
        with topic.producer() as producer:
            fenced, base = rounds_of(
                lambda: threaded_rate(lambda v: producer.send(v, partition=0), THREADS, seconds),
                lambda: threaded_rate(lambda v: raw.xadd(ns + ":raw", {"v": v}), THREADS, seconds),
                rounds,
            )
    check_log(url, ns, "t")
    raw.close()
    return row(f"{THREADS} threads, single sends, one partition", fenced, base, "raw XADD")


def bench_tasks(url: str, seconds: float, rounds: int) -> str:
    async def main() -> tuple[float, float]:
        raw = redis.asyncio.Redis.from_url(url, max_connections=TASKS + 2)
        ns = "bench-co-" + uuid.uuid4().hex[:6]
        client = fencing.aio.Client.from_url(url, namespace=ns)
        topic = client.topic("t", partitions=1)
        producer = await topic.producer()
        a, b = [], []
        for _ in range(rounds):
            b.append(await tasks_rate(lambda v: raw.xadd(ns + ":raw", {"v": v}), TASKS, seconds))
            a.append(await tasks_rate(lambda v: producer.send(v, partition=0), TASKS, seconds))
        await producer.close()
        await client.close()
        await raw.aclose()
        check_log(url, ns, "t")
        return statistics.median(a), statistics.median(b)

    fenced, base = asyncio.run(main())
    return row(f"{TASKS} asyncio tasks, single sends, one partition", fenced, base, "raw XADD")


def bench_send_async(url: str, seconds: float, rounds: int) -> str:
    raw = redis.Redis.from_url(url)
    ns = "bench-co-" + uuid.uuid4().hex[:6]

    def pipelined() -> float:
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            pipe = raw.pipeline(transaction=False)
            for i in range(100):
                pipe.xadd(ns + ":raw", {"v": VALUE + b"%d" % i})
            pipe.execute()
            done += 100
        return done / (time.perf_counter() - start)

    with fencing.Client.from_url(url, namespace=ns) as client:
        topic = client.topic("t", partitions=1)
        with topic.producer() as producer:
            counter = iter(range(10**9))

            def streamed() -> float:
                done, start = 0, time.perf_counter()
                while time.perf_counter() - start < seconds:
                    futures = [
                        producer.send_async(b"%d" % next(counter), partition=0) for _ in range(1000)
                    ]
                    producer.flush()
                    for f in futures:
                        f.result()
                    done += 1000
                return done / (time.perf_counter() - start)

            fenced, base = rounds_of(streamed, pipelined, rounds)
    check_log(url, ns, "t")
    raw.close()
    return row("1 thread, send_async() + flush()", fenced, base, "pipelined XADD x100")


def bench_one_in_flight(url: str, seconds: float, rounds: int) -> list[str]:
    raw = redis.Redis.from_url(url)
    ns = "bench-co-" + uuid.uuid4().hex[:6]
    floor = raw.register_script(FLOOR_SCRIPT)
    keys = [f"{ns}:{{f}}:meta", f"{ns}:{{f}}:stream"]

    def timed(fn: Callable[[], object]) -> float:
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(100):
                fn()
            done += 100
        return done / (time.perf_counter() - start)

    with fencing.Client.from_url(url, namespace=ns) as client:
        topic = client.topic("t", partitions=1)
        with topic.producer() as producer:
            n = iter(range(10**9))
            fenced, floor_rate = rounds_of(
                lambda: timed(lambda: producer.send(b"%d" % next(n), partition=0)),
                lambda: timed(lambda: floor(keys=keys, args=[1, VALUE])),
                rounds,
            )
            _, xadd_rate = rounds_of(
                lambda: 1.0, lambda: timed(lambda: raw.xadd(ns + ":raw", {"v": VALUE})), rounds
            )
    check_log(url, ns, "t")
    raw.close()
    return [
        row("1 send in flight", fenced, floor_rate, "minimal check-and-write script"),
        row("1 send in flight", fenced, xadd_rate, "raw XADD"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter rounds (smoke run)")
    args = parser.parse_args()
    seconds, rounds = (0.3, 3) if args.quick else (1.0, 5)
    print(f"# bench.coalesce on {platform.node()} ({platform.python_version()})")
    print("| case | fenced sends/s | baseline sends/s | ratio |")
    print("|---|---|---|---|")
    with server() as s:
        url = s.url
        print(bench_threads(url, seconds, rounds), flush=True)
        print(bench_tasks(url, seconds, rounds), flush=True)
        print(bench_send_async(url, seconds, rounds), flush=True)
        for line in bench_one_in_flight(url, seconds, rounds):
            print(line, flush=True)


if __name__ == "__main__":
    main()

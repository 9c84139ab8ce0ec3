"""Group commit: single-record sends from many threads or tasks, against raw XADD.

Run from the repository root:

    .venv/bin/python -m bench.coalesce            # every row, ~2 s per side per row (~1 min)
    .venv/bin/python -m bench.coalesce --quick    # shorter, for a smoke run
    .venv/bin/python -m bench.coalesce --why      # the 8-thread row, and where its time goes

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
import itertools
import platform
import resource
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable

import redis
import redis.asyncio

import fencing
import fencing.aio
from fencing._sync.group_send import GroupSend

from . import machine
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


class Cost:
    """What one side of a row cost this process and the server per send: CPU µs (all the
    process's threads; the server's own by ``INFO cpu``) and context switches."""

    def __init__(self, server_client: redis.Redis) -> None:
        self.server = server_client
        self.sends = 0.0
        self.cpu = self.server_cpu = self.switches = 0.0

    def _server_cpu(self) -> float:
        info = self.server.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def measure(self, run: Callable[[], float], seconds: float) -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu, server_cpu = time.process_time(), self._server_cpu()
        rate = run()
        after = resource.getrusage(resource.RUSAGE_SELF)
        self.sends += rate * seconds
        self.cpu += time.process_time() - cpu
        self.server_cpu += self._server_cpu() - server_cpu
        self.switches += (after.ru_nvcsw + after.ru_nivcsw) - (usage.ru_nvcsw + usage.ru_nivcsw)
        return rate

    def __str__(self) -> str:
        n = max(self.sends, 1.0)
        return (
            f"client CPU {1e6 * self.cpu / n:.0f} µs/send, server CPU "
            f"{1e6 * self.server_cpu / n:.0f} µs/send, {self.switches / n:.1f} context "
            "switches/send"
        )


class CycleTrace:
    """Times every call of a sync partition queue (``GroupSend._send_group``) and every wait
    for the callers it answered to run again (``PartitionQueue._let_answered_run``): a cycle
    is one, then the other.
    (Wraps two private methods for the length of a ``with``; a diagnostic, not an API.)"""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []  # (start ns, end ns, records)

    def __enter__(self) -> CycleTrace:
        self._kept = GroupSend._send_group
        calls, kept, clock = self.calls, self._kept, time.perf_counter_ns

        def timed(sending: GroupSend, group: list[object], done: object) -> None:
            start = clock()
            try:
                kept(sending, group, done)  # type: ignore[arg-type]
            finally:
                calls.append((start, clock(), len(group)))

        GroupSend._send_group = timed  # type: ignore[assignment,method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        GroupSend._send_group = self._kept  # type: ignore[method-assign]

    def medians(self) -> tuple[float, float, float]:
        """Median µs of a call, median µs from a call's end to the next one's start, and
        the mean records per call."""
        calls = sorted(self.calls)
        call_us = statistics.median((end - start) / 1e3 for start, end, _ in calls)
        gap_us = statistics.median(
            (nxt[0] - prev[1]) / 1e3 for prev, nxt in itertools.pairwise(calls)
        )
        return call_us, gap_us, statistics.mean(n for _, _, n in calls)

    def __str__(self) -> str:
        if len(self.calls) < 2:
            return "too few calls to trace"
        call_us, gap_us, group = self.medians()
        return (
            f"{len(self.calls):,} calls of {group:.1f} records on average; a call takes "
            f"{call_us:.0f} µs (median), and {gap_us:.0f} µs pass before the next leaves "
            f"(waking the answered callers, one after the other, and their next sends): "
            f"{group:.1f} / ({call_us:.0f} + {gap_us:.0f}) µs = "
            f"{1e6 * group / (call_us + gap_us):,.0f} sends/s"
        )


def why_threads(url: str, seconds: float, rounds: int) -> None:
    """The 8-thread row with what each side cost, and the fenced side's cycle: a call, then
    the wait for the callers it answered to be woken and send again."""
    figures = machine.probe(url)
    print(f"machine: {machine.describe(figures)}")
    raw = redis.Redis.from_url(url, max_connections=THREADS + 2)
    ns = "bench-co-" + uuid.uuid4().hex[:6]
    fenced_cost, raw_cost = Cost(raw), Cost(raw)
    trace = CycleTrace()
    with fencing.Client.from_url(url, namespace=ns) as client:
        topic = client.topic("t", partitions=1)
        with topic.producer() as producer:
            raw.config_resetstat()  # (the bench's own throwaway server)

            def fenced_side() -> float:
                with trace:
                    return threaded_rate(lambda v: producer.send(v, partition=0), THREADS, seconds)

            fenced, base = rounds_of(
                lambda: fenced_cost.measure(fenced_side, seconds),
                lambda: raw_cost.measure(
                    lambda: threaded_rate(
                        lambda v: raw.xadd(ns + ":raw", {"v": v}), THREADS, seconds
                    ),
                    seconds,
                ),
                rounds,
            )
    stats = raw.info("commandstats")  # this run's own server: reset below, before the rounds
    check_log(url, ns, "t")
    raw.close()
    print(row(f"{THREADS} threads, single sends, one partition", fenced, base, "raw XADD"))
    print(f"fenced: {fenced_cost}")
    print(f"raw XADD: {raw_cost}")
    print(f"fenced cycle: {trace}")
    script = float(stats.get("cmdstat_evalsha", {}).get("usec_per_call", 0.0))
    if trace.calls:
        call_us, gap_us, group = trace.medians()
        print(
            f"where a cycle goes: the call's {call_us:.0f} µs hold the script's {script:.0f} "
            f"on the server and a round trip (PING: {float(figures['ping_us']):.0f} µs); "
            f"the {gap_us:.0f} µs after it are {group:.1f} callers woken one after the other, "
            f"{gap_us / group:.0f} µs each (this machine's thread hand-off: "
            f"{float(figures['handoff_us']):.0f} µs). Overlapping the wake-ups with the call "
            "instead halves the groups (measured no faster)."
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter rounds (smoke run)")
    parser.add_argument(
        "--why", action="store_true", help="only the 8-thread row, and where its time goes"
    )
    args = parser.parse_args()
    seconds, rounds = (0.3, 3) if args.quick else (1.0, 5)
    if args.why:
        with server() as s:
            why_threads(s.url, seconds, rounds)
        return
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

"""How cost grows with the work: each operation over 16 to 4,096 partitions or resources,
and the Redis memory of each kind of state.

    .venv/bin/python -m bench.curves               # N = 16, 64, 256, 1024, 4096: a few minutes
    .venv/bin/python -m bench.curves --quick       # stop at N = 1024
    .venv/bin/python -m bench.curves --why 1024    # where one N's time goes (cProfile, stats)

Operations, each on a topic of N partitions (or N ownership resources) made for that N:

- exclusive open: ``topic.producer(AccessMode.EXCLUSIVE)`` (closed again between rounds);
- consumer open: ``topic.consumer(group, member, partitions=all N)``;
- poll: ``consumer.poll(100, block_ms=0)`` of that consumer on the empty topic (a caught-up
  consumer: the grant check and one read per partition, nothing returned);
- claim: ``client.ownership(...).claim([N resources])`` (released between rounds);
- status: the ``fencing status TOPIC`` command, in process, output discarded.

Each is the median of ROUNDS calls, with the per-partition figure (ms / N), the client's
requests per partition (a pipeline counts once) and the server's commands per partition
(``INFO commandstats``, scripts' inner calls included). A constant ms / N down the column is
linear; a column that grows with N is not.

Memory (``MEMORY USAGE`` of every key of a fresh namespace, before and after, divided):
an empty partition's keys; a producer's rows and PID state per partition; one duplicate-
window entry (W = 1,000); one message-id window entry (12-character ids).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import redis

import fencing
from fencing import AccessMode, Record
from fencing.cli import main as cli_main

from .common import RoundTrips, server, table

SIZES = (16, 64, 256, 1024, 4096)
ROUNDS = 3
OPS = ("exclusive open", "consumer open", "poll", "claim", "status")


def commands(r: redis.Redis) -> int:
    """Commands the server ran so far (scripts' inner calls included)."""
    stats: dict[str, Any] = r.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


class Measure:
    """Times one call and counts its requests and server commands."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self.ms: list[float] = []
        self.requests: list[int] = []
        self.commands: list[int] = []

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        before = commands(self.r)
        with RoundTrips() as trips:
            t0 = time.perf_counter()
            yield
            elapsed = time.perf_counter() - t0
        self.ms.append(elapsed * 1e3)
        self.requests.append(trips.count)
        self.commands.append(commands(self.r) - before - 1)  # less the INFO of `before`


class Ops:
    """The five operations on one topic of ``n`` partitions, each a callable that does the
    work once (timed inside with ``measure``) and undoes it after."""

    def __init__(self, url: str, n: int) -> None:
        self.url, self.n = url, n
        self.namespace = "c" + uuid.uuid4().hex[:8]
        self.client = fencing.Client.from_url(url, namespace=self.namespace)
        self.topic = self.client.topic("t", partitions=n)
        self.topic.open()

    def exclusive_open(self, measure: Callable[[], Any]) -> None:
        with measure():
            p = self.topic.producer(AccessMode.EXCLUSIVE)
        p.close()

    def consumer_open(self, measure: Callable[[], Any]) -> None:
        with measure():
            c = self.topic.consumer("g", member_id="m", partitions=range(self.n))
        c.close()

    def poll(self, measure: Callable[[], Any], rounds: int) -> None:
        with self.topic.consumer("g", member_id="m", partitions=range(self.n)) as c:
            c.poll(100, block_ms=0)  # warm: every reader placed
            for _ in range(rounds):
                with measure():
                    c.poll(100, block_ms=0)

    def claim(self, measure: Callable[[], Any]) -> None:
        owner = self.client.ownership(group="bench", owner_id="o", ttl=30.0)
        resources = [f"res/{i}" for i in range(self.n)]
        with measure():
            owner.claim(resources)
        owner.close()

    def status(self, measure: Callable[[], Any]) -> None:
        argv = ["status", "t", "--url", self.url, "--namespace", self.namespace]
        with contextlib.redirect_stdout(io.StringIO()), measure():
            rc = cli_main(argv)
        assert rc == 0, rc

    def run(self, op: str, measure: Callable[[], Any], rounds: int) -> None:
        if op == "poll":
            self.poll(measure, rounds)
            return
        fn = {
            "exclusive open": self.exclusive_open,
            "consumer open": self.consumer_open,
            "claim": self.claim,
            "status": self.status,
        }[op]
        for _ in range(rounds):
            fn(measure)

    def close(self) -> None:
        self.client.close()


def curves(url: str, sizes: tuple[int, ...], rounds: int) -> dict[str, list[tuple[str, ...]]]:
    r = redis.Redis.from_url(url)
    rows: dict[str, list[tuple[str, ...]]] = {op: [] for op in OPS}
    for n in sizes:
        ops = Ops(url, n)
        for op in OPS:
            m = Measure(r)
            ops.run(op, m, rounds)
            ms = statistics.median(m.ms)
            rows[op].append(
                (
                    f"{n:,}",
                    f"{ms:,.1f}",
                    f"{ms / n:.3f}",
                    f"{statistics.median(m.requests) / n:.2f}",
                    f"{statistics.median(m.commands) / n:.1f}",
                    " / ".join(f"{x:,.0f}" for x in m.ms),
                )
            )
            print(f"  N={n:5d} {op:15s} {ms:9.1f} ms  {ms / n:.3f} ms/partition", flush=True)
        ops.close()
    r.close()
    return rows


# -- memory -------------------------------------------------------------------------------


def used(r: redis.Redis, namespace: str) -> int:
    """Bytes of every key of ``namespace`` (``MEMORY USAGE``, exact: SAMPLES 0)."""
    return sum(
        r.memory_usage(k, samples=0) or 0 for k in r.scan_iter(match=f"{namespace}:*", count=1000)
    )


def memory(url: str) -> list[tuple[str, str, str]]:
    r = redis.Redis.from_url(url)
    out: list[tuple[str, str, str]] = []

    # An empty partition: a topic of 1,024 partitions against one of 1 (the topic's own keys).
    ns1, ns2 = "m" + uuid.uuid4().hex[:8], "m" + uuid.uuid4().hex[:8]
    with (
        fencing.Client.from_url(url, namespace=ns1) as c1,
        fencing.Client.from_url(url, namespace=ns2) as c2,
    ):
        c1.topic("t", partitions=1).open()
        c2.topic("t", partitions=1025).open()
        per = (used(r, ns2) - used(r, ns1)) / 1024
    out.append(("an empty partition's keys", f"{per:,.0f}", "topic of 1,025 less one of 1"))

    # A producer: 100 SHARED idempotent producers each send one batch to every partition of
    # a 4-partition topic (so each has its row and its PID state there); records excluded
    # by measuring the same sends from one producer.
    ns = "m" + uuid.uuid4().hex[:8]
    with fencing.Client.from_url(url, namespace=ns) as c:
        topic = c.topic("t", partitions=4)
        with topic.producer() as p0:
            for part in range(4):
                p0.send_batch([b"v"], partition=part)
            before = used(r, ns)
            producers = [topic.producer() for _ in range(100)]
            for p in producers:
                for part in range(4):
                    p.send_batch([b"v"], partition=part)
            after_sends = used(r, ns)
            # the records alone: as many again from the one producer
            for _ in range(100):
                for part in range(4):
                    p0.send_batch([b"v"], partition=part)
            records = used(r, ns) - after_sends
            per = (after_sends - before - records) / (100 * 4)
            for p in producers:
                p.close()
    out.append(
        ("a producer, per partition (its row, PID state, a 1-batch window)", f"{per:,.0f}",
         "100 producers x 4 partitions, records subtracted")
    )  # fmt: skip

    out.extend(window_rows(url, r))
    r.close()
    return out


def window_rows(url: str, r: redis.Redis) -> list[tuple[str, str, str]]:
    """Bytes per duplicate-window entry and per message-id entry (full windows)."""
    from fencing._sync.metadata import metadata_of  # noqa: PLC0415 - the keys of a partition

    rows = []
    ns = "m" + uuid.uuid4().hex[:8]
    with fencing.Client.from_url(url, namespace=ns) as c:
        per_w = {}
        for w in (1, 1000):
            topic = c.topic(f"w{w}", partitions=1, dedup_window=w)
            ps = [topic.producer() for _ in range(10)]
            for p in ps:
                for _ in range(w + 10):
                    p.send_batch([b"v"], partition=0)
            pk = metadata_of(topic).partition_keys(0)
            per_w[w] = sum(r.memory_usage(k, samples=0) or 0 for k in (pk.pids, pk.window)) / 10
            for p in ps:
                p.close()
        entry = (per_w[1000] - per_w[1]) / 999
        rows.append(
            ("a duplicate-window entry", f"{entry:,.0f}",
             f"(W=1,000 less W=1) / 999, 10 producers; W=1,000: {per_w[1000] / 1e3:,.1f} KB each")
        )  # fmt: skip
        topic = c.topic("ids", partitions=1, message_id_window=10_000)
        with topic.producer() as p:
            for start in range(0, 20_000, 500):
                p.send_batch(
                    [Record(b"v", message_id=f"in/{i:09d}") for i in range(start, start + 500)],
                    partition=0,
                )
        pk = metadata_of(topic).partition_keys(0)
        held = r.hlen(pk.message_ids)
        total = sum(
            r.memory_usage(k, samples=0) or 0 for k in (pk.message_ids, pk.message_id_queue)
        )
        rows.append(
            ("a message-id window entry (12-character ids)", f"{total / held:,.0f}",
             f"a full window of {held:,} ids: {total / 1e6:.2f} MB")
        )  # fmt: skip
    return rows


# -- where the time goes ------------------------------------------------------------------


class Sampler:
    """Samples the innermost frames of the client's other threads (the notification
    listener, the keeper) every millisecond: cProfile sees only the calling thread."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me, main_id = threading.get_ident(), threading.main_thread().ident
        names = {}
        while not self._stop.wait(0.001):
            for ident, frame in sys._current_frames().items():
                if ident in (me, main_id):
                    continue
                if ident not in names:
                    names = {t.ident: t.name for t in threading.enumerate()}
                code = frame.f_code
                where = f"{code.co_filename.rsplit('/', 2)[-1]}:{frame.f_lineno} {code.co_name}"
                self.counts[(names.get(ident, "?"), where)] += 1


def why(url: str, n: int) -> None:
    """Each operation once at ``n``: the client's cProfile (top by own time) and the
    server's commands (calls and µs per call, ``INFO commandstats``)."""
    r = redis.Redis.from_url(url)
    ops = Ops(url, n)
    for op in OPS:
        ops.run(op, contextlib.nullcontext, 1)  # warm (scripts loaded, readers)
        r.config_resetstat()
        prof = cProfile.Profile()

        @contextlib.contextmanager
        def profiled(prof: cProfile.Profile = prof) -> Iterator[None]:
            prof.enable()
            try:
                yield
            finally:
                prof.disable()

        t0 = time.perf_counter()
        with Sampler() as sampler:
            ops.run(op, profiled, 1)
        wall = (time.perf_counter() - t0) * 1e3
        stats: dict[str, Any] = r.info("commandstats")
        print(f"\n== {op}, N={n}: {wall:.0f} ms wall (profiled) ==")
        print("server commands (calls, calls/partition, µs/call, total ms):")
        for k, v in sorted(stats.items(), key=lambda kv: -float(kv[1]["usec"])):
            if k == "cmdstat_info":
                continue
            print(
                f"  {k[8:]:22s} {int(v['calls']):8d} {int(v['calls']) / n:8.2f}"
                f" {float(v['usec_per_call']):9.1f} {int(v['usec']) / 1e3:9.1f}"
            )
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
        print("client, top by own time:")
        print("\n".join([line for line in s.getvalue().splitlines() if line.strip()][3:]))
        print("other threads, samples every 1 ms (thread, innermost frame):")
        for (thread, where), count in sampler.counts.most_common(8):
            print(f"  {count:6d}  {thread:28s} {where}")
    ops.close()
    r.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="stop at N = 1,024")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="calls per operation and N")
    parser.add_argument("--why", type=int, metavar="N", help="profile each operation at N")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory figures")
    args = parser.parse_args()
    with server() as s:
        print(f"server: {s.kind} {s.version}")
        if args.why:
            why(s.url, args.why)
            return
        sizes = tuple(n for n in SIZES if not args.quick or n <= 1024)
        rows = curves(s.url, sizes, args.rounds)
        head = ("N", "ms (median)", "ms / partition", "requests / partition",
                "server commands / partition", f"{args.rounds} calls, ms")  # fmt: skip
        for op in OPS:
            print(f"\n{op}")
            print(table(rows[op], head=head))
        if not args.no_memory:
            print()
            print(table(memory(s.url), head=("state", "bytes", "how")))


if __name__ == "__main__":
    main()

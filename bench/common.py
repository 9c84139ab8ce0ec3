"""Shared helpers for the benchmarks: a throwaway server, a local Spark session, timing,
percentiles, a table."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from fencing.embedded import EmbeddedServer


@contextmanager
def server() -> Iterator[EmbeddedServer]:
    """A throwaway local server (redis-server from PATH, else Valkey) for one bench run."""
    with EmbeddedServer.start() as s:
        yield s


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spark_session(config: Mapping[str, str] | None = None) -> Any:
    """A SparkSession on ``local[2]`` whose Python workers run this interpreter and import
    the library from this checkout (needs the spark extra and Java 17); ``config`` adds
    settings.

    >>> spark = spark_session({"spark.python.worker.reuse": "true"})  # doctest: +SKIP
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    from pyspark.sql import SparkSession  # noqa: PLC0415 - the spark extra

    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def rate(fn: Callable[[], int], seconds: float) -> float:
    """Items per second: call ``fn`` (returns items done) repeatedly for ``seconds``."""
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        done += fn()
        now = time.perf_counter()
        if now >= deadline:
            return done / (now - start)


def paired_rates(
    mine: Callable[[], int], base: Callable[[], int], seconds: float, rounds: int = 5
) -> tuple[float, float]:
    """Median items/s of ``mine`` and ``base``, measured in alternating rounds.

    Alternating cancels slow drifts of a shared machine (other tenants, CPU frequency)
    that would otherwise favour whichever side ran in the quieter moment.
    """
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        b.append(rate(base, seconds / rounds))
        a.append(rate(mine, seconds / rounds))
    return statistics.median(a), statistics.median(b)


def paired_latencies(
    mine: Callable[[], object], base: Callable[[], object], count: int, rounds: int = 5
) -> tuple[list[float], list[float]]:
    """Per-call seconds of ``mine`` and ``base``, measured in alternating blocks."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        b += latencies(base, count // rounds)
        a += latencies(mine, count // rounds)
    return a, b


def latencies(fn: Callable[[], object], count: int) -> list[float]:
    """Seconds per call of ``fn``, ``count`` times (after a short warm-up)."""
    for _ in range(min(200, count)):
        fn()
    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0..100)."""
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[idx]


def median(values: list[float]) -> float:
    return statistics.median(values)


class RoundTrips:
    """Counts requests written to Redis (one per round trip for non-pipelined calls)."""

    def __init__(self) -> None:
        self.count = 0
        self._original = redis.connection.AbstractConnection.send_packed_command

    def __enter__(self) -> RoundTrips:
        original = self._original
        counter = self

        def counting(
            conn: redis.connection.AbstractConnection, command: object, check_health: bool = True
        ) -> None:
            counter.count += 1
            original(conn, command, check_health)  # type: ignore[arg-type]

        redis.connection.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        redis.connection.AbstractConnection.send_packed_command = self._original  # type: ignore[method-assign]


def table(
    rows: Sequence[tuple[str, ...]],
    head: tuple[str, ...] = (
        "benchmark",
        "redis-fencing",
        "baseline",
        "ratio",
        "target",
    ),
) -> str:
    """A plain-text table of as many columns as ``head``, by default: benchmark, fenced,
    baseline, ratio, target."""
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)

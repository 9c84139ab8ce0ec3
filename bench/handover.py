"""WAIT_FOR_EXCLUSIVE handover latency, after a graceful close and after a crash.

Run from the repository root::

    python -m bench.handover                # or: python bench/handover.py
    python -m bench.handover --graceful 30 --crash 10 --graceful-ttl 2.0 --crash-ttl 0.5

It starts a throwaway server (``fencing.embedded.EmbeddedServer``) and a waiter process.
Both ends of every measurement are read from the Redis server's clock (``TIME``), the one
clock the two processes share, so the figures do not depend on how two processes' clocks
agree:

- graceful: the holder (this process) reads ``TIME`` (t0) and closes its producer; the
  waiter, queued in another process, reads ``TIME`` (t1) as soon as ``producer()``
  returns. The waiter's lease is long enough that only the release notification can wake it
  this fast (its fallback poll is every ttl/3). Measured twice: closing once the waiter has
  been queued a while (the usual case), and closing the moment it has queued (the waiter
  is then still subscribing to the release channel).
- crash: the holder is a process of its own; this process reads ``TIME`` (t0) and
  SIGKILLs it; the waiter is granted once the holder's lease lapses by server time. The
  lapse itself is bounded by the lease (renewed every ttl/3, so 2/3 to 1 ttl is left at a
  random kill); the table also shows the part after the lease ended (t1 - lease expiry),
  which is what the library adds.

Both include the round trips that read ``TIME``; the baseline row is one such round trip.
p99 is the nearest rank: with fewer than 100 samples it is the largest one.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import multiprocessing.connection
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

import fencing
from fencing._sync.metadata import metadata_of
from fencing.embedded import EmbeddedServer

TOPIC = "handover"
WAIT = fencing.AccessMode.WAIT_FOR_EXCLUSIVE
STEP_TIMEOUT = 15.0  # bound on every wait for another process
REPRODUCE = "python -m bench.handover"


def server_us(r: redis.Redis) -> int:
    """The server's clock, in microseconds."""
    seconds, micros = r.time()
    return int(seconds) * 1_000_000 + int(micros)


# -- child processes ----------------------------------------------------------------------------


def _waiter(url: str, namespace: str, conn: multiprocessing.connection.Connection) -> None:
    """On each ("wait", ttl): queue for the partition, report TIME once granted, close."""
    client = fencing.Client.from_url(url, namespace=namespace)
    r = redis.Redis.from_url(url)
    topic = client.topic(TOPIC, partitions=1)
    try:
        while True:
            command = conn.recv()
            if command[0] == "quit":
                return
            _, ttl = command
            producer = topic.producer(WAIT, name="waiter", lease_ttl=ttl, wait_timeout=STEP_TIMEOUT)
            t1 = server_us(r)
            producer.close()
            conn.send(("granted", t1, producer.producer_id))
    finally:
        r.close()
        client.close()


def _holder(
    url: str, namespace: str, ttl: float, conn: multiprocessing.connection.Connection
) -> None:
    """Hold the partition (the keeper renews the lease) until killed."""
    client = fencing.Client.from_url(url, namespace=namespace)
    topic = client.topic(TOPIC, partitions=1)
    producer = topic.producer(WAIT, name="holder", lease_ttl=ttl, wait_timeout=STEP_TIMEOUT)
    conn.send(("holding", producer.epoch(0)))
    conn.recv()  # never comes: the bench SIGKILLs this process
    producer.close()
    client.close()


# -- the bench -----------------------------------------------------------------------------------


def _recv(conn: multiprocessing.connection.Connection, what: str) -> Any:
    if not conn.poll(STEP_TIMEOUT):
        raise RuntimeError(f"no {what} within {STEP_TIMEOUT}s")
    return conn.recv()


def _until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {STEP_TIMEOUT}s")
        time.sleep(0.0005)


class Bench:
    def __init__(self, url: str) -> None:
        self.url = url
        self.namespace = "bench" + secrets.token_hex(4)
        self.ctx = multiprocessing.get_context("spawn")
        self.client = fencing.Client.from_url(url, namespace=self.namespace)
        self.topic = self.client.topic(TOPIC, partitions=1)
        self.keys = metadata_of(self.topic).partition_keys(0)
        self.r = redis.Redis.from_url(url)
        self.conn, theirs = self.ctx.Pipe()
        self.waiter = self.ctx.Process(
            target=_waiter, args=(url, self.namespace, theirs), name="waiter"
        )
        self.waiter.start()
        theirs.close()

    def _queue_waiter(self, ttl: float) -> None:
        self.conn.send(("wait", ttl))
        _until(lambda: self.r.zcard(self.keys.waiters) == 1, "the waiter queuing")

    def baseline(self, n: int) -> list[float]:
        """One TIME round trip, in ms."""
        for _ in range(20):  # warm up the connection
            self.r.time()
        out = []
        for _ in range(n):
            start = time.perf_counter()
            self.r.time()
            out.append((time.perf_counter() - start) * 1000)
        return out

    def graceful(self, n: int, ttl: float, *, settled: bool) -> list[float]:
        """Close the holder once the waiter is queued: at once, or after it has settled
        (been queued 0.3 to 0.6 s, so its release subscription is surely confirmed)."""
        out = []
        for _ in range(n):
            holder = self.topic.producer(fencing.AccessMode.EXCLUSIVE, name="holder", lease_ttl=ttl)
            self._queue_waiter(ttl)
            if settled:
                time.sleep(0.3 + 0.3 * secrets.randbelow(1000) / 1000)
            t0 = server_us(self.r)
            holder.close()
            _, t1, _ = _recv(self.conn, "grant after a close")
            out.append((t1 - t0) / 1000)
        return out

    def crash(self, n: int, ttl: float) -> tuple[list[float], list[float]]:
        total, after_expiry = [], []
        for _ in range(n):
            ours, theirs = self.ctx.Pipe()
            holder = self.ctx.Process(
                target=_holder, args=(self.url, self.namespace, ttl, theirs), name="holder"
            )
            holder.start()
            theirs.close()
            try:
                _recv(ours, "the holder's grant")
                self._queue_waiter(ttl)
                time.sleep(ttl * secrets.randbelow(1000) / 1000)  # kill at a random point
                t0 = server_us(self.r)
                holder.kill()
                holder.join(STEP_TIMEOUT)
                expires_ms = int(self.r.hget(self.keys.owner, "expires") or 0)
                _, t1, _ = _recv(self.conn, "grant after a crash")
            finally:
                if holder.is_alive():
                    holder.kill()
                holder.join(STEP_TIMEOUT)
                ours.close()
            total.append((t1 - t0) / 1000)
            after_expiry.append(t1 / 1000 - expires_ms)
        return total, after_expiry

    def close(self) -> None:
        try:
            self.conn.send(("quit",))
            self.waiter.join(STEP_TIMEOUT)
        finally:
            if self.waiter.is_alive():
                self.waiter.kill()
                self.waiter.join(STEP_TIMEOUT)
            self.conn.close()
            self.r.close()
            self.client.close()


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def row(label: str, samples: list[float]) -> str:
    return (
        f"{label:<44} {len(samples):>4} {percentile(samples, 50):>9.2f} "
        f"{percentile(samples, 99):>9.2f} {max(samples):>9.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--graceful", type=int, default=30, help="graceful handovers")
    parser.add_argument("--crash", type=int, default=10, help="handovers after SIGKILL")
    parser.add_argument("--graceful-ttl", type=float, default=2.0, help="lease (s), graceful")
    parser.add_argument("--crash-ttl", type=float, default=0.5, help="lease (s), crash")
    args = parser.parse_args(argv)

    started = time.monotonic()
    with EmbeddedServer.start() as server:
        bench = Bench(server.url)
        try:
            base = bench.baseline(200)
            graceful = bench.graceful(args.graceful, args.graceful_ttl, settled=True)
            hasty = bench.graceful(args.graceful, args.graceful_ttl, settled=False)
            crash, after_expiry = bench.crash(args.crash, args.crash_ttl)
        finally:
            bench.close()
        version = f"{server.kind} {server.version}"

    print(f"WAIT_FOR_EXCLUSIVE handover latency, ms of server time ({version}, pid {os.getpid()})")
    print(f"{'':<44} {'n':>4} {'p50':>9} {'p99':>9} {'max':>9}")
    print(row("baseline: one TIME round trip", base))
    print(row(f"graceful close (lease_ttl={args.graceful_ttl}s)", graceful))
    print(row("graceful close just as the waiter queued", hasty))
    print(row(f"crash, SIGKILL (lease_ttl={args.crash_ttl}s)", crash))
    print(row("  of which after the lease expired", after_expiry))
    ratio = statistics.median(graceful) / statistics.median(base)
    print(f"graceful handover p50 = {ratio:.1f}x a TIME round trip")
    print(f"took {time.monotonic() - started:.1f}s; reproduce: {REPRODUCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

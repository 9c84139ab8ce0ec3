"""Leader-election failover: after a crash (SIGKILL) and after a resign, p50/p99 over runs.

Run from the repository root::

    .venv/bin/python -m bench.failover              # 20 crash runs, 200 resign runs (~40 s)
    .venv/bin/python -m bench.failover --quick      # 5 and 50, a smoke run (< 15 s)
    .venv/bin/python -m bench.failover --crash 50 --resign 500 --ttl 2.0

It starts a throwaway server (redis-server from PATH, else Valkey) and one standby process
that campaigns (``election.campaign()``) on each command and reports ``time.monotonic()``
the moment ``campaign`` returns, then leaves the block (resigns). ``time.monotonic`` is
CLOCK_MONOTONIC, one clock for every process of the machine, so the two ends of a
measurement, taken in different processes, compare directly.

- crash: the leader is a process of its own (multiprocessing, spawn), elected before the
  standby queues; once the standby waits in ``campaign``, this process SIGKILLs the leader
  at a random point of its renewal cycle (t0 = ``time.monotonic()`` right before
  ``os.kill``). The standby is elected once the dead leader's lease lapses by server time,
  so the total is bounded by the lease: a leader renews every ``renew_deadline / 4`` (ttl/6
  by default), so 5/6 to 1 ttl of it is left at a random kill. The table splits it: the
  lease left at the kill (row ``expires`` minus a ``TIME`` read just before the kill), and
  the part after the lease ended (the new term's start, by the server clock of the claim
  script, minus the dead leader's ``expires``), which is what the library adds: a waiting
  candidate sleeps until the lease end + 2 ms (or a 1 s re-check), then claims.
- resign: the leader is this process (a client of its own); once the standby waits in
  ``campaign`` and has settled (20 to 60 ms), t0 = ``time.monotonic()`` right before the
  ``with`` block is left. The release notification wakes the standby, not the lease.

Figures are in ms; p99 is ``bench.common.pct`` (with fewer than 100 runs it is the largest).
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

import fencing
from fencing._keys import ELECTION_GROUP

from .common import pct, server

NAME = "failover"
STEP_TIMEOUT = 15.0  # bound on every wait for another process
REPRODUCE = ".venv/bin/python -m bench.failover"

Conn = multiprocessing.connection.Connection


def server_ms(r: redis.Redis) -> float:
    """The server's clock, in milliseconds since the epoch."""
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) / 1000


# -- child processes ----------------------------------------------------------------------------


def _standby(url: str, namespace: str, ttl: float, conn: Conn) -> None:
    """On each "campaign": wait to be elected, note the time, resign, report."""
    client = fencing.Client.from_url(url, namespace=namespace)
    election = client.election(NAME, "standby", ttl=ttl)
    try:
        while True:
            if conn.recv()[0] == "quit":
                return
            with election.campaign(timeout=STEP_TIMEOUT) as leadership:
                t1 = time.monotonic()
                token = leadership.token
                started_ms = leadership.term_started * 1000
            conn.send(("elected", t1, token, started_ms))
    finally:
        election.close()
        client.close()


def _leader(url: str, namespace: str, ttl: float, conn: Conn) -> None:
    """Wait for "campaign" (so the spawn cost is paid early), get elected, report, hold
    (the renewer thread keeps the lease) until SIGKILLed."""
    client = fencing.Client.from_url(url, namespace=namespace)
    election = client.election(NAME, "leader", ttl=ttl)
    conn.send(("ready",))
    conn.recv()
    with election.campaign(timeout=STEP_TIMEOUT) as leadership:
        conn.send(("elected", leadership.token))
        conn.recv()  # never comes: the bench SIGKILLs this process
    client.close()


# -- the bench -----------------------------------------------------------------------------------


def _recv(conn: Conn, what: str) -> Any:
    if not conn.poll(STEP_TIMEOUT):
        raise RuntimeError(f"no {what} within {STEP_TIMEOUT}s")
    return conn.recv()


def _until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {STEP_TIMEOUT}s")
        time.sleep(0.0005)


def _uniform(low: float, high: float) -> float:
    return low + (high - low) * secrets.randbelow(1_000_000) / 1_000_000


class Leader:
    """A leader process, spawned ahead of its run."""

    def __init__(self, ctx: multiprocessing.context.SpawnContext, args: tuple[Any, ...]) -> None:
        self.conn, theirs = ctx.Pipe()
        self.process = ctx.Process(target=_leader, args=(*args, theirs), name="leader")
        self.process.start()
        theirs.close()

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(STEP_TIMEOUT)
        self.conn.close()


class Bench:
    def __init__(self, url: str, ttl: float) -> None:
        self.url = url
        self.ttl = ttl
        self.namespace = "bench" + secrets.token_hex(4)
        self.ctx = multiprocessing.get_context("spawn")
        self.client = fencing.Client.from_url(url, namespace=self.namespace)
        self.election = self.client.election(NAME, "bench", ttl=ttl)
        self.row = self.client.keys.ownership(ELECTION_GROUP, NAME)
        self.released = self.client.keys.released_channel(ELECTION_GROUP, NAME)
        self.r = redis.Redis.from_url(url)
        self.conn, theirs = self.ctx.Pipe()
        self.standby = self.ctx.Process(
            target=_standby, args=(url, self.namespace, ttl, theirs), name="standby"
        )
        self.standby.start()
        theirs.close()
        self.token_gaps: list[tuple[int, int]] = []  # (old, new) where new != old + 1

    def _queue_standby(self) -> None:
        """Start the standby's campaign; return once it waits (registered as a candidate
        and subscribed to the release channel, so its claim was refused)."""
        self.conn.send(("campaign",))

        def waiting() -> bool:
            numsub = self.r.pubsub_numsub(self.released)
            return self.election.candidates() >= 1 and int(numsub[0][1]) >= 1

        _until(waiting, "the standby queuing")

    def _elected(self, old_token: int) -> tuple[float, int, float]:
        _, t1, token, started_ms = _recv(self.conn, "the standby's election")
        if token != old_token + 1:
            self.token_gaps.append((old_token, token))
        return t1, token, started_ms

    def crash(self, n: int) -> tuple[list[float], list[float], list[float]]:
        """ms from SIGKILL to election; lease left at the kill; election after lease end."""
        total: list[float] = []
        lease_left: list[float] = []
        after_lease: list[float] = []
        args = (self.url, self.namespace, self.ttl)
        retry_period = self.ttl * 2 / 3 / 4  # the Election defaults
        nxt = Leader(self.ctx, args)
        for i in range(n):
            leader = nxt
            try:
                _recv(leader.conn, "the leader process starting")
                leader.conn.send(("campaign",))
                _, old_token = _recv(leader.conn, "the leader's election")
                if i + 1 < n:  # pay the next spawn while this run waits out the lease
                    nxt = Leader(self.ctx, args)
                self._queue_standby()
                time.sleep(_uniform(0.05, 0.05 + 2 * retry_period))  # a random renewal phase
                before_ms = server_ms(self.r)
                t0 = time.monotonic()
                os.kill(leader.process.pid or 0, signal.SIGKILL)
                leader.process.join(STEP_TIMEOUT)
                token_raw, expires_raw = self.r.hmget(self.row, ["token", "expires"])
                t1, _, started_ms = self._elected(old_token)
            finally:
                leader.stop()
            if int(token_raw or 0) != old_token:
                raise RuntimeError(
                    f"the row changed hands before it was read (token {token_raw!r}, "
                    f"leader's {old_token})"
                )
            expires_ms = int(expires_raw or 0)
            total.append((t1 - t0) * 1000)
            lease_left.append(expires_ms - before_ms)
            after_lease.append(started_ms - expires_ms)
        return total, lease_left, after_lease

    def resign(self, n: int) -> list[float]:
        """ms from leaving the campaign block to the standby's election."""
        out: list[float] = []
        for _ in range(n):
            with self.election.campaign(timeout=STEP_TIMEOUT) as leadership:
                old_token = leadership.token
                self._queue_standby()
                time.sleep(_uniform(0.02, 0.06))  # the standby settles in its wait
                t0 = time.monotonic()
            t1, _, _ = self._elected(old_token)
            out.append((t1 - t0) * 1000)
        return out

    def baseline(self, n: int) -> list[float]:
        """One PING round trip, in ms."""
        for _ in range(20):
            self.r.ping()
        out = []
        for _ in range(n):
            start = time.perf_counter()
            self.r.ping()
            out.append((time.perf_counter() - start) * 1000)
        return out

    def close(self) -> None:
        try:
            self.conn.send(("quit",))
            self.standby.join(STEP_TIMEOUT)
        finally:
            if self.standby.is_alive():
                self.standby.kill()
                self.standby.join(STEP_TIMEOUT)
            self.conn.close()
            self.r.close()
            self.election.close()
            self.client.close()


def row(label: str, samples: list[float]) -> str:
    return (
        f"{label:<40} {len(samples):>5} {pct(samples, 50):>9.2f} "
        f"{pct(samples, 99):>9.2f} {max(samples):>9.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--crash", type=int, help="runs after SIGKILL (default 20, quick 5)")
    parser.add_argument("--resign", type=int, help="runs after a resign (default 200, quick 50)")
    parser.add_argument("--runs", type=int, help="set both --crash and --resign")
    parser.add_argument("--ttl", type=float, default=1.0, help="the election's lease (s)")
    parser.add_argument("--quick", action="store_true", help="fewer runs, for a smoke run")
    args = parser.parse_args(argv)
    crash_runs = args.crash or args.runs or (5 if args.quick else 20)
    resign_runs = args.resign or args.runs or (50 if args.quick else 200)

    started = time.monotonic()
    with server() as s:
        bench = Bench(s.url, args.ttl)
        try:
            base = bench.baseline(200)
            resign = bench.resign(resign_runs)
            crash, lease_left, after_lease = bench.crash(crash_runs)
        finally:
            bench.close()
        version = f"{s.kind} {s.version}"

    print(f"leader-election failover, ms ({version}, ttl={args.ttl}s, pid {os.getpid()})")
    print(f"{'':<40} {'runs':>5} {'p50':>9} {'p99':>9} {'max':>9}")
    print(row("baseline: one PING round trip", base))
    print(row("resign -> next leader elected", resign))
    print(row(f"crash (SIGKILL, lease {args.ttl}s) -> elected", crash))
    print(row("  lease left at the kill (server time)", lease_left))
    print(row("  elected after the lease end (server)", after_lease))
    if bench.token_gaps:
        print(f"token did not grow by one per term: {bench.token_gaps}")
    print(f"took {time.monotonic() - started:.1f}s; reproduce: {REPRODUCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

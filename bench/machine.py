"""What this machine charges for the two things a blocking sender cannot avoid: a round
trip to the server, and waking a thread.

Run from the repository root:

    .venv/bin/python -m bench.machine

It prints:

- the loopback round trip of a ``PING`` (redis-py, one connection, a throwaway server);
- a thread hand-off: one thread releasing a lock another waits on, measured as half a
  ping-pong round trip, with the two threads free to run on any CPU and then both pinned
  to one CPU (Linux only);
- where the kernel's idle loop is configured to poll before halting (KVM guests:
  ``haltpoll``), since a halted virtual CPU is what makes a cross-CPU wake-up slow.

Every ``send()`` from a thread waits for a call and is woken once answered, so these two
figures are what a cycle of one call in flight and its answered callers is made of
(``bench.coalesce --why`` sets them beside the fenced side's cycle).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

import redis

from .common import server

ROUNDS = 5


def ping_us(client: redis.Redis, count: int = 2000) -> float:
    """Median over rounds of the µs per ``PING`` round trip."""
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(count):
            client.ping()
        samples.append(1e6 * (time.perf_counter() - start) / count)
    return statistics.median(samples)


def handoff_us(count: int = 10000, cpu: int | None = None) -> float:
    """µs for one thread to wake another blocked on a lock (half a ping-pong round trip);
    with ``cpu``, both threads run on that CPU only."""
    pin = cpu is not None and hasattr(os, "sched_setaffinity")
    before = os.sched_getaffinity(0) if pin else None
    if pin and cpu is not None:
        os.sched_setaffinity(0, {cpu})  # this thread, and the one it starts, inherit it
    try:
        ping, pong = threading.Lock(), threading.Lock()
        ping.acquire()
        pong.acquire()

        def other() -> None:
            for _ in range(count):
                ping.acquire()
                pong.release()

        thread = threading.Thread(target=other)
        thread.start()
        start = time.perf_counter()
        for _ in range(count):
            ping.release()
            pong.acquire()
        elapsed = time.perf_counter() - start
        thread.join()
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
    return 1e6 * elapsed / count / 2


def idle_polling() -> str:
    """The cpuidle driver and how long an idle CPU polls before halting, if Linux says."""
    base = Path("/sys/devices/system/cpu/cpuidle/current_driver")
    try:
        driver = base.read_text().strip()
    except OSError:
        return "unknown"
    poll = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    if driver == "haltpoll" and poll.exists():
        return f"{driver}, polls {poll.read_text().strip()} ns before halting"
    return driver


def probe(url: str) -> dict[str, float | str]:
    """The figures, for a server at ``url``."""
    client = redis.Redis.from_url(url)
    try:
        rtt = ping_us(client)
    finally:
        client.close()
    spread = statistics.median(handoff_us() for _ in range(ROUNDS))
    figures: dict[str, float | str] = {
        "cpus": float(os.cpu_count() or 1),
        "ping_us": rtt,
        "handoff_us": spread,
        "idle": idle_polling(),
    }
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        figures["handoff_one_cpu_us"] = statistics.median(
            handoff_us(cpu=cpu) for _ in range(ROUNDS)
        )
    return figures


def describe(figures: dict[str, float | str]) -> str:
    line = (
        f"{figures['cpus']:.0f} CPUs; PING round trip {figures['ping_us']:.0f} µs; "
        f"thread hand-off {figures['handoff_us']:.1f} µs"
    )
    if "handoff_one_cpu_us" in figures:
        line += f" ({figures['handoff_one_cpu_us']:.1f} µs with both threads on one CPU)"
    return line + f"; idle: {figures['idle']}"


def main() -> None:
    with server() as s:
        print(describe(probe(s.url)))


if __name__ == "__main__":
    main()

"""Chaos: many producer processes and threads under every fault at once, the whole log checked.

Bounded in time (about 20 s per server kind). Worker processes
(:mod:`tests.faults.chaos_worker`, run by the suite's :class:`~tests.support.fleet.Fleet`)
cycle through the four access modes, named takeovers (``name=`` from a pool every worker
draws from) and copy jobs resumed from a saved :class:`fencing.ProducerState`
(``resume=``), with several sender threads per producer, on two topics of two partitions:
``mixed`` (every mode) and ``excl`` (exclusive modes only). Meanwhile the test, from a
seeded schedule (``CHAOS_SEED`` repeats one):

- SIGSTOPs workers for 2.5 leases and SIGCONTs them (a GC pause past the lease);
- SIGKILLs workers and starts replacements (a crash);
- loses the replies or the requests of appends of the worker whose client goes through
  :class:`fencing.faults.Proxy` (a lost reply, a lost request, a mute connection);
- and one worker forks while it holds an exclusive producer: the child must be refused the
  parent's producer, can open a new one from the same client and send, and leaves through
  the parent's ``with`` block or its ``close()``, which must release nothing.

Then, with every worker stopped, what is checked:

- ``fencing.verify.verify_log`` over each topic with every attempt the workers reported:
  G2 (no value of a send that raised ProducerFenced is in the log, acked epochs match),
  G5 (no value twice, every acknowledged value in the log at its acknowledged offset, an
  unknown outcome landed at most once), G6 (offsets contiguous) and, on ``excl``, G1 (one
  contiguous segment per epoch, epochs increasing, one writer per epoch);
- each copy job's values on each partition are exactly its inputs 0..m-1 in order, with m
  at least the saved position (exactly once across crashes, pauses and takeovers);
- no worker met an error outside the ones the faults explain; every worker stopped cleanly
  when told to; each fault really happened (pauses, kills, proxy drops, forks, fenced sends);
- the fork checks: the child was refused the parent's producer, exited by itself, and the
  parent's lease was never released by the child;
- the workers made progress, and once they are all gone no lease is left: a fresh
  EXCLUSIVE producer opens at once on both topics.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import redis

import fencing
from fencing import AccessMode
from fencing.faults import Proxy, Rule
from fencing.verify import Attempt, LogReport, verify_log

from ..conftest import ServerInfo
from ..support.clock import server_ms, wait_server_past
from ..support.fleet import Fleet, Worker
from ..support.logs import read_values
from ..support.polling import wait_until
from ..support.wire import APPEND
from .chaos_worker import JOB_BATCH

MIXED, EXCL = "mixed", "excl"
TOPICS = {MIXED: 2, EXCL: 2}
#: Copy jobs (``resume=``) and the topic each one writes.
JOBS = {"jm0": MIXED, "jm1": MIXED, "jx0": EXCL, "jx1": EXCL}
#: Producer names every worker draws from (named takeovers across processes).
NAMES = ["n0", "n1", "n2"]
LEASE_TTL = 1.0
WAIT_TIMEOUT = 1.5
#: Seconds of chaos; no SIGKILL in the last QUIET seconds (leases lapse before the end).
CHAOS_SECONDS = 12.0
QUIET = 3.0
PAUSES, KILLS = 3, 3
PAUSE_SECONDS = 2.5 * LEASE_TTL
#: How often the proxy may arm a fault, and the chance that it does.
DROP_TICK, DROP_CHANCE = 0.25, 0.35
#: Bounds on waits: a worker's start, its stop once told, the whole worker's life.
START_TIMEOUT = 15.0
STOP_TIMEOUT = 15.0
WORKER_MAX_SECONDS = 60.0
MIN_ACKED = 300  # acknowledged records per topic, at the least


class Workers(Fleet):
    """The worker processes of a run (:func:`tests.faults.chaos_worker.work`), each started
    for a role; every one is killed at the end whatever happens."""

    def __init__(
        self, server_url: str, proxy_url: str | None, namespace: str, dir: Path, seed: int
    ) -> None:
        super().__init__(max_seconds=int(WORKER_MAX_SECONDS) + 30, step_timeout=STOP_TIMEOUT)
        self.server_url = server_url
        self.proxy_url = proxy_url
        self.namespace = namespace
        self.dir = dir
        self.seed = seed
        self.roles: dict[str, str] = {}
        self.killed: set[str] = set()
        self.last_kill_ms = 0
        self.n = 0

    def spawn(self, role: str) -> Worker:
        wid = f"w{self.n}"
        self.n += 1
        url = self.proxy_url if role == "proxy" and self.proxy_url else self.server_url
        cfg = {
            "wid": wid,
            "namespace": self.namespace,
            "topics": TOPICS,
            "dir": str(self.dir),
            "seed": self.seed * 1000 + self.n,
            "lease_ttl": LEASE_TTL,
            "wait_timeout": WAIT_TIMEOUT,
            "names": NAMES,
            "jobs": JOBS,
            "fork": role == "fork",
            "max_seconds": WORKER_MAX_SECONDS,
        }
        self.roles[wid] = role
        stderr = self.stderr(wid)
        return self.start(wid, "tests.faults.chaos_worker:work", json.dumps(cfg), url, str(stderr))

    def stderr(self, wid: str) -> Path:
        return self.dir / f"{wid}.stderr"

    def live(self) -> list[Worker]:
        return [w for w in self.lives if w.wid not in self.killed and w.exitcode is None]


def events(directory: Path) -> list[dict[str, Any]]:
    """Every event of every worker and fork child, each tagged with its file's stem."""
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            ev = json.loads(line)
            ev["src"] = path.stem
            out.append(ev)
    return out


def seen_events(directory: Path) -> set[str]:
    """The kinds of event logged so far, read while workers still write (a line being
    written is not read yet)."""
    kinds: set[str] = set()
    for path in directory.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                kinds.add(json.loads(line)["ev"])
    return kinds


def attempts_of(evs: list[dict[str, Any]], topic: str) -> list[Attempt]:
    return [
        Attempt(e["v"].encode(), e["p"], e["o"], e["off"], e["ep"])
        for e in evs
        if e["ev"] == "send" and e["topic"] == topic
    ]


def wait_started(group: Workers, workers: list[Worker]) -> None:
    """Wait until every worker wrote its start line (imports done, client made)."""
    deadline = time.monotonic() + START_TIMEOUT
    for worker in workers:
        path = group.dir / f"{worker.wid}.jsonl"
        while not (path.exists() and path.stat().st_size > 0):
            died = group.stderr(worker.wid)
            assert worker.exitcode is None, f"{worker.wid} died: {died.read_text()}"
            assert time.monotonic() < deadline, f"{worker.wid} did not start in {START_TIMEOUT}s"
            time.sleep(0.02)


def make_jobs(client: fencing.Client, directory: Path) -> None:
    """The copy jobs' first saved states: a PID with nothing sent yet."""
    for job, topic in JOBS.items():
        mode = AccessMode.SHARED if topic == MIXED else AccessMode.EXCLUSIVE
        with client.topic(topic).producer(mode, lease_ttl=LEASE_TTL) as p:
            state = p.state
        (directory / f"job-{job}-init.json").write_text(state.to_json())


def job_state(directory: Path, job: str) -> fencing.ProducerState:
    """The job's most advanced saved state (what a resumer would pick)."""
    states = [
        fencing.ProducerState.from_json(p.read_text()) for p in directory.glob(f"job-{job}-*.json")
    ]
    return max(states, key=lambda s: (sum(s.generations.values()), sum(s.sequences.values())))


class Chaos:
    """The fault schedule, run from the test process."""

    def __init__(self, group: Workers, proxy: Proxy | None, raw: redis.Redis, seed: int) -> None:
        self.group = group
        self.proxy = proxy
        self.raw = raw
        self.rng = random.Random(seed)
        self.done: Counter[str] = Counter()
        self.rules: list[tuple[float, Rule]] = []
        self.paused: dict[str, float] = {}  # wid -> when to SIGCONT

    def schedule(self) -> list[tuple[float, str]]:
        faults = ["pause"] * PAUSES + ["kill"] * KILLS
        self.rng.shuffle(faults)
        # Spread over the run: one fault per slot, at a random time within it.
        slot = (CHAOS_SECONDS - QUIET - 1.0) / len(faults)
        return [
            (1.0 + i * slot + self.rng.uniform(0.1, slot - 0.1), f) for i, f in enumerate(faults)
        ]

    def run(self) -> None:
        started = time.monotonic()
        plan = self.schedule()
        next_tick = started
        end = started + CHAOS_SECONDS
        while (now := time.monotonic()) < end:
            while plan and started + plan[0][0] <= now:
                self.fault(plan.pop(0)[1])
            for wid, when in list(self.paused.items()):
                if when <= now:
                    self.resume(wid)
            if self.proxy is not None and now >= next_tick:
                self.drop(now)
                next_tick = now + DROP_TICK
            time.sleep(0.02)  # pacing of the schedule, not synchronisation
        for wid in list(self.paused):
            self.resume(wid)
        if self.proxy is not None:
            self.done["proxy hits"] += sum(rule.hits for _, rule in self.rules)
            self.proxy.clear()

    def fault(self, kind: str) -> None:
        live = [p for p in self.group.live() if p.wid not in self.paused]
        if not live:
            return
        victim = self.rng.choice(live)
        if kind == "pause":
            os.kill(victim.pid, signal.SIGSTOP)  # the worker alone, not a fork child of it
            self.paused[victim.wid] = time.monotonic() + PAUSE_SECONDS
            self.done["pause"] += 1
        else:
            self.group.killed.add(victim.wid)
            self.group.kill(victim.wid, timeout=5)  # the worker and any fork child of it
            self.group.last_kill_ms = server_ms(self.raw)
            self.group.spawn(self.group.roles[victim.wid])
            self.done["kill"] += 1

    def resume(self, wid: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.group.workers[wid].pid, signal.SIGCONT)
        del self.paused[wid]

    def drop(self, now: float) -> None:
        assert self.proxy is not None
        for armed, rule in list(self.rules):  # disarm rules that found no append for a while
            if rule.hits or now - armed > 1.0:
                self.done["proxy hits"] += rule.hits
                rule.remove()
                self.rules.remove((armed, rule))
        if self.rules or self.rng.random() > DROP_CHANCE:
            return
        kind = self.rng.choice(["replies", "requests"])
        close = self.rng.random() < 0.7
        count = self.rng.randint(1, 3)
        if kind == "replies":
            rule = self.proxy.drop_replies(APPEND, count=count, close=close)
        else:
            rule = self.proxy.drop_requests(APPEND, count=count, close=close)
        self.rules.append((now, rule))
        self.done[f"drop {kind}"] += 1


def check_job(client: fencing.Client, directory: Path, job: str, topic: str) -> list[str]:
    """Exactly once: per partition the job's values are its inputs 0..m-1, in log order."""
    problems = []
    saved = job_state(directory, job)
    for partition in range(TOPICS[topic]):
        prefix = f"{job}-p{partition}-".encode()
        seqs = [
            int(v[len(prefix) :])
            for v in read_values(client, topic, partition)
            if v.startswith(prefix)
        ]
        if seqs != list(range(len(seqs))):
            problems.append(f"{job} partition {partition}: inputs in the log {seqs}")
        if len(seqs) < saved.next_sequence(partition):
            problems.append(
                f"{job} partition {partition}: {len(seqs)} inputs in the log, "
                f"saved position {saved.next_sequence(partition)}"
            )
        if len(seqs) % JOB_BATCH:
            problems.append(f"{job} partition {partition}: a partial batch: {seqs[-3:]}")
    return problems


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_chaos(server: ServerInfo, namespace: str, raw: redis.Redis, tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**31))
    print(f"chaos seed {seed} (CHAOS_SEED={seed} repeats the schedule)")
    client = fencing.Client.from_url(server.url, namespace=namespace)
    url = urlparse(server.url)
    use_proxy = url.scheme == "redis" and url.hostname in ("127.0.0.1", "localhost")
    proxy_cm: contextlib.AbstractContextManager[Proxy | None] = (
        Proxy(url.port or 6379) if use_proxy else contextlib.nullcontext()
    )
    started = time.monotonic()
    try:
        for topic, partitions in TOPICS.items():
            client.topic(topic, partitions=partitions).open()
        make_jobs(client, tmp_path)
        with (
            proxy_cm as proxy,
            Workers(
                server.url,
                None if proxy is None else proxy.url_for(server.url),
                namespace,
                tmp_path,
                seed,
            ) as group,
        ):
            roles = ["plain", "plain", "plain", "fork"] + (["proxy"] if proxy else [])
            wait_started(group, [group.spawn(role) for role in roles])
            chaos = Chaos(group, proxy, raw, seed)
            chaos.run()
            # The fork worker may have been killed or paused through all of the chaos: give
            # it the time to fork once (and its child to try the parent's producer) before
            # the stop.
            wait_until(
                lambda: {"fork", "child_parent_send"} <= seen_events(tmp_path),
                timeout=30.0,
                interval=0.1,
                what="a fork worker forked and its child tried the parent's producer",
            )

            # Stop: every worker ends its session, closes its producer and exits 0.
            (tmp_path / "stop").touch()
            deadline = time.monotonic() + STOP_TIMEOUT
            for worker in group.live():
                worker.process.join(max(0.1, deadline - time.monotonic()))
            stuck = [w.wid for w in group.live()]
            exits = {w.wid: w.exitcode for w in group.lives if w.wid not in group.killed}
            stderr = {w.wid: group.stderr(w.wid).read_text()[-2000:] for w in group.lives}
            # Any fork child left behind goes with its worker's process group.
            group.close()
            if stuck:
                group.last_kill_ms = server_ms(raw)
        chaos_seconds = time.monotonic() - started
        assert not stuck, f"workers still running {STOP_TIMEOUT}s after stop: {stuck}"

        evs = events(tmp_path)
        forks = [e for e in evs if e["ev"] == "fork"]
        checks = [e for e in evs if e["ev"] == "fork_check"]
        refused = [e for e in evs if e["ev"] == "child_parent_send"]
        outcomes = Counter((e["topic"], e["o"]) for e in evs if e["ev"] == "send")
        opens = Counter(e["mode"] for e in evs if e["ev"] == "open")
        stats = {
            "seed": seed,
            "seconds": round(chaos_seconds, 1),
            "faults": dict(chaos.done),
            "outcomes": dict(outcomes),
            "opens": dict(opens),
            "busy": sum(1 for e in evs if e["ev"] == "busy"),
            "resumes": sum(1 for e in evs if e["ev"] == "open" and e["resume"]),
            "named": sum(1 for e in evs if e["ev"] == "open" and e["name"]),
            "forks": [(e["busy"], e["child_mode"], e["how"], e["status"]) for e in forks],
            "fork checks": dict(Counter(e["result"] for e in checks)),
        }
        print(stats)

        # The whole log of each topic, with every attempt the workers reported.
        reports: dict[str, LogReport] = {}
        for topic in TOPICS:
            reports[topic] = verify_log(
                client,
                topic,
                attempts=attempts_of(evs, topic),
                exclusive=topic == EXCL,
                unique_values=True,
            )
        summaries = "\n".join(r.summary(max_segments=3) for r in reports.values())
        print(summaries)
        assert all(r.ok for r in reports.values()), summaries
        for job, topic in JOBS.items():
            problems = check_job(client, tmp_path, job, topic)
            assert not problems, problems

        # No error the faults do not explain; every worker left cleanly when told to.
        unexpected = [e for e in evs if e["ev"] == "unexpected"]
        assert not unexpected, "\n".join(
            f"{e['src']}: {e['where']}: {e['error']}" for e in unexpected
        )
        assert all(code == 0 for code in exits.values()), (exits, stderr)

        # Forks: refused, exited by themselves, and the parent's lease untouched.
        released = [e for e in checks if e["result"] == "released"]
        assert not released, f"a fork child's exit released the parent's lease: {released}"
        assert all(e["status"] == "exit 0" for e in forks), forks
        assert all(e["result"] == "refused" for e in refused), refused

        # Progress, and every fault really happened.
        for topic in TOPICS:
            assert outcomes[topic, "acked"] >= MIN_ACKED, stats
        assert sum(outcomes[t, "fenced"] for t in TOPICS) > 0, stats
        assert chaos.done["pause"] == PAUSES and chaos.done["kill"] == KILLS, stats
        if proxy is not None:
            assert chaos.done["proxy hits"] > 0, stats
        assert forks and refused, stats
        assert set(opens) == {m.name for m in AccessMode}, stats

        # Nothing is left held: leases of killed workers have lapsed by server time, and
        # every other producer was closed; a fresh EXCLUSIVE producer opens at once.
        wait_server_past(raw, group.last_kill_ms + round(LEASE_TTL * 1000))
        for topic in TOPICS:
            with client.topic(topic).producer(AccessMode.EXCLUSIVE, lease_ttl=LEASE_TTL) as p:
                assert p.send(b"final", partition=0).offset >= 0
    finally:
        client.close()

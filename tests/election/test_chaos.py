"""Leader election under chaos: three candidate processes, pauses, kills and resignations.

Three candidates (:mod:`tests.election.election_chaos_worker`, one process each, run by the shared
:class:`~tests.support.fleet.Fleet`) campaign in one election with a TTL drawn per run in
0.3-0.6 s (renew deadline and retry period by default). Each loops: campaign; while leading,
token-checked writes (a SQLite row guarded by ``token <= ?`` with an append-only ``writes``
table, and a Lua check-and-set on a Redis key of the test's own); leave the block at a random
moment (resigning); campaign again. Meanwhile the test, driven by a seeded RNG, SIGSTOPs the
leader (or any candidate) for longer than the TTL and SIGCONTs it only once a successor was
elected (for a leader), and SIGKILLs a candidate and starts it again.

The seed is printed; ``FENCING_ELECTION_CHAOS_SEED=<n>`` repeats the fault schedule (what
is drawn: the TTL, the kinds, order, targets among candidates and durations of the faults,
and every candidate's hold times; which process leads at a given moment still depends on
timing).

Checked over the whole run, from the stores and from every event every process reported:

- **writes**: read in commit order (SQLite rowid, the Redis list), tokens never decrease;
  each written token belongs to a term whose ``on_elected`` ran in the very process that
  wrote it; every write a process reported as let through is in the store (and the store
  holds no other, but for at most one per SIGKILLed process, which may die between its
  commit and its report); the guarded value ends at the highest token written;
- **callbacks**: per process, ``on_elected`` at most once per token and ``on_revoked`` at
  most once per token, only for a token whose ``on_elected`` ran, and exactly once for each
  such token in a process that stopped cleanly; across all processes, ``on_elected`` at most
  once per token (a token is one term);
- **terms do not overlap**: for a term whose process was not paused while it held it,
  ``on_revoked`` (or the SIGKILL) comes before the ``on_elected`` of every later term, by
  ``time.monotonic()`` (one clock for the host's processes): the renew deadline steps a
  leader down before its lease can lapse, and a resignation runs ``on_revoked`` before the
  row is released;
- **progress and faults**: enough terms and writes; every SIGSTOP really stopped its
  process (``/proc/<pid>/stat`` state ``T``) and every SIGCONT resumed it, a successor was
  elected while each stopped leader was stopped, every SIGKILL ended its process with
  ``-SIGKILL`` and the new process got ready.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import signal
import sqlite3
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

import fencing

from ..conftest import ServerInfo
from ..support.fleet import Event, Fleet
from .election_chaos_worker import Config, candidate, create_database, fence_keys

pytestmark = pytest.mark.slow

SEED_ENV = "FENCING_ELECTION_CHAOS_SEED"
ELECTION = "chaos"
CANDIDATES = ("c0", "c1", "c2")
#: Bounds of the TTL drawn per run (seconds).
TTL_RANGE = (0.3, 0.6)
#: A candidate leaves its block after a time drawn in [0, HOLD_TTLS * ttl].
HOLD_TTLS = 3.0
#: A pause lasts a time drawn in this range of TTLs (longer, for a leader, until a
#: successor was elected).
PAUSE_TTLS = (1.2, 2.5)
#: Quiet time between two faults (seconds).
GAP = (0.2, 0.8)
#: Bound on each wait of the test (a process starting, a successor being elected...).
STEP_TIMEOUT = 20.0
#: The fault kinds; each run starts with a stopped leader and a kill, in a drawn order,
#: then draws from this bag (shuffled, refilled).
BAG = ("stop-leader", "stop-leader", "stop-any", "kill-leader", "kill-any")
#: Progress asked of a run, per second of chaos.
TERMS_PER_SECOND = 0.4
WRITES_PER_SECOND = 3.0


@dataclass
class Fault:
    kind: str  # "stop-leader", "stop-any", "kill-leader", "kill-any"
    wid: str
    life: int
    #: The leader's token when the fault hit it (None if the target was not leading).
    token: int | None
    start: float  # test's time.monotonic(), just before the signal
    end: float = math.inf  # SIGCONT sent (a pause) / process reaped (a kill)
    verified: bool = False
    successor: int | None = None  # a stopped leader: the token elected meanwhile
    respawned: bool = False


@dataclass
class Term:
    """One term as the processes reported it."""

    token: int
    wid: str
    life: int
    elected: Event
    revoked: list[Event] = field(default_factory=list)

    @property
    def writer(self) -> str:
        return f"{self.wid}.{self.life}"


def process_state(pid: int) -> str:
    """The state letter of ``/proc/<pid>/stat`` ("T" when stopped), "" once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


class Chaos:
    """Drives the faults and keeps the fleet's pipes drained meanwhile."""

    def __init__(self, fleet: Fleet, observer: fencing.Election, ttl: float) -> None:
        self.fleet = fleet
        self.observer = observer
        self.ttl = ttl
        self.faults: list[Fault] = []

    def idle(self, seconds: float) -> None:
        """Let the candidates run for ``seconds``, reading what they report."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.fleet.pump(min(left, 0.05))

    def leader(self) -> tuple[str, int]:
        """The current leader (candidate id, token), by server time; waits for one."""

        def current() -> tuple[str, int] | None:
            info = self.observer.leader()
            if info is None or info.label not in CANDIDATES:
                return None
            return info.label, info.token

        found: tuple[str, int] = self.fleet.wait_until("a leader", current, STEP_TIMEOUT)
        return found

    def successor(self, token: int) -> int:
        """Wait until a term after ``token`` is granted; its token."""

        def newer() -> int | None:
            info = self.observer.leader()
            return info.token if info is not None and info.token > token else None

        found: int = self.fleet.wait_until(
            f"a successor of token {token} elected", newer, STEP_TIMEOUT
        )
        return found

    def target(self, kind: str, rng: random.Random) -> tuple[str, int | None]:
        wid, token = self.leader()
        if kind.endswith("-leader"):
            return wid, token
        other = rng.choice(CANDIDATES)
        return other, (token if other == wid else None)

    def pause(self, kind: str, rng: random.Random) -> None:
        wid, token = self.target(kind, rng)
        worker = self.fleet.workers[wid]
        fault = Fault(kind, wid, worker.life, token, time.monotonic())
        self.faults.append(fault)
        self.fleet.pause(wid)
        self.fleet.wait_until(
            f"{wid} stopped", lambda: process_state(worker.pid) == "T", STEP_TIMEOUT
        )
        self.idle(rng.uniform(*PAUSE_TTLS) * self.ttl)
        if token is not None:
            fault.successor = self.successor(token)
        fault.end = time.monotonic()
        self.fleet.unpause(wid)
        self.fleet.wait_until(
            f"{wid} resumed", lambda: process_state(worker.pid) not in ("T", ""), STEP_TIMEOUT
        )
        fault.verified = True

    def kill(self, kind: str, rng: random.Random) -> None:
        wid, token = self.target(kind, rng)
        worker = self.fleet.workers[wid]
        fault = Fault(kind, wid, worker.life, token, time.monotonic())
        self.faults.append(fault)
        code = self.fleet.kill(wid)
        fault.end = time.monotonic()
        assert code == -signal.SIGKILL, f"{wid} (life {worker.life}) ended with {code}"
        fault.verified = True
        new = self.fleet.respawn(wid)
        self.fleet.wait_for(f"{wid} (life {new.life}) ready", lambda e: e["ev"] == "ready", wid=wid)
        fault.respawned = True

    def run(self, seconds: float, rng: random.Random) -> None:
        first = ["stop-leader", rng.choice(["kill-leader", "kill-any"])]
        rng.shuffle(first)
        kinds = itertools.chain(first, self.refills(rng))
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.idle(rng.uniform(*GAP))
            kind = next(kinds)
            if kind.startswith("stop"):
                self.pause(kind, rng)
            else:
                self.kill(kind, rng)

    @staticmethod
    def refills(rng: random.Random) -> Any:
        while True:
            bag = list(BAG)
            rng.shuffle(bag)
            yield from bag


# -- the run -----------------------------------------------------------------------------------


def run_chaos(
    server: ServerInfo, namespace: str, client: fencing.Client, tmp_path: Path, seconds: float
) -> None:
    seed = int(os.environ.get(SEED_ENV) or random.randrange(2**32))
    print(f"\n{SEED_ENV}={seed} ({server.kind}, {seconds:.0f}s of chaos)")
    rng = random.Random(seed)
    ttl = round(rng.uniform(*TTL_RANGE), 3)
    db_path = tmp_path / "fenced.sqlite"
    create_database(db_path)
    cfg = Config(
        url=server.url,
        namespace=namespace,
        election=ELECTION,
        db_path=str(db_path),
        ttl=ttl,
        seed=seed,
        hold_max=HOLD_TTLS * ttl,
    )
    observer = client.election(ELECTION, "observer", ttl=ttl)
    with Fleet(max_seconds=int(seconds) + 90, step_timeout=STEP_TIMEOUT) as fleet:
        for wid in CANDIDATES:
            fleet.start(wid, candidate, cfg)
        for wid in CANDIDATES:
            fleet.wait_for(f"{wid} ready", lambda e: e["ev"] == "ready", wid=wid)
        chaos = Chaos(fleet, observer, ttl)
        chaos.run(seconds, rng)
        for wid in CANDIDATES:
            fleet.send(wid, "stop")
        fleet.wait_until(
            "every candidate stopped",
            lambda: all(fleet.workers[w].exitcode is not None for w in CANDIDATES),
        )
        codes = {wid: fleet.finish(wid) for wid in CANDIDATES}
    assert codes == dict.fromkeys(CANDIDATES, 0), f"seed {seed}: {codes}\n{fleet.describe()}"

    db = sqlite3.connect(db_path)
    try:
        sql_rows = db.execute("SELECT n, token, writer, seq FROM writes ORDER BY n").fetchall()
        ((sql_final,),) = db.execute("SELECT token FROM lease WHERE id = 1").fetchall()
    finally:
        db.close()
    fence_key, log_key = fence_keys(namespace)
    raw = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        entries: list[str] = raw.lrange(log_key, 0, -1)  # type: ignore[assignment]
        redis_rows = [
            (i, int(t), w, int(s)) for i, (t, w, s) in enumerate(e.split() for e in entries)
        ]
        redis_final = int(raw.hget(fence_key, "token") or 0)
    finally:
        raw.close()

    check_run(
        seed=seed,
        ttl=ttl,
        seconds=seconds,
        fleet=fleet,
        faults=chaos.faults,
        stores={"sql": (sql_rows, sql_final), "redis": (redis_rows, redis_final)},
        kind=server.kind,
    )


def check_run(
    *,
    seed: int,
    ttl: float,
    seconds: float,
    fleet: Fleet,
    faults: list[Fault],
    stores: dict[str, tuple[list[tuple[int, int, str, int]], int]],
    kind: str,
) -> None:
    """Every invariant over the whole run; all violations are reported together."""
    problems: list[str] = []
    log = fleet.log
    killed = {(f.wid, f.life): f for f in faults if f.kind.startswith("kill")}
    lives = {(w.wid, w.life): w for w in fleet.lives}

    # -- callbacks -------------------------------------------------------------------------
    terms: dict[int, Term] = {}
    per_life: dict[tuple[str, int], dict[str, list[int]]] = defaultdict(
        lambda: {"elected": [], "revoked": []}
    )
    for e in log:
        if e["ev"] in ("elected", "revoked"):
            per_life[(e["wid"], e["life"])][e["ev"]].append(e["token"])
        if e["ev"] == "elected":
            if e["token"] in terms:
                first = terms[e["token"]]
                problems.append(
                    f"on_elected ran twice for token {e['token']}: in {first.writer} "
                    f"(mono {first.elected['mono']:.3f}) and in {e['wid']}.{e['life']} "
                    f"(mono {e['mono']:.3f})"
                )
                continue
            terms[e["token"]] = Term(e["token"], e["wid"], e["life"], e)
    for e in log:
        if e["ev"] == "revoked":
            term = terms.get(e["token"])
            if term is None or (term.wid, term.life) != (e["wid"], e["life"]):
                problems.append(
                    f"on_revoked in {e['wid']}.{e['life']} for token {e['token']}, whose "
                    f"on_elected it never ran ({e['reason']}: {e['text']})"
                )
                continue
            term.revoked.append(e)
    for term in terms.values():
        if len(term.revoked) > 1:
            problems.append(
                f"on_revoked ran {len(term.revoked)} times for token {term.token} in "
                f"{term.writer}: {[(r['reason'], round(r['mono'], 3)) for r in term.revoked]}"
            )
    for key, worker in lives.items():
        calls = per_life[key]
        if key in killed:
            continue
        exits = worker.of("exit")
        if len(exits) != 1:
            problems.append(f"{worker.wid}.{worker.life} stopped without its exit report")
            continue
        if (exits[0]["elected"], exits[0]["revoked"]) != (calls["elected"], calls["revoked"]):
            problems.append(
                f"{worker.wid}.{worker.life}: callbacks ran {exits[0]} but reported {calls}"
            )
        missing = sorted(set(calls["elected"]) - set(calls["revoked"]))
        if missing:
            problems.append(
                f"{worker.wid}.{worker.life} stopped cleanly but on_revoked never ran for "
                f"token(s) {missing} whose on_elected ran"
            )

    # -- terms do not overlap (unless the process holding one was paused meanwhile) --------
    pauses: dict[tuple[str, int], list[Fault]] = defaultdict(list)
    for f in faults:
        if f.kind.startswith("stop"):
            pauses[(f.wid, f.life)].append(f)

    def believed(term: Term) -> tuple[float, float]:
        e = term.elected
        granted = e["mono"] - max(0.0, e["wall"] - e["term_started"])
        if term.revoked:
            end = term.revoked[0]["mono"]
        elif (term.wid, term.life) in killed:
            end = killed[(term.wid, term.life)].start
        else:
            end = math.inf  # reported above: a clean stop without on_revoked
        return granted, end

    def paused_while_held(term: Term) -> bool:
        granted, end = believed(term)
        return any(
            p.start <= end + 0.005 and p.end >= granted - 0.005
            for p in pauses[(term.wid, term.life)]
        )

    ordered = sorted(terms.values(), key=lambda t: t.token)
    margins: list[float] = []
    for i, term in enumerate(ordered):
        if paused_while_held(term):
            continue
        _, end = believed(term)
        for later in ordered[i + 1 :]:
            gap = later.elected["mono"] - end
            if gap <= 0:
                problems.append(
                    f"terms overlap: token {later.token} ({later.writer}) was announced "
                    f"{-gap:.3f}s before token {term.token} ({term.writer}, not paused) "
                    f"ended there ({term.revoked[0]['reason'] if term.revoked else 'killed'}"
                    f"{': ' + term.revoked[0]['text'] if term.revoked else ''})"
                )
            elif later is ordered[i + 1]:
                margins.append(gap)

    # -- writes ------------------------------------------------------------------------------
    figures: dict[str, Counter[str]] = {}
    for store, (rows, final) in stores.items():
        counts: Counter[str] = Counter(written=len(rows))
        figures[store] = counts
        for prev, row in itertools.pairwise(rows):
            if row[1] < prev[1]:
                problems.append(
                    f"{store}: a write of token {row[1]} ({row[2]} #{row[3]}, at {row[0]}) "
                    f"committed after one of token {prev[1]} ({prev[2]} #{prev[3]}, at "
                    f"{prev[0]})"
                )
        top = max((row[1] for row in rows), default=0)
        if final != top:
            problems.append(f"{store}: the guarded token is {final}, the writes reach {top}")
        for _, token, writer, seq in rows:
            term = terms.get(token)
            if term is None or term.writer != writer:
                problems.append(
                    f"{store}: {writer} #{seq} wrote with token {token}, whose on_elected "
                    f"{'never ran' if term is None else 'ran in ' + term.writer}"
                )
        stored = {(token, writer, seq) for _, token, writer, seq in rows}
        reported = {
            (e["token"], f"{e['wid']}.{e['life']}", e["seq"])
            for e in log
            if e["ev"] == "wrote" and e["store"] == store
        }
        refused = [e for e in log if e["ev"] == "refused" and e["store"] == store]
        counts["refused"] = len(refused)
        if reported - stored:
            problems.append(f"{store}: reported written, not in the store: {reported - stored}")
        unreported = Counter(writer for _, writer, _ in stored - reported)
        for writer, n in unreported.items():
            wid, life = writer.split(".")
            if (wid, int(life)) not in killed or n > 1:
                problems.append(f"{store}: {n} write(s) of {writer} in the store, not reported")

    # -- progress and faults -----------------------------------------------------------------
    by_kind = Counter(f.kind for f in faults)
    stopped_leaders = [f for f in faults if f.kind.startswith("stop") and f.token is not None]
    summary = (
        f"[{kind}] seed {seed}, ttl {ttl}s, {seconds:.0f}s: {len(terms)} terms "
        f"(tokens {min(terms, default=0)}..{max(terms, default=0)}), "
        f"sql {dict(figures['sql'])}, redis {dict(figures['redis'])}, "
        f"faults {dict(by_kind)} ({len(stopped_leaders)} stopped a leader), "
        f"paused terms {sum(paused_while_held(t) for t in ordered)}, "
        f"smallest handover gap {min(margins, default=math.nan):.3f}s"
    )
    print(summary)
    if len(terms) < TERMS_PER_SECOND * seconds:
        problems.append(f"only {len(terms)} terms in {seconds:.0f}s")
    for store, counts in figures.items():
        if counts["written"] < WRITES_PER_SECOND * seconds:
            problems.append(f"{store}: only {counts['written']} writes in {seconds:.0f}s")
    if not all(f.verified for f in faults):
        problems.append(f"faults that did not happen: {[f for f in faults if not f.verified]}")
    if not all(f.respawned for f in killed.values()):
        problems.append("a killed candidate was not started again")
    if not stopped_leaders or not any(f.kind.startswith("kill") for f in faults):
        problems.append(f"the run lacked a stopped leader or a kill: {dict(by_kind)}")
    for f in stopped_leaders:
        if f.successor is None or f.successor <= (f.token or 0):
            problems.append(f"no successor was elected while {f.wid} (token {f.token}) was stopped")
    assert not problems, (
        f"{summary}\n{len(problems)} violation(s) (repeat with {SEED_ENV}={seed}):\n- "
        + "\n- ".join(problems[:40])
    )


# -- the tests -----------------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_fenced_writes_and_callbacks_stay_ordered_under_pauses_kills_and_resignations(
    server: ServerInfo, namespace: str, client: fencing.Client, tmp_path: Path
) -> None:
    if server.kind == "valkey":
        # ~15 s per kind; the soak below runs on both.
        pytest.skip("one server kind is enough for the 10 s chaos run: redis")
    run_chaos(server, namespace, client, tmp_path, seconds=10.0)


@pytest.mark.soak
@pytest.mark.timeout(180)
def test_fenced_writes_and_callbacks_stay_ordered_through_30s_of_chaos(
    server: ServerInfo, namespace: str, client: fencing.Client, tmp_path: Path
) -> None:
    run_chaos(server, namespace, client, tmp_path, seconds=30.0)

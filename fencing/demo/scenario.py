"""The demo's scenario: real producer processes, real faults, then the whole log verified.

Topic ``A`` is written by three worker processes (:mod:`fencing.demo.worker`) in
``WAIT_FOR_EXCLUSIVE`` mode. The orchestrator picks the holder from the workers' events and

1. SIGKILLs it: the next waiter takes over once the dead holder's lease lapses by server
   time (epoch + 1);
2. SIGSTOPs the new holder for ~2.5 x its lease, as a long GC pause would: the third
   worker takes over (epoch + 1);
3. SIGCONTs it: it still believes it holds its epoch, and every send it makes now comes
   back ``ProducerFenced`` (the "fenced attempts"), checked in the same script that would
   have written.

Meanwhile a thread appends to topic ``B`` with an idempotent SHARED producer whose client
goes through :class:`fencing.faults.Proxy`, told now and then to lose the reply of an append:
the library retries and the duplicate window answers with the original offset.

At the end both topics are read back by :func:`fencing.verify.verify_log` with every
attempt the writers reported (G1, G2, G5, G6), plus the demo's own checks that each fault
really happened. Every wait has a deadline; every exit path kills the workers.

>>> scenario = Scenario(url, QUICK, Board(list(WORKERS)), seed=1, keep=False)
>>> scenario.prepare()                  # raises for a bad URL or a server that is down
>>> scenario.run(delete_keys=True).ok                                  # doctest: +SKIP
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

import fencing
from fencing._keys import Keys
from fencing.verify import Attempt, LogReport, verify_log

from .actors import IdempotentSender, WorkerProcess
from .board import AttemptRecord, Board, ScenarioError
from .config import TOPIC_A, TOPIC_B, WORKERS, Config


@dataclass
class Check:
    """One of the demo's own checks (the verifier's are in the reports)."""

    name: str
    ok: bool
    detail: str = ""


@dataclass
class Result:
    """What a run found."""

    namespace: str
    config: Config
    seed: int
    elapsed: float
    reports: dict[str, LogReport]
    checks: list[Check]
    board: Board
    #: Worker name by producer id, for labelling segments.
    names: dict[str, str] = field(default_factory=dict)

    #: Where the server was (no credentials).
    server: str = ""

    @property
    def ok(self) -> bool:
        """Every guarantee held and every step of the scenario happened."""
        return all(r.ok for r in self.reports.values()) and all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """The run as JSON-ready data (``--json``)."""
        board = self.board
        a, b = self.reports[TOPIC_A], self.reports[TOPIC_B]
        idem = board.idem
        return {
            "ok": self.ok,
            "seed": self.seed,
            "namespace": self.namespace,
            "server": self.server,
            "elapsed_s": round(self.elapsed, 3),
            "config": dataclasses.asdict(self.config),
            "topic_a": {
                "partitions": a.partitions,
                "records": a.records,
                "epochs": sorted({s.epoch for s in a.segments}),
                "segments": [
                    {**dataclasses.asdict(s), "worker": self.names.get(s.producer_id)}
                    for s in a.segments
                ],
                "duplicates": a.duplicates,
                "interleavings": a.interleavings,
                "fenced_attempts": a.fenced_attempts,
                "fenced_landed": a.fenced_landed,
                "lost": a.lost,
                "checks": a.checks,
            },
            "topic_b": {
                "records": b.records,
                "sent": idem.sent,
                "proxy": idem.enabled,
                "note": idem.note,
                "dropped_replies": idem.dropped,
                "retried": idem.retried,
                "unknown": idem.unknown,
                "duplicates": b.duplicates,
                "lost": b.lost,
                "checks": b.checks,
            },
            "workers": {
                w.name: {
                    "pid": w.pid,
                    "status": w.status,
                    "epochs": list(w.epochs),
                    "producer_id": w.producer_id,
                    "acked": w.acked,
                    "fenced": w.fenced,
                    "unknown": w.unknown,
                    "exit_code": w.exit_code,
                }
                for w in board.workers.values()
            },
            "faults": [
                {"t": round(m.t, 3), "worker": m.who, "fault": m.kind, "epoch": m.epoch}
                for m in board.marks
                if m.kind in ("kill", "pause", "resume")
            ],
            "checks": [dataclasses.asdict(c) for c in self.checks],
            "violations": [
                {"topic": r.topic, **dataclasses.asdict(v)} for r in (a, b) for v in r.violations
            ],
            "reports": {name: r.to_dict() for name, r in self.reports.items()},
        }


# -- worker processes ----------------------------------------------------------------------------


class Scenario:
    """One run against the server at ``url``, reporting on ``board``."""

    client: fencing.Client
    raw: redis.Redis

    def __init__(self, url: str, config: Config, board: Board, *, seed: int, keep: bool) -> None:
        self.url = url
        self.config = config
        self.board = board
        self.seed = seed
        self.keep = keep
        # One generator per thread that draws, so a seed repeats the same choices.
        self.rng = random.Random(f"{seed}-workers")
        self.namespace = "demo-" + secrets.token_hex(4)
        self.workers: dict[str, WorkerProcess] = {}
        self.checks: list[Check] = []
        drops = random.Random(f"{seed}-drops")
        self._idem = IdempotentSender(url, self.namespace, board, config, drops)
        self._started = time.monotonic()

    def prepare(self) -> None:
        """Connect and create both topics, before any process starts.

        A bad URL raises ValueError; a server that is down, or one that would evict
        coordination state, raises a :class:`~fencing.FencingError`.
        """
        self.client = fencing.Client.from_url(self.url, namespace=self.namespace)
        try:
            self.client.topic(TOPIC_A, partitions=self.config.partitions).open()
            self.client.topic(TOPIC_B, partitions=1).open()
        except BaseException:
            self.client.close()
            raise
        self.raw = redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=5)

    def run(self, delete_keys: bool) -> Result:
        """Run every step, then verify (after :meth:`prepare`); always :meth:`close`.

        ``delete_keys`` removes the demo's keys at the end (on a server the demo did not
        start), unless ``keep``.
        """
        self._started = time.monotonic()
        try:
            self.exercise()
            return self.verify()
        finally:
            self.close(delete_keys)

    def exercise(self) -> None:
        """The faults, with the idempotent producer running meanwhile; every worker and
        the producer are stopped on the way out, whatever happened."""
        board, cfg = self.board, self.config
        board.say(
            f"namespace {self.namespace}: topic {TOPIC_A} ({cfg.partitions} partitions, "
            f"3 worker processes in WAIT_FOR_EXCLUSIVE, lease {cfg.lease_ttl:g}s); topic "
            f"{TOPIC_B} (an idempotent producer behind a proxy that loses replies)"
        )
        try:
            self._idem.open_proxy()
            self._idem.start()
            self._faults()
        except ScenarioError as exc:
            self.checks.append(Check("every step of the scenario happened", False, str(exc)))
            board.say(f"SCENARIO FAILED: {exc}")
        finally:
            board.set_phase("stopping")
            self._idem.close()
            self._stop_workers()
        board.mark("demo", "end")

    def verify(self) -> Result:
        """Read both topics back with every attempt the writers reported; the demo's own
        checks on top."""
        board = self.board
        board.set_phase("verifying")
        board.say("reading both topics back to verify G1, G2, G5 and G6 ...")
        reports = {
            topic: verify_log(
                self.client,
                topic,
                attempts=self._attempts(topic),
                exclusive=topic == TOPIC_A,
                unique_values=True,
            )
            for topic in (TOPIC_A, TOPIC_B)
        }
        self._own_checks(reports)
        result = Result(
            namespace=self.namespace,
            config=self.config,
            seed=self.seed,
            elapsed=time.monotonic() - self._started,
            reports=reports,
            checks=self.checks,
            board=board,
            names={
                str(w.producer_id): w.name
                for w in board.workers.values()
                if w.producer_id is not None
            },
        )
        board.set_phase("done: " + ("all checks hold" if result.ok else "CHECKS FAILED"))
        return result

    def close(self, delete_keys: bool) -> None:
        """Kill what still runs, stop the proxy, delete the keys (see :meth:`run`)."""
        self._idem.close()
        for worker in self.workers.values():
            worker.kill()
        for worker in self.workers.values():
            worker.join(5)
        if delete_keys and not self.keep:
            with contextlib.suppress(redis.RedisError):
                _delete_namespace(self.raw, self.namespace)
        self.raw.close()
        self.client.close()

    # -- steps ------------------------------------------------------------------------------

    def _faults(self) -> None:
        cfg, board = self.config, self.board
        step = cfg.step_timeout
        order = list(WORKERS)
        self.rng.shuffle(order)  # the start order (who queues first is then the OS's)
        board.set_phase("starting workers")
        for name in order:
            self.workers[name] = WorkerProcess.spawn(name, self.url, self.namespace, cfg, board)
            board.mark(name, "start")

        # 1. One holds and appends while the two others queue behind it.
        first = board.wait_holder(step, "a first holder")
        keys = Keys(self.namespace)
        waiters = [keys.partition(TOPIC_A, p).waiters for p in range(cfg.partitions)]
        _poll(
            lambda: sum(int(self.raw.zcard(k)) for k in waiters) >= 2,
            step,
            "the two other workers queueing",
        )
        board.say("two workers wait in the queue (FIFO, each with its own lease)")
        board.set_phase(f"{first} holds")
        self._hold(first, cfg.hold)

        # 2. Crash: SIGKILL the holder. Its lease lapses by server time; the next waiter
        # takes over with epoch + 1.
        killed_epoch = max(board.workers[first].epochs)
        self.workers[first].signal(signal.SIGKILL)
        board.set_status(first, "killed")
        board.mark(first, "kill", epoch=killed_epoch)
        board.say(
            f"KILL {first} (SIGKILL) while it holds epoch {killed_epoch}: its lease "
            f"({cfg.lease_ttl:g}s) must lapse by server time before anyone takes over"
        )
        board.set_phase(f"{first} killed")
        killed_at = board.now()
        second = board.wait_holder(step, f"a takeover after {first} died", exclude=(first,))
        board.say(
            f"{second} took over {board.now() - killed_at:.2f}s after the kill "
            f"({board.workers[second].epoch_text})"
        )
        board.set_phase(f"{second} holds")
        self._hold(second, cfg.hold)

        # 3. A long pause: SIGSTOP the holder past its lease; the third worker takes over.
        paused_epoch = max(board.workers[second].epochs)
        pause_for = cfg.pause_leases * cfg.lease_ttl
        self.workers[second].signal(signal.SIGSTOP)
        self.workers[second].paused = True
        board.set_status(second, "paused")
        board.mark(second, "pause", epoch=paused_epoch)
        board.say(
            f"PAUSE {second} (SIGSTOP, like a GC pause) for {pause_for:.2f}s, "
            f"{cfg.pause_leases:g}x its lease: it holds epoch {paused_epoch} and will not "
            "notice"
        )
        board.set_phase(f"{second} paused")
        paused_at = board.now()
        third = board.wait_holder(
            step, f"a takeover while {second} sleeps", exclude=(first, second)
        )
        board.say(f"{third} took over while {second} is paused ({board.workers[third].epoch_text})")
        acked = board.workers[third].acked
        board.wait_for(
            lambda: (
                board.workers[third].acked >= acked + cfg.min_records // 2
                and board.now() >= paused_at + pause_for
            ),
            step,
            f"{third} appending during the pause",
        )

        # 4. Resume: the paused worker still believes it holds its epoch. Its in-flight and
        # next sends must come back ProducerFenced; it tries a few more, then leaves.
        self.workers[second].signal(signal.SIGCONT)
        self.workers[second].paused = False
        board.mark(second, "resume", epoch=paused_epoch)
        board.say(
            f"RESUME {second} (SIGCONT): it still thinks it holds epoch {paused_epoch}; "
            "its sends must all be refused"
        )
        board.set_phase(f"{second} resumed")
        board.wait_for(
            lambda: board.workers[second].exit_code is not None, step, f"{second} being fenced"
        )
        board.set_phase(f"{third} holds")
        self._hold(third, cfg.hold / 2)

    def _hold(self, name: str, seconds: float) -> None:
        """Let ``name`` append for ``seconds`` and at least ``min_records`` acked records."""
        board, cfg = self.board, self.config
        w = board.workers[name]
        start, acked = board.now(), w.acked
        board.wait_for(
            lambda: (
                (w.acked >= acked + cfg.min_records and board.now() >= start + seconds)
                or w.status != "holds"
            ),
            seconds + cfg.step_timeout,
            f"{name} appending {cfg.min_records} records",
        )
        if w.status != "holds":
            # Its lease lapsed without a fault from us (a starved machine): the guarantees
            # still hold, but the story did not go as planned, so the run fails.
            raise ScenarioError(f"{name} stopped holding on its own ({w.status})")

    def _stop_workers(self) -> None:
        """Stop every worker: a line on stdin, then a deadline, then SIGKILL."""
        for worker in self.workers.values():
            if worker.paused:
                worker.signal(signal.SIGCONT)
            worker.tell_stop()
        deadline = time.monotonic() + self.config.step_timeout / 2
        for worker in self.workers.values():
            try:
                worker.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.board.error(f"{worker.name} did not stop when told; killed")
                worker.kill()
        for worker in self.workers.values():
            worker.join(5)

    # -- verification -------------------------------------------------------------------------

    def _attempts(self, topic: str) -> list[Attempt]:
        records: list[AttemptRecord] = [a for a in self.board.attempts if a.topic == topic]
        out = [
            Attempt(a.value.encode(), a.partition, a.outcome, a.offset, a.epoch) for a in records
        ]
        if topic == TOPIC_A:
            # A worker that died without saying goodbye (the SIGKILLed one) may have had one
            # send on the wire: its outcome is unknown, and it may or may not be in the log.
            for w in self.board.workers.values():
                if not w.finished and w.producer_id is not None:
                    value = f"{w.name}-{w.next_seq:06d}"
                    out.append(
                        Attempt(value.encode(), w.next_seq % self.config.partitions, "unknown")
                    )
        return out

    def _own_checks(self, reports: dict[str, LogReport]) -> None:
        board = self.board
        a, b = reports[TOPIC_A], reports[TOPIC_B]
        epochs = sorted({s.epoch for s in a.segments})
        add = self.checks.append
        add(Check("no errors in the writers", not board.errors, "; ".join(board.errors)))
        add(
            Check(
                "three holders in turn on topic A",
                len(epochs) >= 3,
                f"epochs in the log: {epochs}",
            )
        )
        add(
            Check(
                "the paused holder was fenced",
                a.fenced_attempts >= 1,
                f"{a.fenced_attempts} fenced attempts, {a.fenced_landed} landed",
            )
        )
        idem = board.idem
        if idem.enabled:
            add(
                Check(
                    "lost replies were retried without duplicates",
                    idem.retried >= 1 and b.duplicates == 0 and idem.out_of_line == 0,
                    f"{idem.dropped} replies lost, {idem.retried} sends retried, "
                    f"{b.duplicates} duplicates",
                )
            )


def _poll(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise ScenarioError(f"{what} did not happen within {timeout:.0f}s")
        time.sleep(0.02)


def _delete_namespace(raw: redis.Redis, namespace: str) -> None:
    """Remove the demo's keys from a server the demo did not start."""
    batch: list[bytes] = []
    for key in raw.scan_iter(match=f"{namespace}:*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            raw.delete(*batch)
            batch.clear()
    if batch:
        raw.delete(*batch)


@contextlib.contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while the demo runs (main thread only), so the
    workers and the embedded server are cleaned up as on Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

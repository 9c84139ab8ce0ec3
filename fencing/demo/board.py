"""What the demo knows while it runs: workers, the idempotent producer, events, attempts.

One :class:`Board` is shared by the orchestrator, the threads that read the workers'
event lines, the idempotent producer's thread and the view. Every change happens under
its lock and wakes :meth:`Board.wait_for`, so the scenario waits on events (with a
deadline), never on guesses.

>>> board = Board(["w1", "w2"])
>>> board.worker_event("w1", {"ev": "acquired", "epochs": [1], "producer_id": 7})
>>> board.workers["w1"].status
'holds'
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

T = TypeVar("T")

Outcome = Literal["acked", "fenced", "unknown"]

#: Worker statuses, as the live view shows them.
STATUSES = ("starting", "waiting", "holds", "killed", "paused", "fenced", "closed", "failed")


class ScenarioError(Exception):
    """A step of the scenario did not happen in time (the demo then reports a failed check)."""


@dataclass
class WorkerState:
    """One producer process as the demo sees it."""

    name: str
    pid: int | None = None
    status: str = "starting"
    epochs: tuple[int, ...] = ()
    producer_id: int | None = None
    acked: int = 0
    fenced: int = 0
    unknown: int = 0
    #: One past the highest sequence number the worker reported on (w1-000012 -> 13).
    next_seq: int = 0
    #: The worker said it left ("closed") or failed ("error").
    finished: bool = False
    exit_code: int | None = None
    acquired_at: float | None = None

    @property
    def epoch_text(self) -> str:
        """The epoch it holds ("epoch 3"), or its epochs if its partitions differ."""
        if not self.epochs:
            return "no epoch"
        if len(set(self.epochs)) == 1:
            return f"epoch {self.epochs[0]}"
        return "epochs " + ",".join(str(e) for e in self.epochs)


@dataclass
class IdempotentState:
    """The idempotent producer on topic B, sending through the fault proxy."""

    enabled: bool = False
    note: str = ""
    sent: int = 0
    acked: int = 0
    #: Replies the proxy swallowed (the append ran, the client never heard).
    dropped: int = 0
    #: Sends whose reply was lost and that still returned their metadata after a retry.
    retried: int = 0
    unknown: int = 0
    #: Acks whose offset was not the one right after the previous ack (a duplicate in the
    #: log would show up here); the verifier has the final word.
    out_of_line: int = 0
    next_offset: int = 0


@dataclass(frozen=True)
class Mark:
    """A moment on the timeline (for the plot): who, what, when (s since the start)."""

    t: float
    who: str
    kind: str
    epoch: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class AttemptRecord:
    """One send and how it ended, as the sender saw it (becomes a verify.Attempt)."""

    topic: str
    value: str
    partition: int
    outcome: Outcome
    offset: int | None = None
    epoch: int | None = None
    who: str = ""


@dataclass
class Board:
    """The shared state of one demo run (thread-safe)."""

    names: list[str]
    clock: Callable[[], float] = time.monotonic
    #: Called with (seconds since start, text) for every event line, under the lock.
    on_line: Callable[[float, str], None] | None = None
    started: float = 0.0
    workers: dict[str, WorkerState] = field(default_factory=dict)
    idem: IdempotentState = field(default_factory=IdempotentState)
    marks: list[Mark] = field(default_factory=list)
    lines: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=200))
    attempts: list[AttemptRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    phase: str = "starting"
    #: Acked records per worker between two progress lines in plain output.
    progress_every: int = 100

    def __post_init__(self) -> None:
        self.started = self.clock()
        self.workers = {name: WorkerState(name) for name in self.names}
        self.cond = threading.Condition(threading.RLock())

    # -- time and lines ------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the demo started."""
        return self.clock() - self.started

    def say(self, text: str) -> None:
        """Add an event line (shown by the view)."""
        with self.cond:
            t = self.now()
            self.lines.append((t, text))
            if self.on_line is not None:
                self.on_line(t, text)
            self.cond.notify_all()

    def mark(self, who: str, kind: str, epoch: int | None = None, detail: str = "") -> None:
        """Remember a moment for the timeline."""
        with self.cond:
            self.marks.append(Mark(self.now(), who, kind, epoch, detail))
            self.cond.notify_all()

    def set_phase(self, phase: str) -> None:
        with self.cond:
            self.phase = phase
            self.cond.notify_all()

    # -- waiting ---------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[], T], timeout: float, what: str) -> T:
        """Wait until ``predicate()`` (called under the lock) is truthy; returns its value.

        Woken by every change to the board; also re-checked every 50 ms, for predicates
        that involve time. Raises :class:`ScenarioError` naming ``what`` after ``timeout``.
        """
        deadline = self.clock() + timeout
        with self.cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - self.clock()
                if left <= 0:
                    raise ScenarioError(f"{what} did not happen within {timeout:.0f}s")
                self.cond.wait(min(left, 0.05))

    # -- workers --------------------------------------------------------------------------

    def holder(self, exclude: tuple[str, ...] = ()) -> str | None:
        """The worker that holds the topic now (by its events), if any, not in ``exclude``."""
        with self.cond:
            for state in self.workers.values():
                if state.status == "holds" and state.name not in exclude:
                    return state.name
            return None

    def wait_holder(self, timeout: float, what: str, exclude: tuple[str, ...] = ()) -> str:
        """Wait until a worker not in ``exclude`` holds the topic; returns its name."""
        name: str = self.wait_for(lambda: self.holder(exclude) or "", timeout, what)
        return name

    def set_status(self, name: str, status: str) -> None:
        with self.cond:
            self.workers[name].status = status
            self.cond.notify_all()

    def worker_event(self, name: str, ev: dict[str, Any]) -> None:
        """Apply one event line of worker ``name`` (see :mod:`fencing.demo.worker`)."""
        with self.cond:
            self._worker_event(self.workers[name], ev)
            self.cond.notify_all()

    def _worker_event(self, w: WorkerState, ev: dict[str, Any]) -> None:
        kind = ev.get("ev")
        if kind == "ready":
            w.pid = int(ev["pid"])
        elif kind == "waiting":
            w.status = "waiting"
            self.mark(w.name, "waiting")
            self.say(f"{w.name} queues for exclusive access (WAIT_FOR_EXCLUSIVE)")
        elif kind == "acquired":
            w.status = "holds"
            w.epochs = tuple(int(e) for e in ev["epochs"])
            w.producer_id = int(ev["producer_id"])
            w.acquired_at = self.now()
            self.mark(w.name, "acquired", epoch=max(w.epochs))
            self.say(f"{w.name} HOLDS {w.epoch_text} (producer id {w.producer_id})")
        elif kind in ("acked", "fenced", "unknown"):
            self._attempt(w, kind, ev)
        elif kind == "closed":
            w.finished = True
            if w.status not in ("fenced", "killed"):
                w.status = "closed"
            self.mark(w.name, "closed")
            self.say(f"{w.name} closed its producer after {w.acked} acked records")
        elif kind == "error":
            w.finished = True
            w.status = "failed"
            self.error(f"{w.name} failed: {ev.get('message', '?')}")

    def _attempt(self, w: WorkerState, kind: str, ev: dict[str, Any]) -> None:
        value = str(ev["value"])
        partition = int(ev["partition"])
        seq = int(value.rsplit("-", 1)[1])
        w.next_seq = max(w.next_seq, seq + 1)
        if kind == "acked":
            w.acked += 1
            self.attempts.append(
                AttemptRecord(
                    "A", value, partition, "acked", int(ev["offset"]), int(ev["epoch"]), w.name
                )
            )
            if w.acked % self.progress_every == 0:
                self.say(
                    f"{w.name} has {w.acked} acked records ({w.epoch_text}, last at "
                    f"partition {partition} offset {ev['offset']})"
                )
        elif kind == "fenced":
            w.fenced += 1
            w.status = "fenced"
            epoch = int(ev["epoch"])
            self.attempts.append(
                AttemptRecord("A", value, partition, "fenced", None, epoch, w.name)
            )
            self.mark(w.name, "fenced", epoch=epoch)
            self.say(
                f"{w.name} FENCED: send of {value} refused (its epoch {epoch} < "
                f"{ev.get('current_epoch')}, checked in the append script)"
            )
        else:
            w.unknown += 1
            self.attempts.append(AttemptRecord("A", value, partition, "unknown", who=w.name))
            self.mark(w.name, "unknown")
            self.say(f"{w.name}: outcome of {value} unknown (it may or may not be in the log)")

    def error(self, message: str) -> None:
        """Something went wrong in a writer: shown now, and it fails the run."""
        with self.cond:
            self.errors.append(message)
            self.say(message)

    def worker_exited(self, name: str, code: int, last_words: str = "") -> None:
        """The worker's process ended with ``code``; ``last_words``: its last stderr line."""
        with self.cond:
            w = self.workers[name]
            w.exit_code = code
            if code != 0 and w.status not in ("killed", "failed"):
                w.status = "failed"
                why = f": {last_words}" if last_words else ""
                self.errors.append(f"{name} exited with code {code}{why}")
            self.mark(name, "exit")
            self.say(f"{name} exited (code {code})")
            self.cond.notify_all()

    # -- the idempotent producer -------------------------------------------------------------

    def idem_result(
        self, value: str, outcome: Outcome, offset: int | None, epoch: int | None, dropped: int
    ) -> None:
        """One send of the idempotent producer; ``dropped`` replies were lost on the way."""
        with self.cond:
            s = self.idem
            s.sent += 1
            s.dropped += dropped
            self.attempts.append(AttemptRecord("B", value, 0, outcome, offset, epoch, "B"))
            if outcome == "acked":
                assert offset is not None
                s.acked += 1
                if offset != s.next_offset:
                    s.out_of_line += 1
                s.next_offset = offset + 1
                if dropped:
                    s.retried += 1
                    self.mark("B", "dropped")
                    # The first few in full, then a running count: one line per lost reply
                    # would drown the workers' story.
                    if s.retried <= 2:
                        self.say(
                            f"B: the reply to {value} was lost; the library retried and the "
                            f"duplicate window answered with its original offset {offset}"
                        )
                    elif s.retried % 5 == 0:
                        self.say(
                            f"B: {s.retried} lost replies so far, each retried and answered "
                            "with its original offset"
                        )
            else:
                s.unknown += 1
                self.mark("B", "unknown")
                self.say(f"B: outcome of {value} unknown after {dropped} lost replies")
            self.cond.notify_all()

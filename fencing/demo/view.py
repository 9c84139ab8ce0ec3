"""What the demo shows while it runs, and the summary it prints at the end.

On a terminal, :class:`LiveView` redraws a small panel in place (plain ANSI escapes, no
extra dependency): one line per worker, the idempotent producer's line, the elapsed time
and phase, and the last events. Anywhere else (a pipe, a file, CI, ``--no-live``),
:class:`PlainView` prints one timestamped line per event.

>>> view = PlainView(sys.stdout)
>>> board = Board(["w1"], on_line=view.line)
>>> board.say("hello")                                               # doctest: +SKIP
[  0.00s] hello
"""

from __future__ import annotations

import shutil
import threading
from typing import TYPE_CHECKING, TextIO

from .board import Board, WorkerState

if TYPE_CHECKING:
    from .scenario import Result

#: Events the live panel keeps on screen.
EVENT_LINES = 9
#: Redraws per second of the live panel.
REFRESH_HZ = 8

_RESET = "\x1b[0m"
_COLOURS = {
    "HOLDS": "\x1b[1;32m",
    "KILLED": "\x1b[1;31m",
    "FENCED": "\x1b[1;31m",
    "FAILED": "\x1b[1;31m",
    "PAUSED": "\x1b[1;33m",
    "KILL": "\x1b[31m",
    "PAUSE": "\x1b[33m",
    "RESUME": "\x1b[33m",
}


def worker_line(w: WorkerState) -> str:
    """One worker as the panel shows it: ``w2  PAUSED  epoch 2  312 acked``."""
    if w.status == "holds":
        state = f"HOLDS {w.epoch_text}"
    elif w.status == "killed":
        state = f"KILLED (held {w.epoch_text})"
    elif w.status == "paused":
        state = f"PAUSED (thinks it holds {w.epoch_text})"
    elif w.status == "fenced":
        state = f"FENCED x {w.fenced} attempts (was {w.epoch_text})"
    elif w.status == "failed":
        state = "FAILED"
    elif w.status == "closed":
        state = f"closed ({w.epoch_text})" if w.epochs else "closed (never held)"
    else:
        state = w.status
    extra = f", {w.unknown} unknown" if w.unknown else ""
    return f"  {w.name}  {state:<42} {w.acked:>5} acked{extra}"


def idem_line(board: Board) -> str:
    """The idempotent producer as the panel shows it."""
    s = board.idem
    lost = f"replies lost {s.dropped}, retried {s.retried}" if s.enabled else s.note
    extra = f", {s.unknown} unknown" if s.unknown else ""
    return f"  B   sent {s.sent:>4}, {lost}, duplicates so far {s.out_of_line}{extra}"


def panel(board: Board, width: int, events_shown: int = EVENT_LINES) -> list[str]:
    """The live panel's lines, each cut to ``width`` (plain text, no colours yet); the
    last ``events_shown`` events at the bottom."""
    with board.cond:
        lines = [
            f" fencing demo   {board.now():6.1f}s   {board.phase}",
            " topic A: exclusive producers (WAIT_FOR_EXCLUSIVE), one process each",
            *(worker_line(w) for w in board.workers.values()),
            " topic B: idempotent producer; the proxy loses some replies",
            idem_line(board),
            " events:",
        ]
        events = list(board.lines)[-events_shown:] if events_shown else []
    lines += [f"  [{t:6.2f}s] {text}" for t, text in events]
    lines += [""] * (events_shown - len(events))
    return [line[: max(10, width - 1)] for line in lines]


def _colour(line: str) -> str:
    for word, code in _COLOURS.items():
        if f" {word} " in f" {line} ":
            line = line.replace(word, f"{code}{word}{_RESET}", 1)
    return line


class PlainView:
    """One timestamped line per event on ``stream``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def line(self, t: float, text: str) -> None:
        self.stream.write(f"[{t:6.2f}s] {text}\n")
        self.stream.flush()

    def start(self, board: Board) -> None:
        """Nothing to draw: lines are printed as they come."""

    def stop(self) -> None:
        self.stream.flush()


class LiveView:
    """A panel redrawn in place on a terminal, :data:`REFRESH_HZ` times a second."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._board: Board | None = None
        self._drawn = 0
        self._events = EVENT_LINES
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def line(self, t: float, text: str) -> None:
        """Events are shown from the board's list by the next redraw."""

    def start(self, board: Board) -> None:
        self._board = board
        # The panel's height is fixed for the run and fits the terminal: moving the cursor
        # up past the top of the screen would scramble every later redraw.
        rows = shutil.get_terminal_size((100, 40)).lines
        self._events = max(0, min(EVENT_LINES, rows - len(board.workers) - 8))
        self.stream.write("\x1b[?25l")  # hide the cursor while redrawing
        self._draw()
        self._thread = threading.Thread(target=self._loop, name="live-view", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(1.0 / REFRESH_HZ):
            self._draw()

    def _draw(self) -> None:
        board = self._board
        if board is None:
            return
        width = shutil.get_terminal_size((100, 40)).columns
        lines = panel(board, width, self._events)
        with self._lock:
            out = []
            if self._drawn:
                out.append(f"\x1b[{self._drawn}F")  # back to the panel's first line
            out.extend(f"\x1b[2K{_colour(line)}\n" for line in lines)
            self.stream.write("".join(out))
            self.stream.flush()
            self._drawn = len(lines)

    def stop(self) -> None:
        """Draw the final state and give the cursor back (on every exit path)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self._draw()
        self.stream.write("\x1b[?25h")
        self.stream.flush()


def summary(result: Result) -> str:
    """The end-of-run summary: segments per epoch, counters, checks, the verdict."""
    board = result.board
    names = result.names
    a, b = result.reports["A"], result.reports["B"]
    out = [""]
    out.append(
        f"topic A: {a.records:,} records in {a.partitions} partitions, written by "
        f"{len({s.producer_id for s in a.segments})} producers in turn"
    )
    for p in range(a.partitions):
        segs = [s for s in a.segments if s.partition == p]
        parts = [
            f"epoch {s.epoch} {names.get(s.producer_id, 'pid ' + s.producer_id)} "
            f"{s.first_offset}..{s.last_offset} ({s.records})"
            for s in segs
        ]
        out.append(f"  partition {p}: " + (" | ".join(parts) if parts else "empty"))
    out.append(
        f"  duplicates {a.duplicates}, interleavings {a.interleavings}, lost acknowledged "
        f"{a.lost}, fenced attempts {a.fenced_attempts} ({a.fenced_landed} landed)"
    )
    s = board.idem
    out.append(f"topic B: {b.records:,} records from one idempotent producer")
    if s.enabled:
        out.append(
            f"  replies lost by the proxy {s.dropped}; {s.retried} sends retried, each got its "
            "original offset back"
        )
        out.append(f"  duplicates {b.duplicates}, lost acknowledged {b.lost}")
    else:
        out.append(f"  {s.note}; duplicates {b.duplicates}, lost acknowledged {b.lost}")
    verdicts = []
    for g in ("G1", "G2", "G5", "G6"):
        got = [r.checks[g] for r in (a, b) if r.checks[g] != "not checked"]
        verdicts.append(f"{g} {'FAILED' if 'failed' in got else 'ok'}")
    out.append("guarantees: " + "  ".join(verdicts))
    for check in result.checks:
        mark = "ok" if check.ok else "FAILED"
        out.append(f"  {mark:<6} {check.name}" + (f": {check.detail}" if check.detail else ""))
    for report in (a, b):
        for v in report.violations[:50]:
            out.append(f"  VIOLATION topic {report.topic}: {v}")
    verdict = "all checks hold" if result.ok else "CHECKS FAILED"
    out.append(f"{verdict} ({result.elapsed:.1f}s, seed {result.seed})")
    return "\n".join(out)

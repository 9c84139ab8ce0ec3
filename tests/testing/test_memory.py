"""fencing.testing: the in-memory client (fakeredis with Lua) and the opt-in pytest plugin.

The plugin is run the way users run it: ``pytest`` in a project of its own (a subprocess)
whose conftest opts in, on each backend. The behaviour of the in-memory client against the
real servers is held by ``tests/conformance``; its differences by
``tests/testing/test_differences.py``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import fencing
import fencing.testing
from fencing import AccessMode

pytest.importorskip("fakeredis")

import fakeredis

from fencing.testing import (
    memory_client,
    memory_client_async,
    memory_redis,
    memory_server,
)
from fencing.testing.backends import BackendUnavailable, FencingServer, docker_url

from ..conformance.cases import CASES
from ..conftest import ServerInfo
from ..docs.examples import blocks_of
from ..support.paths import ROOT
from ..support.user_pytest import run_user_pytest


@pytest.fixture
def memory() -> Iterator[fencing.Client]:
    client = memory_client()
    yield client
    client.close()


# -- the in-memory client -----------------------------------------------------------------------


def test_memory_client_is_the_real_client_on_fakeredis(memory: fencing.Client) -> None:
    assert type(memory) is fencing.Client
    assert memory.namespace == "test"
    assert isinstance(memory_redis(), fakeredis.FakeRedis)
    with memory.topic("orders", partitions=1).producer() as p:
        assert [m.offset for m in p.send_batch([b"a", b"b"], partition=0)] == [0, 1]


def test_every_call_gets_its_own_server_unless_one_is_shared() -> None:
    a, b = memory_client(), memory_client()
    a.topic("orders", partitions=1).producer().send(b"only in a")
    assert b.topic("orders", partitions=1).offsets(0) == (0, 0)
    server = memory_server()
    c = memory_client("app", server=server)
    d = memory_client("app", server=server)
    with c.topic("orders", partitions=1).producer(AccessMode.EXCLUSIVE, lease_ttl=30) as p:
        p.send(b"from c")
        with pytest.raises(fencing.ProducerBusy):
            d.topic("orders").producer(AccessMode.EXCLUSIVE)
    assert [r.value for r in d.topic("orders").reader(0, 0).read()] == [b"from c"]
    # Namespaces keep clients apart on one server, as on a real one.
    e = memory_client("other", server=server)
    assert e.topic("orders", partitions=1).offsets(0) == (0, 0)
    for client in (a, b, c, d, e):
        client.close()


def test_memory_redis_sees_what_the_library_wrote() -> None:
    server = memory_server()
    client = memory_client("app", server=server)
    client.topic("orders", partitions=1).producer().send(b"v")
    raw = memory_redis(server, decode_responses=True)
    assert "app:{orders/0}:log" in set(raw.scan_iter("app:*"))
    assert raw.xlen("app:{orders/0}:log") == 1
    client.close()


def test_client_kwargs_pass_through() -> None:
    client = memory_client("ns", socket_timeout=0.5)
    assert client.settings.socket_timeout == 0.5
    assert client.settings.allow_eviction is True
    client.close()
    with pytest.raises(fencing.InvalidName):
        memory_client("bad namespace")


def test_valkey_flavoured_server() -> None:
    server = memory_server(version=(8, 1), server_type="valkey")
    client = memory_client(server=server)
    assert memory_redis(server).eval("return server.call('PING')", 0) == b"PONG"  # Valkey's alias
    with client.topic("t", partitions=1).producer() as p:
        assert p.send(b"v").offset == 0
    client.close()


def test_without_fakeredis_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fakeredis", None)
    monkeypatch.delitem(sys.modules, "fencing.testing._fake")
    monkeypatch.delattr(fencing.testing, "_fake", raising=False)
    with pytest.raises(ImportError, match=r"fakeredis\[lua\]"):
        memory_client()
    with pytest.raises(ImportError, match=r"fakeredis\[lua\]"):
        memory_server()


def test_async_memory_client_shares_a_server_with_sync_clients() -> None:
    server = memory_server()
    sync_client = memory_client("app", server=server)
    sync_client.topic("orders", partitions=1).producer().send(b"from sync")

    async def main() -> list[bytes]:
        client = memory_client_async("app", server=server)
        try:
            topic = client.topic("orders")
            producer = await topic.producer()
            md = await producer.send(b"from async")
            assert (md.offset, md.epoch) == (1, 0)
            await producer.close()
            return [r.value for r in await (await topic.reader(0, 0)).read()]
        finally:
            await client.close()

    assert asyncio.run(main()) == [b"from sync", b"from async"]
    sync_client.close()


# -- the pytest plugin, run as users run it -----------------------------------------------------

USER_TESTS = """
import fencing
import pytest
from fencing import AccessMode


def test_client_in_a_namespace_of_its_own(fencing_client, fencing_namespace, fencing_backend):
    assert fencing_client.namespace == fencing_namespace
    topic = fencing_client.topic("orders", partitions=1)
    with topic.producer() as p:
        assert p.send(b"first").offset == 0   # the same topic in every test starts at 0


def test_isolated_from_the_previous_test(fencing_client):
    topic = fencing_client.topic("orders", partitions=1)
    with topic.producer() as p:
        assert p.send(b"first").offset == 0


def test_a_second_client_is_another_process_on_the_same_server(fencing_client_factory):
    a, b = fencing_client_factory(), fencing_client_factory()
    old = a.topic("ctl", partitions=1).producer(AccessMode.EXCLUSIVE, lease_ttl=30)
    new = b.topic("ctl").producer(AccessMode.EXCLUSIVE_WITH_FENCING, lease_ttl=30)
    with pytest.raises(fencing.ProducerFenced):
        old.send(b"late")
    assert new.send(b"x").epoch == 2
    old.close()
    new.close()


def test_raw_redis_on_the_same_server(fencing_client, fencing_redis, fencing_namespace):
    fencing_client.topic("orders", partitions=1).producer().send(b"v")
    assert fencing_redis.xlen(f"{fencing_namespace}:{{orders/0}}:log") == 1


def test_backend_reported(fencing_backend, fencing_server, request):
    assert fencing_backend == request.config.getoption("--fencing-backend") or True
    assert fencing_server.backend == fencing_backend
    assert (fencing_server.url is None) == (fencing_backend == "memory")
"""

ANYIO_TESTS = """
import pytest

import fencing

pytestmark = pytest.mark.anyio



async def test_async_producer(fencing_async_client):
    topic = fencing_async_client.topic("orders", partitions=1)
    async with topic.producer(fencing.AccessMode.EXCLUSIVE) as producer:
        assert (await producer.send(b"a")).offset == 0
        with pytest.raises(fencing.ProducerBusy):
            await topic.producer(fencing.AccessMode.EXCLUSIVE)
    reader = await topic.reader(0)
    assert [r.value for r in await reader.read()] == [b"a"]
"""


def run_pytest(
    project: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_user_pytest(project, "-rs", *args, env=env)


def user_project(tmp_path: Path, *, conftest: bool = True, tests: str = USER_TESTS) -> Path:
    if conftest:
        (tmp_path / "conftest.py").write_text(
            'pytest_plugins = ["fencing.testing.pytest_plugin"]\n'
        )
    (tmp_path / "test_user.py").write_text(textwrap.dedent(tests))
    return tmp_path


def summary(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


def test_plugin_memory_backend_by_default(tmp_path: Path) -> None:
    result = run_pytest(user_project(tmp_path))
    assert result.returncode == 0, summary(result)
    assert "5 passed" in result.stdout
    assert "redis-fencing test backend: memory" in result.stdout


@pytest.mark.slow
def test_plugin_embedded_backend_from_the_option(tmp_path: Path) -> None:
    result = run_pytest(user_project(tmp_path), "--fencing-backend=embedded")
    assert result.returncode == 0, summary(result)
    assert "5 passed" in result.stdout
    assert "redis-fencing test backend: embedded" in result.stdout


@pytest.mark.slow
def test_plugin_backend_from_the_environment(tmp_path: Path) -> None:
    result = run_pytest(user_project(tmp_path), env={"FENCING_TEST_BACKEND": "embedded"})
    assert result.returncode == 0, summary(result)
    assert "redis-fencing test backend: embedded" in result.stdout
    # The option wins over the variable.
    result = run_pytest(
        tmp_path, "--fencing-backend=memory", env={"FENCING_TEST_BACKEND": "embedded"}
    )
    assert "redis-fencing test backend: memory" in result.stdout


def test_a_chosen_backend_that_cannot_start_fails_the_run_in_one_line(tmp_path: Path) -> None:
    """Never green by skipping: without testcontainers (an import that fails, here), the
    docker backend ends the run at its first test with exit status 4 and one line."""
    project = user_project(tmp_path)
    (project / "testcontainers").mkdir()
    (project / "testcontainers" / "__init__.py").write_text("raise ImportError('absent')\n")
    told = (
        "--fencing-backend=docker needs testcontainers: pip install "
        "'testcontainers[redis]>=4' (or use --fencing-backend=embedded)"
    )
    for args, env in (
        (("--fencing-backend=docker",), None),
        ((), {"FENCING_TEST_BACKEND": "docker"}),
    ):
        result = run_pytest(project, *args, env=env)
        assert result.returncode == pytest.ExitCode.USAGE_ERROR, summary(result)
        lines = result.stdout.splitlines()
        assert [line for line in lines if told in line] == [f"! _pytest.outcomes.Exit: {told} !"], (
            summary(result)
        )
        assert "= no tests ran in " in lines[-2], summary(result)


@pytest.mark.parametrize("backend", ["memory", pytest.param("embedded", marks=pytest.mark.slow)])
def test_the_testing_pages_conftest_and_tests_run_as_written(tmp_path: Path, backend: str) -> None:
    """The page's conftest.py and test_orders.py, copied as they are, run with the
    backend chosen on the command line (pytest knows the option from the conftest)."""
    page = (ROOT / "docs" / "how-to" / "testing.md").read_text(encoding="utf-8")
    files = {b.title: b.code for b in blocks_of("how-to/testing.md", page) if b.title}
    assert sorted(files) == ["conftest.py", "test_orders.py"]
    for name, code in files.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    result = run_pytest(tmp_path, f"--fencing-backend={backend}")
    assert result.returncode == 0, summary(result)
    assert "3 passed" in result.stdout, summary(result)
    assert f"redis-fencing test backend: {backend}" in result.stdout


def test_plugin_refuses_an_unknown_backend(tmp_path: Path) -> None:
    result = run_pytest(user_project(tmp_path), env={"FENCING_TEST_BACKEND": "sqlite"})
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, summary(result)
    assert "unknown fencing test backend 'sqlite'" in summary(result)
    result = run_pytest(tmp_path, "--fencing-backend=sqlite")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, summary(result)


def test_plugin_by_command_line_without_a_conftest(tmp_path: Path) -> None:
    project = user_project(tmp_path, conftest=False)
    result = run_pytest(project, "-p", "fencing.testing.pytest_plugin")
    assert result.returncode == 0, summary(result)
    assert "5 passed" in result.stdout
    # Without opting in, there are no fixtures: nothing is imposed on other projects.
    result = run_pytest(project)
    assert "fixture 'fencing_client' not found" in result.stdout


def test_plugin_async_fixture_runs_under_anyio(tmp_path: Path) -> None:
    result = run_pytest(user_project(tmp_path, tests=ANYIO_TESTS), "-p", "anyio")
    assert result.returncode == 0, summary(result)
    assert "1 passed" in result.stdout, summary(result)


CONFORMANCE_THROUGH_THE_PLUGIN = """
import pytest
from tests.conformance.cases import CASES


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_case(case, fencing_client):
    case(fencing_client)
"""


@pytest.mark.parametrize("backend", ["memory", pytest.param("embedded", marks=pytest.mark.slow)])
def test_the_conformance_subset_through_the_plugin(tmp_path: Path, backend: str) -> None:
    project = user_project(tmp_path, tests=CONFORMANCE_THROUGH_THE_PLUGIN)
    result = run_pytest(project, f"--fencing-backend={backend}")
    assert result.returncode == 0, summary(result)
    assert f"{len(CASES)} passed" in result.stdout


# -- the docker backend's plumbing, without Docker ----------------------------------------------


class _FakeDocker:
    """Stands in for the ``docker`` package: a daemon that answers, or one that does not."""

    def __init__(self, answers: bool) -> None:
        self.answers = answers

    def from_env(self) -> _FakeDocker:
        return self

    def ping(self) -> bool:
        if not self.answers:
            raise ConnectionError("Cannot connect to the Docker daemon")
        return True

    def close(self) -> None:
        pass


def _fake_testcontainers(monkeypatch: pytest.MonkeyPatch, port: int, images: list[str]) -> None:
    """A ``testcontainers.redis`` whose RedisContainer is a server already running."""

    class RedisContainer:
        def __init__(self, image: str) -> None:
            images.append(image)

        def __enter__(self) -> RedisContainer:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def get_container_host_ip(self) -> str:
            return "127.0.0.1"

        def get_exposed_port(self, port_inside: int) -> int:
            assert port_inside == 6379
            return port

    module = types.ModuleType("testcontainers.redis")
    module.RedisContainer = RedisContainer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "testcontainers", types.ModuleType("testcontainers"))
    monkeypatch.setitem(sys.modules, "testcontainers.redis", module)


def test_docker_backend_without_testcontainers_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "testcontainers.redis", None)
    with (
        pytest.raises(BackendUnavailable, match=r"testcontainers\[redis\]>=4"),
        docker_url("redis:7"),
    ):
        pass


def test_docker_backend_with_docker_down_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_testcontainers(monkeypatch, 6379, [])
    monkeypatch.setitem(sys.modules, "docker", _FakeDocker(answers=False))
    with pytest.raises(BackendUnavailable, match="Docker is not reachable"), docker_url("redis:7"):
        pass


def test_docker_backend_url_reaches_the_container(
    monkeypatch: pytest.MonkeyPatch, server: ServerInfo
) -> None:
    if not server.owned:
        pytest.skip("the stand-in container must be a loopback server the suite started")
    port = urlsplit(server.url).port or 6379
    images: list[str] = []
    _fake_testcontainers(monkeypatch, port, images)
    monkeypatch.setitem(sys.modules, "docker", _FakeDocker(answers=True))
    with docker_url("redis:7.2") as container_url:
        assert container_url == f"redis://127.0.0.1:{port}/0"
        backend = FencingServer("docker", url=container_url)
        client = backend.client("tdocker" + os.urandom(4).hex())
        assert client.topic("t", partitions=1).producer().send(b"v").offset == 0
        backend.close()
    assert images == ["redis:7.2"]

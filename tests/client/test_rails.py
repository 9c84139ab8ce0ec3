"""The client's safety rails: eviction check, retries off, bounded timeouts, process binding,
settings from the environment, reserved names."""

from __future__ import annotations

import os
import pickle
import time

import pytest
import redis

import fencing
from fencing import Client
from fencing._retry import RetryBudget
from fencing.embedded import EmbeddedServer

from ..conftest import ServerInfo


def test_eviction_policy_other_than_noeviction_is_refused_before_any_write(
    fresh_server: ServerInfo, namespace: str
) -> None:
    raw = redis.Redis.from_url(fresh_server.url)
    raw.config_set("maxmemory-policy", "allkeys-lru")
    client = Client.from_url(fresh_server.url, namespace=namespace)
    with pytest.raises(fencing.ConfigurationError, match="noeviction"):
        client.ownership("journal", "host-a", ttl=10).claim("r")
    assert raw.keys("*") == []
    allowed = Client.from_url(fresh_server.url, namespace=namespace, allow_eviction=True)
    assert allowed.ownership("journal", "host-a", ttl=10).claim("r")["r"].token == 1
    client.close()
    allowed.close()


def test_redis_py_retries_are_off_and_timeouts_sit_below_a_third_of_the_ttl(
    client: Client,
) -> None:
    owner = client.ownership("journal", "host-a", ttl=0.9)
    owner.claim("r")
    pool = owner._driver().redis.connection_pool
    assert pool.connection_kwargs["retry"].get_retries() == 0
    assert pool.connection_kwargs["socket_timeout"] < 0.9 / 3
    assert pool.connection_kwargs["socket_connect_timeout"] < 0.9 / 3
    budget = RetryBudget.for_ttl(0.9)
    assert budget.deadline + budget.timeout < 0.9


def test_unreachable_server_gives_unavailable_within_the_lease(
    fresh_server: ServerInfo, namespace: str
) -> None:
    client = Client.from_url(fresh_server.url, namespace=namespace)
    owner = client.ownership("journal", "host-a", ttl=2.0)
    owner.claim("r")
    assert fresh_server.embedded is not None
    fresh_server.embedded.stop()
    started = time.monotonic()
    # No attempt could even connect, so nothing was applied: Unavailable, not OutcomeUnknown.
    with pytest.raises(fencing.Unavailable) as raised:
        owner.renew()
    assert not isinstance(raised.value, fencing.OutcomeUnknown)
    # The whole retry budget of a call stays below the lease it protects.
    assert time.monotonic() - started < 2.0
    with pytest.raises(fencing.Unavailable):
        owner.check("r")
    client.close()


def test_wrapping_an_existing_redis_client(server: ServerInfo, namespace: str) -> None:
    mine = redis.Redis.from_url(server.url, decode_responses=True)
    client = Client(mine, namespace=namespace)
    grant = client.ownership("journal", "host-a", ttl=10).claim("r")["r"]
    assert grant.token == 1
    assert mine.hget(client.keys.ownership("journal", "r"), "token") == "1"
    client.close()
    assert mine.ping()  # the caller's own client is left alone


def test_wrapping_something_else_is_refused() -> None:
    with pytest.raises(fencing.InvalidArgumentType):
        Client("redis://localhost:6379")  # type: ignore[arg-type]


def test_settings_come_from_the_environment(
    server: ServerInfo, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FENCING_REDIS_URL", server.url)
    monkeypatch.setenv("FENCING_NAMESPACE", namespace)
    client = Client.from_url()
    assert client.namespace == namespace
    client.ownership("journal", "host-a", ttl=10).claim("r")
    raw = redis.Redis.from_url(server.url)
    assert raw.exists(f"{namespace}:{{r}}:own:journal") == 1
    client.close()


def test_bad_namespace_from_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FENCING_NAMESPACE", "bad name")
    with pytest.raises(ValueError, match="namespace"):
        Client.from_url("redis://127.0.0.1:1/0")


def test_constructors_do_no_io() -> None:
    client = Client.from_url("redis://127.0.0.1:1/0")  # nothing listens there
    owner = client.ownership("journal", "host-a", ttl=10)
    assert owner.grants == {}
    client.close()


def test_reserved_group_names_are_refused(client: Client) -> None:
    for group in ("__producer__", "__election__", "__anything"):
        with pytest.raises(fencing.InvalidName, match="reserved"):
            client.ownership(group, "host-a", ttl=10)


def test_handles_cannot_be_pickled(client: Client) -> None:
    owner = client.ownership("journal", "host-a", ttl=10)
    with pytest.raises(fencing.ProcessBoundError):
        pickle.dumps(owner)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_handles_refuse_use_after_fork(client: Client, raw: redis.Redis) -> None:
    owner = client.ownership("journal", "host-a", ttl=10)
    owner.claim("r")
    pid = os.fork()
    if pid == 0:  # the child: any use must refuse before I/O
        code = 1
        try:
            owner.check("r")
        except fencing.ProcessBoundError:
            code = 0
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert owner.check("r").token == 1  # the parent's handle is untouched


def test_embedded_server_starts_and_stops() -> None:
    with EmbeddedServer.start() as server:
        assert redis.Redis.from_url(server.url).ping()
    assert server.process.poll() is not None


@pytest.mark.parametrize("ttl", [0.05, 0.3, 1.0, 10.0, 60.0])
def test_the_worst_case_of_a_call_stays_below_its_lease(ttl: float) -> None:
    budget = RetryBudget.for_ttl(ttl)
    assert budget.timeout < ttl / 3
    assert budget.worst_case < ttl


@pytest.mark.parametrize("url", ["bogus://", "redis://host:notaport/0", "nonsense"])
def test_an_unusable_url_is_invalid_argument(url: str) -> None:
    with pytest.raises(fencing.InvalidArgument, match="bad Redis URL"):
        Client.from_url(url)


def test_a_url_with_a_password_is_not_echoed() -> None:
    with pytest.raises(fencing.InvalidArgument) as info:
        Client.from_url("bogus://:hunter2@host:1/0")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0, -1])
def test_an_unusable_socket_timeout_is_refused(value: float) -> None:
    with pytest.raises(fencing.InvalidArgument, match="socket_timeout"):
        Client.from_url("redis://127.0.0.1:1/0", socket_timeout=value)

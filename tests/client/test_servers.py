"""The harness itself: both kinds of server start and answer, at the versions the suite
expects (Redis 7, Valkey 8), and one that cannot start says why."""

from __future__ import annotations

import pytest
import redis

from fencing.embedded import EmbeddedServer

from ..conftest import ServerInfo


def test_server_answers_and_is_the_expected_kind(server: ServerInfo) -> None:
    r = redis.Redis.from_url(server.url)
    info = r.info("server")
    if server.kind == "redis":
        assert "valkey_version" not in info
        assert int(str(info["redis_version"]).split(".")[0]) >= 7
    elif server.kind == "valkey":
        assert str(info["valkey_version"]).split(".")[0] == "8"
    assert r.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"


def test_a_server_that_cannot_start_says_why_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that exits for a reason other than a taken port (a bad option, no TLS in the
    binary) is reported on the first try with the server's own words; only a port taken
    between choosing it and binding it is worth another port."""
    tried: list[int] = []
    launch = EmbeddedServer._launch.__func__  # type: ignore[attr-defined]

    def counting(cls: type[EmbeddedServer], kind: str, binary: str, port: int, *a: object,
                 **k: object) -> EmbeddedServer:  # fmt: skip
        tried.append(port)
        return launch(cls, kind, binary, port, *a, **k)  # type: ignore[no-any-return]

    monkeypatch.setattr(EmbeddedServer, "_launch", classmethod(counting))
    with pytest.raises(RuntimeError, match="no-such-option"):
        EmbeddedServer.start("redis", extra_args=("--no-such-option", "1"))
    assert len(tried) == 1


def test_a_taken_port_is_reported_as_such() -> None:
    with EmbeddedServer.start("redis") as first, pytest.raises(RuntimeError, match="in use"):
        EmbeddedServer.start("redis", port=first.port)

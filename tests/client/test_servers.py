"""The harness itself: both kinds of server start and answer, at the versions the suite
expects (Redis 7, Valkey 8)."""

from __future__ import annotations

import redis

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

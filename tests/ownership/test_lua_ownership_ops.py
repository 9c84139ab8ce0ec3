"""renew-1.lua, check-1.lua and release-1.lua against real servers: raw KEYS/ARGV in, exact
reply out (the ownership rules of docs/explanation/design.md)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis

from fencing._lua_loader import script
from tests.support.clock import wait_server_past
from tests.support.pubsub import next_message

#: Also on Redis 8: the scripts against the server (script flags, error replies, pub/sub).
pytestmark = pytest.mark.server_specific

TTL = 10_000
INC = "inc-1"
RELEASED_CH = "released-ch"


def run(r: redis.Redis, name: str, key: str, *args: str | int) -> Any:
    return r.eval(script(name).source, 1, key, *args)


def run_error(r: redis.Redis, name: str, key: str, *args: str | int) -> str:
    with pytest.raises(redis.ResponseError) as info:
        run(r, name, key, *args)
    return str(info.value)


def claim(
    r: redis.Redis,
    key: str,
    session: str,
    *,
    label: str = "host-a",
    generation: int | None = None,
    ttl_ms: int = TTL,
) -> tuple[int, int]:
    """Claim and return (generation, token)."""
    gen = "" if generation is None else generation
    reply = run(r, "claim", key, session, label, gen, ttl_ms, INC, "", 0, "sess:")
    return int(reply[1]), int(reply[2])


def renew(r: redis.Redis, key: str, session: str, token: int, ttl_ms: int | str = TTL) -> Any:
    return run(r, "renew", key, session, token, ttl_ms, INC)


def check(r: redis.Redis, key: str, session: str, token: int, seen_inc: str = INC) -> Any:
    return run(r, "check", key, session, token, seen_inc)


def release(r: redis.Redis, key: str, session: str, token: int) -> Any:
    return run(r, "release", key, session, token, RELEASED_CH)


def row(r: redis.Redis, key: str) -> dict[str, str]:
    return r.hgetall(key)  # type: ignore[return-value]


def lapse(r: redis.Redis, key: str) -> None:
    """Wait (by server time) until the row's lease has lapsed."""
    wait_server_past(r, int(r.hget(key, "expires")))  # type: ignore[arg-type]


def lease(reply: Any, *, gen: int, token: int, ttl_ms: int | None = None) -> int:
    """Assert a renew/check reply and return its expiry."""
    got_gen, got_token, expires, now = reply
    assert (got_gen, got_token) == (gen, token)
    if ttl_ms is None:
        assert expires > now
    else:
        assert expires == now + ttl_ms
    return int(expires)


# -- renew ---------------------------------------------------------------------------------


def test_renew_extends_the_lease(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1") == (1, 1)
    before = row(r, key)
    expires = lease(renew(r, key, "s1", 1, ttl_ms=2 * TTL), gen=1, token=1, ttl_ms=2 * TTL)
    assert expires > int(before["expires"])
    assert row(r, key) == {**before, "expires": str(expires)}


def test_renew_after_lapse_when_nobody_claimed_keeps_generation_and_token(
    r: redis.Redis, key: str
) -> None:
    assert claim(r, key, "s1", generation=4, ttl_ms=50) == (4, 1)
    lapse(r, key)
    before = row(r, key)
    expires = lease(renew(r, key, "s1", 1), gen=4, token=1, ttl_ms=TTL)
    assert row(r, key) == {**before, "expires": str(expires)}
    lease(check(r, key, "s1", 1), gen=4, token=1)


def test_renew_by_a_superseded_session_is_fenced(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1") == (1, 1)
    assert claim(r, key, "s2", label="host b", generation=0) == (0, 2)
    before = row(r, key)
    assert run_error(r, "renew", key, "s1", 1, TTL, INC) == "FENCED 1 2 host b"
    assert row(r, key) == before


def test_renew_after_lapse_and_takeover_is_fenced(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1", ttl_ms=50) == (1, 1)
    lapse(r, key)
    assert claim(r, key, "s2", label="host-b") == (2, 2)
    assert run_error(r, "renew", key, "s1", 1, TTL, INC) == "FENCED 1 2 host-b"


def test_renew_with_a_wrong_token_is_fenced(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1") == (1, 1)
    before = row(r, key)
    # seen_token 0 keeps the G9 check quiet; the holder check still refuses token 0.
    assert run_error(r, "renew", key, "s1", 0, TTL, INC) == "FENCED 0 1 host-a"
    assert row(r, key) == before


@pytest.mark.parametrize("ttl_ms", [0, -1, "1.5", "soon"])
def test_renew_refuses_a_bad_ttl(r: redis.Redis, key: str, ttl_ms: int | str) -> None:
    assert claim(r, key, "s1") == (1, 1)
    before = row(r, key)
    assert run_error(r, "renew", key, "s1", 1, ttl_ms, INC) == f"BAD_ARGUMENT ttl_ms {ttl_ms}"
    assert row(r, key) == before


def test_renew_of_a_missing_row_is_state_lost(r: redis.Redis, key: str) -> None:
    assert run_error(r, "renew", key, "s1", 1, TTL, INC) == f"STATE_LOST missing {INC} -"
    assert r.exists(key) == 0


def test_renew_of_another_incarnation_is_state_lost(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1") == (1, 1)
    before = row(r, key)
    message = run_error(r, "renew", key, "s1", 1, TTL, "inc-old")
    assert message == f"STATE_LOST incarnation inc-old {INC}"
    assert row(r, key) == before


def test_renew_with_a_token_above_the_stored_one_is_state_lost(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1") == (1, 1)
    before = row(r, key)
    assert run_error(r, "renew", key, "s1", 3, TTL, INC) == "STATE_LOST token 3 1"
    assert row(r, key) == before


# -- check ---------------------------------------------------------------------------------


def test_check_of_a_live_grant_is_read_only(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1", generation=2) == (2, 1)
    before = row(r, key)
    got_gen, got_token, expires, now = check(r, key, "s1", 1)
    assert (got_gen, got_token, expires) == (2, 1, int(before["expires"]))
    assert now < expires
    assert row(r, key) == before


def test_check_after_lapse_is_lease_expired(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1", ttl_ms=50) == (1, 1)
    lapse(r, key)
    before = row(r, key)
    message = run_error(r, "check", key, "s1", 1, INC)
    match = re.fullmatch(r"LEASE_EXPIRED 1 (\d+)", message)
    assert match is not None, message
    assert int(match.group(1)) >= 1
    assert row(r, key) == before


def test_check_by_a_superseded_session_is_fenced(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1") == (1, 1)
    assert claim(r, key, "s2", label="host b", generation=1) == (1, 2)
    before = row(r, key)
    assert run_error(r, "check", key, "s1", 1, INC) == "FENCED 1 2 host b"
    assert row(r, key) == before


def test_check_of_a_missing_row_is_state_lost(r: redis.Redis, key: str) -> None:
    assert run_error(r, "check", key, "s1", 1, INC) == f"STATE_LOST missing {INC} -"
    assert r.exists(key) == 0


def test_check_of_another_incarnation_is_state_lost(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1") == (1, 1)
    before = row(r, key)
    message = run_error(r, "check", key, "s1", 1, "inc-old")
    assert message == f"STATE_LOST incarnation inc-old {INC}"
    assert row(r, key) == before


@pytest.mark.parametrize("name", ["renew", "check", "release"])
def test_wrong_key_type_is_refused_and_untouched(r: redis.Redis, key: str, name: str) -> None:
    r.set(key, "not a row")
    args: tuple[str | int, ...] = {
        "renew": ("s1", 1, TTL, INC),
        "check": ("s1", 1, INC),
        "release": ("s1", 1, RELEASED_CH),
    }[name]
    assert run_error(r, name, key, *args) == f"WRONG_TYPE string {key}"
    assert r.get(key) == "not a row"


# -- release -------------------------------------------------------------------------------


def test_release_returns_1_then_0_and_keeps_generation_and_token(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1", generation=3) == (3, 1)
    before = row(r, key)
    assert release(r, key, "s1", 1) == 1
    after = {**before, "session": "", "expires": "0"}
    assert row(r, key) == after
    assert release(r, key, "s1", 1) == 0
    assert row(r, key) == after


def test_release_of_a_missing_row_returns_0(r: redis.Redis, key: str) -> None:
    assert release(r, key, "s1", 1) == 0
    assert r.exists(key) == 0


@pytest.mark.parametrize(("session", "token"), [("s2", 1), ("s1", 2), ("s2", 2)])
def test_release_by_a_non_holder_changes_nothing(
    r: redis.Redis, key: str, session: str, token: int
) -> None:
    assert claim(r, key, "s1") == (1, 1)
    before = row(r, key)
    assert release(r, key, session, token) == 0
    assert row(r, key) == before


def test_release_by_a_superseded_session_changes_nothing(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1") == (1, 1)
    assert claim(r, key, "s2", generation=0) == (0, 2)
    before = row(r, key)
    assert release(r, key, "s1", 1) == 0
    assert row(r, key) == before


@pytest.mark.parametrize("claimant", ["s1", "s2"])
def test_next_claim_after_release_is_a_new_grant(r: redis.Redis, key: str, claimant: str) -> None:
    assert claim(r, key, "s1", generation=3) == (3, 1)
    assert release(r, key, "s1", 1) == 1
    assert claim(r, key, claimant, label="host-b") == (4, 2)
    assert row(r, key)["session"] == claimant
    lease(check(r, key, claimant, 2), gen=4, token=2)


def test_released_grant_cannot_be_renewed_or_checked(r: redis.Redis, key: str) -> None:
    assert claim(r, key, "s1") == (1, 1)
    assert release(r, key, "s1", 1) == 1
    before = row(r, key)
    # Nobody holds it now: the holder label is empty (the reply says "released since").
    assert run_error(r, "renew", key, "s1", 1, TTL, INC) == "FENCED 1 1 "
    assert run_error(r, "check", key, "s1", 1, INC) == "FENCED 1 1 "
    assert row(r, key) == before


def test_release_publishes_on_the_released_channel(r: redis.Redis, key: str) -> None:
    pubsub = r.pubsub()  # type: ignore[no-untyped-call]
    try:
        pubsub.ssubscribe(RELEASED_CH)
        assert next_message(pubsub)["type"] == "ssubscribe"
        assert claim(r, key, "s1") == (1, 1)
        assert release(r, key, "s2", 1) == 0
        assert release(r, key, "s1", 1) == 1
        message = next_message(pubsub)
        # Only the release that happened published: a refused one comes before it and is silent.
        assert (message["channel"], message["data"]) == (RELEASED_CH, "released 1")
        assert release(r, key, "s1", 1) == 0
        r.spublish(RELEASED_CH, "marker")
        assert next_message(pubsub)["data"] == "marker"
    finally:
        pubsub.close()

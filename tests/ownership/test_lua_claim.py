"""claim-1.lua against real servers: raw KEYS/ARGV in, exact reply out (the ownership rules of
docs/explanation/design.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from fencing._lua_loader import script
from tests.support.clock import server_ms, wait_server_past
from tests.support.pubsub import next_message

#: Also on Redis 8: the script against the server (script flags, error replies, pub/sub).
pytestmark = pytest.mark.server_specific

TTL = 10_000
SESSION_CH = "sess:"


def claim(
    r: redis.Redis,
    key: str,
    session: str,
    *,
    label: str = "host-a",
    generation: int | str | None = None,
    ttl_ms: int | str = TTL,
    new_inc: str = "inc-1",
    seen_inc: str = "",
    seen_token: int = 0,
    session_ch: str = SESSION_CH,
) -> Any:
    gen = "" if generation is None else generation
    args = (session, label, gen, ttl_ms, new_inc, seen_inc, seen_token, session_ch)
    return r.eval(script("claim").source, 1, key, *args)


def claim_error(r: redis.Redis, key: str, session: str, **kwargs: Any) -> str:
    with pytest.raises(redis.ResponseError) as info:
        claim(r, key, session, **kwargs)
    return str(info.value)


def row(r: redis.Redis, key: str) -> dict[str, str]:
    """The row without 'since' (the term's start, tested on its own below)."""
    fields: dict[str, str] = r.hgetall(key)  # type: ignore[assignment]
    fields.pop("since", None)
    return fields


def test_since_is_the_server_time_of_a_grant_to_a_new_session_and_kept_by_renewals(
    r: redis.Redis, key: str
) -> None:
    first = claim(r, key, "s1")
    since = int(r.hget(key, "since") or 0)
    assert since == int(first[4])  # now_ms of the grant
    kept = claim(r, key, "s1")
    assert kept[0] == "kept"
    assert int(r.hget(key, "since") or 0) == since
    r.hset(key, "expires", 0)
    second = claim(r, key, "s2")
    assert int(r.hget(key, "since") or 0) == int(second[4]) >= since


def expected_row(
    *,
    session: str,
    label: str = "host-a",
    gen: int,
    token: int,
    expires: int,
    inc: str = "inc-1",
) -> dict[str, str]:
    return {
        "inc": inc,
        "session": session,
        "label": label,
        "gen": str(gen),
        "token": str(token),
        "expires": str(expires),
    }


def granted(reply: Any, *, status: str, gen: int, token: int, ttl_ms: int = TTL) -> int:
    """Assert a success reply and return its lease expiry."""
    got_status, got_gen, got_token, expires, now, inc = reply
    assert (got_status, got_gen, got_token, inc) == (status, gen, token, "inc-1")
    assert expires == now + ttl_ms
    return int(expires)


def lapse(r: redis.Redis, key: str) -> None:
    """Wait (by server time) until the row's lease has lapsed."""
    wait_server_past(r, int(r.hget(key, "expires")))  # type: ignore[arg-type]


# -- g is None -----------------------------------------------------------------------------


def test_first_claim_ever_gives_generation_1_token_1(r: redis.Redis, key: str) -> None:
    before = server_ms(r)
    reply = claim(r, key, "s1")
    expires = granted(reply, status="granted", gen=1, token=1)
    assert before + TTL <= expires <= server_ms(r) + TTL
    assert row(r, key) == expected_row(session="s1", gen=1, token=1, expires=expires)


def test_same_session_reclaim_keeps_generation_and_token_and_extends(
    r: redis.Redis, key: str
) -> None:
    first = granted(claim(r, key, "s1"), status="granted", gen=1, token=1)
    reply = claim(r, key, "s1", ttl_ms=2 * TTL, new_inc="inc-2")
    second = granted(reply, status="kept", gen=1, token=1, ttl_ms=2 * TTL)
    assert second > first
    assert row(r, key) == expected_row(session="s1", gen=1, token=1, expires=second)


def test_same_session_keeps_a_lapsed_unclaimed_lease(r: redis.Redis, key: str) -> None:
    granted(claim(r, key, "s1", ttl_ms=50), status="granted", gen=1, token=1, ttl_ms=50)
    lapse(r, key)
    expires = granted(claim(r, key, "s1"), status="kept", gen=1, token=1)
    assert row(r, key) == expected_row(session="s1", gen=1, token=1, expires=expires)


def test_another_live_session_gets_conflict(r: redis.Redis, key: str) -> None:
    expires = granted(claim(r, key, "s1", label="host a b"), status="granted", gen=1, token=1)
    before = row(r, key)
    t0 = server_ms(r)
    message = claim_error(r, key, "s2", label="host-b")
    match = re.fullmatch(r"CONFLICT 1 (\d+) host a b", message)
    assert match is not None, message
    assert 0 < int(match.group(1)) <= expires - t0
    assert row(r, key) == before


def test_lapsed_lease_is_taken_by_another_session_with_next_generation(
    r: redis.Redis, key: str
) -> None:
    granted(claim(r, key, "s1", ttl_ms=50), status="granted", gen=1, token=1, ttl_ms=50)
    lapse(r, key)
    expires = granted(claim(r, key, "s2", label="host-b"), status="granted", gen=2, token=2)
    assert row(r, key) == expected_row(
        session="s2", label="host-b", gen=2, token=2, expires=expires
    )


# -- explicit generations ------------------------------------------------------------------


def test_stale_generation_changes_nothing(r: redis.Redis, key: str) -> None:
    granted(claim(r, key, "s1", generation=5), status="granted", gen=5, token=1)
    before = row(r, key)
    assert claim_error(r, key, "s2", generation=4) == "STALE_GENERATION 5 4"
    assert claim_error(r, key, "s1", generation=1) == "STALE_GENERATION 5 1"
    assert row(r, key) == before


@pytest.mark.parametrize("g", [3, 5])
def test_generation_at_or_above_stored_severs_live_holder(r: redis.Redis, key: str, g: int) -> None:
    granted(claim(r, key, "s1", generation=3), status="granted", gen=3, token=1)
    expires = granted(
        claim(r, key, "s2", label="host-b", generation=g), status="granted", gen=g, token=2
    )
    assert row(r, key) == expected_row(
        session="s2", label="host-b", gen=g, token=2, expires=expires
    )


def test_generation_above_stored_by_own_session_keeps_token(r: redis.Redis, key: str) -> None:
    granted(claim(r, key, "s1"), status="granted", gen=1, token=1)
    expires = granted(claim(r, key, "s1", generation=4), status="kept", gen=4, token=1)
    assert row(r, key) == expected_row(session="s1", gen=4, token=1, expires=expires)


def test_generation_zero_always_wins_and_restarts_generation(r: redis.Redis, key: str) -> None:
    granted(claim(r, key, "s1", generation=7), status="granted", gen=7, token=1)
    expires = granted(
        claim(r, key, "s2", label="host-b", generation=0), status="granted", gen=0, token=2
    )
    assert row(r, key) == expected_row(
        session="s2", label="host-b", gen=0, token=2, expires=expires
    )


def test_generation_zero_on_first_claim(r: redis.Redis, key: str) -> None:
    expires = granted(claim(r, key, "s1", generation=0), status="granted", gen=0, token=1)
    assert row(r, key) == expected_row(session="s1", gen=0, token=1, expires=expires)


def test_token_never_decreases_across_a_generation_zero_reset(r: redis.Redis, key: str) -> None:
    granted(claim(r, key, "s1", generation=5), status="granted", gen=5, token=1)
    granted(claim(r, key, "s2", generation=0), status="granted", gen=0, token=2)
    granted(claim(r, key, "s3", generation=1), status="granted", gen=1, token=3)
    reply = claim(r, key, "s4", generation=0, ttl_ms=50)
    granted(reply, status="granted", gen=0, token=4, ttl_ms=50)
    lapse(r, key)
    expires = granted(claim(r, key, "s5"), status="granted", gen=1, token=5)
    assert row(r, key) == expected_row(session="s5", gen=1, token=5, expires=expires)


# -- bad input and foreign keys ------------------------------------------------------------


@pytest.mark.parametrize("value", ["string", "list"])
def test_wrong_key_type_writes_nothing(r: redis.Redis, key: str, value: str) -> None:
    if value == "string":
        r.set(key, "not a row")
    else:
        r.rpush(key, "a", "b")
    assert claim_error(r, key, "s1") == f"WRONG_TYPE {value} {key}"
    if value == "string":
        assert r.get(key) == "not a row"
    else:
        assert r.lrange(key, 0, -1) == ["a", "b"]


@pytest.mark.parametrize("ttl_ms", [0, -5, "", "soon", "1.5"])
def test_bad_ttl_is_refused(r: redis.Redis, key: str, ttl_ms: int | str) -> None:
    assert claim_error(r, key, "s1", ttl_ms=ttl_ms) == f"BAD_ARGUMENT ttl_ms {ttl_ms}"
    assert r.exists(key) == 0


@pytest.mark.parametrize("generation", ["-1", "1.5", "many"])
def test_bad_generation_is_refused(r: redis.Redis, key: str, generation: str) -> None:
    message = claim_error(r, key, "s1", generation=generation)
    assert message == f"BAD_ARGUMENT generation {generation}"
    assert r.exists(key) == 0


def test_negative_generation_leaves_the_row_intact(r: redis.Redis, key: str) -> None:
    granted(claim(r, key, "s1"), status="granted", gen=1, token=1)
    before = row(r, key)
    assert claim_error(r, key, "s2", generation=-3) == "BAD_ARGUMENT generation -3"
    assert row(r, key) == before


# -- G9: state loss ------------------------------------------------------------------------


def test_state_lost_when_the_seen_row_is_missing(r: redis.Redis, key: str) -> None:
    message = claim_error(r, key, "s1", seen_inc="inc-1", seen_token=1)
    assert message == "STATE_LOST missing inc-1 -"
    assert r.exists(key) == 0


def test_state_lost_when_the_incarnation_differs(r: redis.Redis, key: str) -> None:
    granted(claim(r, key, "s1"), status="granted", gen=1, token=1)
    before = row(r, key)
    message = claim_error(r, key, "s1", seen_inc="inc-old", seen_token=1)
    assert message == "STATE_LOST incarnation inc-old inc-1"
    assert row(r, key) == before


def test_state_lost_when_the_token_went_backwards(r: redis.Redis, key: str) -> None:
    granted(claim(r, key, "s1"), status="granted", gen=1, token=1)
    before = row(r, key)
    assert claim_error(r, key, "s2", seen_inc="inc-1", seen_token=4) == "STATE_LOST token 4 1"
    assert row(r, key) == before


def test_seen_history_that_matches_is_accepted(r: redis.Redis, key: str) -> None:
    granted(claim(r, key, "s1"), status="granted", gen=1, token=1)
    reply = claim(r, key, "s1", seen_inc="inc-1", seen_token=1, new_inc="inc-9")
    granted(reply, status="kept", gen=1, token=1)


# -- notifications -------------------------------------------------------------------------


@pytest.fixture
def subscriber(r: redis.Redis) -> Iterator[redis.client.PubSub]:
    pubsub = r.pubsub()  # type: ignore[no-untyped-call]
    yield pubsub
    pubsub.close()


def subscribe(pubsub: redis.client.PubSub, channel: str) -> None:
    pubsub.ssubscribe(channel)
    assert next_message(pubsub)["type"] == "ssubscribe"


def test_severing_claim_publishes_to_the_old_session(
    r: redis.Redis, key: str, subscriber: redis.client.PubSub
) -> None:
    subscribe(subscriber, SESSION_CH + "s1")
    granted(claim(r, key, "s1"), status="granted", gen=1, token=1)
    granted(claim(r, key, "s2", generation=0), status="granted", gen=0, token=2)
    message = next_message(subscriber)
    assert (message["channel"], message["data"]) == (SESSION_CH + "s1", f"severed 1 2 {key}")


def test_lapsed_takeover_publishes_to_the_old_session(
    r: redis.Redis, key: str, subscriber: redis.client.PubSub
) -> None:
    subscribe(subscriber, SESSION_CH + "s1")
    granted(claim(r, key, "s1", ttl_ms=50), status="granted", gen=1, token=1, ttl_ms=50)
    lapse(r, key)
    granted(claim(r, key, "s2"), status="granted", gen=2, token=2)
    message = next_message(subscriber)
    assert (message["channel"], message["data"]) == (SESSION_CH + "s1", f"severed 1 2 {key}")


def test_claims_that_sever_nobody_publish_nothing(
    r: redis.Redis, key: str, subscriber: redis.client.PubSub
) -> None:
    subscribe(subscriber, SESSION_CH + "s1")
    granted(claim(r, key, "s1"), status="granted", gen=1, token=1)
    granted(claim(r, key, "s1", generation=3), status="kept", gen=3, token=1)
    with pytest.raises(redis.ResponseError):
        claim(r, key, "s2")
    # A marker published after the claims arrives first iff the claims published nothing.
    r.spublish(SESSION_CH + "s1", "marker")
    assert next_message(subscriber)["data"] == "marker"

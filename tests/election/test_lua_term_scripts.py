"""producer_open-5.lua in mode 'term', term_fence-5.lua, term_guard-2.lua and
topic_guard-1.lua against real servers: raw KEYS/ARGV in, exact reply out. A lower token
never fences a higher one; a retry changes nothing; racing opens leave the later term."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
import redis

import fencing
from fencing._keys import ELECTION_GROUP, PartitionKeys
from fencing._lua_loader import script

from ..support.keys import snapshot

pytestmark = pytest.mark.server_specific

TTL = 10_000
ROUNDS = 50 if os.environ.get("FENCING_SOAK") == "1" else 5


def pk_of(client: fencing.Client, topic: str) -> PartitionKeys:
    client.topic(topic, partitions=1).open()
    return client.keys.partition(topic, 0)


def term_open(r: redis.Redis, pk: PartitionKeys, session: str, token: int, **kw: Any) -> Any:
    election = kw.get("election", "sched")
    mode = kw.get("mode", "term")
    part_inc = r.hget(pk.meta, "inc")
    keys = (pk.owner, pk.shared, pk.waiters, pk.waiting_leases, pk.meta)
    term = (election, token) if mode == "term" else ("", "")
    args = (session, "label", mode, TTL, "row-inc", "", "", pk.session_prefix, pk.released,
            "0", part_inc, *term)  # fmt: skip
    return r.eval(script("producer_open").source, 5, *keys, *args)


def term_fence(r: redis.Redis, pk: PartitionKeys, token: int, election: str = "sched") -> Any:
    topic_inc = r.hget(pk.meta, "topic_inc")
    keys = (pk.owner, pk.shared, pk.waiters, pk.waiting_leases, pk.meta)
    args = (election, token, topic_inc, "row-inc", pk.session_prefix, pk.released)
    return r.eval(script("term_fence").source, 5, *keys, *args)


def error_of(call: Any, *args: Any, **kw: Any) -> str:
    with pytest.raises(redis.ResponseError) as info:
        call(*args, **kw)
    return str(info.value)


def test_a_lower_token_never_fences_a_higher_one_and_retries_change_nothing(
    client: fencing.Client, r: redis.Redis, namespace: str
) -> None:
    pk = pk_of(client, "t")
    assert term_open(r, pk, "b", 2) == ["granted", 2, pytest.approx(0, abs=1e15), "row-inc", 1]
    assert r.hmget(pk.owner, "token", "session", "guard", "mode") == ["2", "b", "sched", "x"]
    before = snapshot(r, namespace)
    assert error_of(term_open, r, pk, "a", 1) == "PRODUCER_FENCED 1 2 term-ended"
    assert term_fence(r, pk, 1) == ["fenced", 2]
    assert term_fence(r, pk, 2) == ["fenced", 2]
    assert snapshot(r, namespace) == before
    # The same session's retry: same epoch.
    assert term_open(r, pk, "b", 2)[:2] == ["granted", 2]
    # A later term's fence: epoch jumps to its token, nobody holds it; a retry is a no-op.
    assert term_fence(r, pk, 5) == ["fenced", 5]
    assert r.hmget(pk.owner, "token", "session") == ["5", ""]
    before = snapshot(r, namespace)
    assert term_fence(r, pk, 5) == ["fenced", 5]
    assert snapshot(r, namespace) == before
    assert error_of(term_open, r, pk, "b", 2) == "PRODUCER_FENCED 2 5 term-ended"
    assert term_open(r, pk, "c", 5)[:2] == ["granted", 5]


def test_outside_opens_and_other_elections_are_refused(
    client: fencing.Client, r: redis.Redis, namespace: str
) -> None:
    pk = pk_of(client, "t")
    term_open(r, pk, "b", 3)
    before = snapshot(r, namespace)
    for mode in ("shared", "exclusive", "wait", "fence"):
        assert error_of(term_open, r, pk, "x", 0, mode=mode) == "GUARDED sched outside 3"
    assert error_of(term_open, r, pk, "x", 9, election="other") == "GUARDED sched election 3"
    assert term_fence(r, pk, 9, election="other") == ["foreign", "sched"]
    assert snapshot(r, namespace) == before


def test_a_topic_written_outside_at_the_token_or_above_is_refused(
    client: fencing.Client, r: redis.Redis
) -> None:
    pk = pk_of(client, "t")
    for n in range(3):
        term_open(r, pk, f"out-{n}", 0, mode="fence")
    assert r.hget(pk.owner, "token") == "3"
    assert error_of(term_open, r, pk, "b", 2) == "GUARDED sched epoch 3"
    assert error_of(term_open, r, pk, "b", 3) == "GUARDED sched epoch 3"
    # The fence of a term guards it anyway: the outside holder is severed, the epoch kept.
    assert term_fence(r, pk, 2) == ["fenced", 3]
    assert r.hmget(pk.owner, "token", "session", "guard") == ["3", "", "sched"]
    assert term_open(r, pk, "d", 4)[:2] == ["granted", 4]


def test_topic_and_election_registrations(client: fencing.Client, r: redis.Redis) -> None:
    client.topic("t", partitions=1).open()
    meta = client.keys.topic_meta("t")
    inc = r.hget(meta, "inc")
    guard = script("topic_guard").source
    assert r.eval(guard, 1, meta, "sched", inc) == ["ours"]
    assert r.eval(guard, 1, meta, "sched", inc) == ["ours"]
    assert r.eval(guard, 1, meta, "other", inc) == ["foreign", "sched"]
    assert r.eval(guard, 1, meta, "sched", "older") == ["gone"]
    assert r.eval(guard, 1, client.keys.topic_meta("nope"), "sched", inc) == ["gone"]

    election = client.election("sched", "a", ttl=10.0)
    row_key = client.keys.ownership(ELECTION_GROUP, "sched")
    guards = row_key + ":guards"
    source = script("term_guard").source
    with election.campaign() as term:
        session, row_inc = r.hget(row_key, "session"), r.hget(row_key, "inc")
        add = ("add", "t", f"{inc} 1", session)
        assert r.eval(source, 2, row_key, guards, *add, term.token, row_inc) == 1
        assert r.eval(source, 2, row_key, guards, *add, term.token, row_inc) == 1
        intruder = ("add", "t", f"{inc} 1", "intruder")
        with pytest.raises(redis.ResponseError, match=r"^FENCED 1 1 a$"):
            r.eval(source, 2, row_key, guards, *intruder, term.token, row_inc)
        assert r.hgetall(guards) == {"t": f"{inc} 1"}
        assert r.eval(source, 2, row_key, guards, "drop", "t", "older 1", "", "", "") == 0
        assert r.eval(source, 2, row_key, guards, "drop", "t", f"{inc} 1", "", "", "") == 1
        assert r.hgetall(guards) == {}
    election.close()


def test_racing_opens_of_a_deposed_term_and_the_current_one_leave_the_current(
    client: fencing.Client, r: redis.Redis
) -> None:
    for n in range(ROUNDS):
        pk = pk_of(client, f"race-{n}")
        term_open(r, pk, "old", 1)
        outcomes: list[object] = []

        def deposed(pk: PartitionKeys = pk, outcomes: list[object] = outcomes) -> None:
            for _ in range(20):
                try:
                    outcomes.append(term_open(r, pk, "old-again", 1)[0])
                except redis.ResponseError as exc:
                    outcomes.append(str(exc))

        racer = threading.Thread(target=deposed)
        racer.start()
        assert term_fence(r, pk, 2) == ["fenced", 2]
        assert term_open(r, pk, "new", 2)[:2] == ["granted", 2]
        racer.join()
        assert r.hmget(pk.owner, "token", "session") == ["2", "new"]
        assert set(outcomes) <= {"granted", "PRODUCER_FENCED 1 2 term-ended"}

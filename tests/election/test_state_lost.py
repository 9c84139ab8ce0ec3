"""G9 for elections: a store that lost its state (FLUSHALL) ends the term with StateLost,
never a fresh start with a smaller token; foreign values under an election's keys are
refused and left alone."""

from __future__ import annotations

import pytest
import redis

import fencing
from fencing import Client
from fencing._keys import ELECTION_GROUP

from ..conftest import ServerInfo


def test_an_election_handle_never_gets_a_smaller_token_after_the_store_lost_state(
    fresh_server: ServerInfo, namespace: str
) -> None:
    """The token is "the fencing token for writes elsewhere (UPDATE ... WHERE token <= $1)" and
    "grows by one on every grant to a new session and never goes down"; G9: a handle that
    saw state raises StateLost rather than starting afresh on reset epochs.

    An Election handle that already led with token 3 raises StateLost when it campaigns after a
    FLUSHALL (or at least never leads with a token <= 3)."""
    client = fencing.Client.from_url(fresh_server.url, namespace=namespace)
    raw = redis.Redis.from_url(fresh_server.url)
    try:
        election = client.election("sched", "a", ttl=5.0)
        tokens = []
        for _ in range(3):
            with election.campaign() as term:
                tokens.append(term.token)
        assert tokens == [1, 2, 3]
        raw.flushall()
        try:
            with election.campaign(timeout=2) as term:
                tokens.append(term.token)
        except fencing.StateLost:
            return
        finally:
            election.close()
        assert tokens[-1] > 3, f"elected again with token {tokens[-1]} after token 3"
    finally:
        client.close()
        raw.close()


def test_flushall_under_a_leader_is_state_lost_with_one_on_revoked(
    fresh_server: ServerInfo, namespace: str
) -> None:
    """A FLUSHALL under a leader ends its term with StateLost (never a silent fresh start):
    on_revoked runs once, check() raises StateLost."""
    client = fencing.Client.from_url(fresh_server.url, namespace=namespace)
    raw = redis.Redis.from_url(fresh_server.url)
    revoked: list[int] = []
    try:
        election = client.election(
            "sched", "a", ttl=1.0, on_revoked=lambda t: revoked.append(t.token)
        )
        with election.campaign() as term:
            raw.flushall()
            assert term.lost.wait(3)
            assert isinstance(term.reason, fencing.StateLost)
            with pytest.raises(fencing.StateLost):
                term.check()
        assert revoked == [1]
        election.close()
    finally:
        client.close()
        raw.close()


def test_wrong_type_keys_under_an_election_are_refused_and_left_alone(
    client: Client, raw: redis.Redis
) -> None:
    """A foreign value at the candidates key or at the election row is refused with WrongKeyType
    and left as it was."""
    cand = client.keys.election_candidates("sched")
    raw.set(cand, "x")
    election = client.election("sched", "a", ttl=5.0)
    with pytest.raises(fencing.WrongKeyType), election.campaign(timeout=0.5):
        pass
    assert raw.get(cand) == b"x"
    raw.delete(cand)
    row = client.keys.ownership(ELECTION_GROUP, "sched")
    raw.rpush(row, "y")
    with pytest.raises(fencing.WrongKeyType), election.campaign(timeout=0.5):
        pass
    assert raw.lrange(row, 0, -1) == [b"y"]
    election.close()

"""Leader election: terms, tokens, resign, callbacks,
the renew deadline, observe() and leader(), against real servers (threads in one process;
``test_processes.py`` has the multi-process cases)."""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import threading
import time

import pytest
import redis

import fencing
from fencing import Client, Leadership
from fencing._keys import ELECTION_GROUP
from fencing.faults import Proxy

from ..support.flavours import Api
from ..support.polling import wait_until
from ..support.threads import in_thread


def test_campaign_elects_with_a_token_that_grows_per_term(client: Client) -> None:
    election = client.election("scheduler", candidate_id="host-a", ttl=5.0)
    with election.campaign() as first:
        assert first.token == 1
        assert not first.lost.is_set()
        assert first.check().token == 1
        info = election.leader()
        assert info is not None
        assert (info.label, info.token) == ("host-a", 1)
        assert 4.0 < info.lease_left <= 5.0
        assert abs(info.since - first.term_started) < 0.001
    assert first.lost.is_set()
    assert election.leader() is None
    with pytest.raises(fencing.Fenced):
        first.check()
    # The same candidate campaigning again is a new session: a new term, token + 1.
    with election.campaign() as second:
        assert second.token == 2
    election.close()


def test_the_row_is_the_ownership_row_of_the_reserved_group(
    client: Client, raw: redis.Redis, namespace: str
) -> None:
    election = client.election("scheduler", candidate_id="host-a", ttl=5.0)
    with election.campaign() as term:
        row = raw.hgetall(client.keys.ownership(ELECTION_GROUP, "scheduler"))
        assert row[b"label"] == b"host-a"
        assert int(row[b"token"]) == term.token
    election.close()


def test_resign_hands_over_to_a_waiter_promptly(client: Client) -> None:
    a = client.election("sched", candidate_id="a", ttl=30.0)
    b = client.election("sched", candidate_id="b", ttl=30.0)
    elected_b = threading.Event()
    tokens: list[int] = []
    handed_at: list[float] = []

    def run_b() -> None:
        with b.campaign(timeout=20) as term:
            handed_at.append(time.monotonic())
            tokens.append(term.token)
            elected_b.set()

    with a.campaign() as term_a:
        t = threading.Thread(target=run_b)
        t.start()
        wait_until(lambda: b.candidates() == 1)
        assert not elected_b.is_set()
        resigned_at = time.monotonic()
    assert elected_b.wait(10)
    t.join(10)
    assert tokens == [term_a.token + 1]
    # Woken by the release notification, not by the 30 s lease nor a 1 s re-check.
    assert handed_at[0] - resigned_at < 0.5
    a.close()
    b.close()


def test_campaign_timeout_raises_ownership_conflict_and_registers_nothing(
    client: Client,
) -> None:
    a = client.election("sched", candidate_id="a", ttl=30.0)
    b = client.election("sched", candidate_id="b", ttl=30.0, on_revoked=lambda term: None)
    with a.campaign():
        with pytest.raises(fencing.OwnershipConflict), b.campaign(timeout=0.2):
            pytest.fail("b was elected while a leads")
        assert b.candidates() == 0
    a.close()
    b.close()


def test_callbacks_once_per_term_held_never_for_a_term_not_held(client: Client) -> None:
    events: list[tuple[str, str, int]] = []

    def elected(term: Leadership) -> None:
        events.append(("elected", term.election.candidate_id, term.token))

    def revoked(term: Leadership) -> None:
        events.append(("revoked", term.election.candidate_id, term.token))

    a = client.election("sched", "a", ttl=30.0, on_elected=elected, on_revoked=revoked)
    loser = client.election("sched", "loser", ttl=30.0, on_elected=elected, on_revoked=revoked)
    with a.campaign() as term:
        with pytest.raises(fencing.OwnershipConflict), loser.campaign(timeout=0.1):
            pass
        term.resign()  # an early resign, then the block's own: still one on_revoked
    assert events == [("elected", "a", 1), ("revoked", "a", 1)]
    a.close()
    loser.close()


def test_a_superseded_leader_learns_it_by_notification_and_gets_one_revoked(
    client: Client,
) -> None:
    revoked: list[int] = []
    leader = client.election("sched", "a", ttl=30.0, on_revoked=lambda t: revoked.append(t.token))
    with leader.campaign() as term:
        # An operator takes the row over at generation 0 (fencing release does this).
        taker = fencing.Ownership(client, ELECTION_GROUP, "operator", 30.0, _allow_reserved=True)
        taker.claim("sched", generation=0)
        assert term.lost.wait(5), "the severed notification should end the term at once"
        assert isinstance(term.reason, fencing.Fenced)
        with pytest.raises(fencing.Fenced):
            term.check()
        taker.close()
    assert revoked == [1]
    leader.close()


def test_renew_deadline_steps_down_before_the_lease_lapses_by_server_time(
    proxied: tuple[Proxy, Client], r: redis.Redis
) -> None:
    proxy, client = proxied
    ttl, deadline = 1.0, 0.5
    election = client.election("sched", "a", ttl=ttl, renew_deadline=deadline)
    with election.campaign() as term:
        key = client.keys.ownership(ELECTION_GROUP, "sched")
        proxy.drop_requests(b"*", count=None, close=False)  # a black hole
        black_at = time.monotonic()
        assert term.lost.wait(5)
        lost_at = time.monotonic()
        # Stepped down by the timer, before the lease could lapse by server time.
        server_now = r.time()
        now_ms = server_now[0] * 1000 + server_now[1] // 1000
        expires = int(r.hget(key, "expires") or 0)
        assert expires > now_ms, "the lease was still live on the server when it stepped down"
        assert lost_at - black_at < ttl
        assert isinstance(term.reason, fencing.LeaseExpired)
        proxy.clear()
        proxy.sever()
    election.close()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"ttl": 1.0, "renew_deadline": 1.0}, fencing.InvalidArgument),
        ({"ttl": 1.0, "renew_deadline": 2.0}, fencing.InvalidArgument),
        ({"ttl": 1.0, "renew_deadline": 0.5, "retry_period": 0.5}, fencing.InvalidArgument),
        ({"ttl": 1.0, "renew_deadline": -1}, fencing.InvalidArgument),
        ({"ttl": 1.0, "renew_deadline": "0.5"}, fencing.InvalidArgumentType),
        ({"ttl": 0}, fencing.InvalidArgument),
        ({"ttl": 1.0, "on_elected": "nope"}, fencing.InvalidArgumentType),
        ({"ttl": 1.0, "exit_on_loss": 1}, fencing.InvalidArgumentType),
    ],
)
def test_bad_timing_is_refused_before_any_io(
    client: Client, raw: redis.Redis, namespace: str, kwargs: dict[str, object], error: type
) -> None:
    with pytest.raises(error):
        client.election("sched", "a", **kwargs)  # type: ignore[arg-type]
    assert raw.keys(f"{namespace}:*") == []


@pytest.mark.parametrize("name", ["", "__x", "a b", "x" * 201, None])
def test_bad_election_names_are_refused(client: Client, name: object) -> None:
    with pytest.raises(fencing.InvalidArgument):
        client.election(name, "a")  # type: ignore[arg-type]


@pytest.mark.parametrize("label", ["", "   ", "a\nb", "x" * 1000, None, 3])
def test_bad_candidate_ids_are_refused(client: Client, label: object) -> None:
    with pytest.raises(fencing.InvalidArgument):
        client.election("ok", label)  # type: ignore[arg-type]


def test_observe_yields_each_change_and_ends_on_close(client: Client) -> None:
    watcher = client.election("sched", "watcher", ttl=5.0)
    seen: list[tuple[str, int] | None] = []
    done = threading.Event()

    def watch() -> None:
        for info in watcher.observe():
            seen.append(None if info is None else (info.label, info.token))
        done.set()

    t = threading.Thread(target=watch)
    t.start()
    wait_until(lambda: seen == [None])
    for label in ("a", "b"):
        e = client.election("sched", label, ttl=5.0)
        with e.campaign():
            wait_until(lambda label=label: seen and seen[-1] is not None and seen[-1][0] == label)
        e.close()
        wait_until(lambda: seen[-1] is None)
    watcher.close()
    assert done.wait(5)
    t.join(5)
    assert seen == [None, ("a", 1), None, ("b", 2), None]


def test_close_resigns_a_running_term(client: Client) -> None:
    election = client.election("sched", "a", ttl=30.0)
    manager = election.campaign()
    term = manager.__enter__()
    election.close()
    assert term.lost.is_set()
    assert client.election("sched", "b").leader() is None
    manager.__exit__(None, None, None)  # resigning again is harmless


def test_handles_refuse_pickling(client: Client) -> None:

    with pytest.raises(fencing.ProcessBoundError):
        pickle.dumps(client.election("sched", "a"))


def test_leadership_token_fences_writes_elsewhere(client: Client) -> None:
    """The README's pattern: a store that keeps the highest token refuses a stale leader."""
    store = {"token": 0, "value": ""}

    def write(token: int, value: str) -> bool:
        if token < store["token"]:
            return False
        store.update(token=token, value=value)
        return True

    a = client.election("sched", "a", ttl=30.0)
    with a.campaign() as old:
        pass
    b = client.election("sched", "b", ttl=30.0)
    with b.campaign() as new:
        assert write(new.token, "b")
        assert not write(old.token, "a")  # the old leader's late write
    assert store == {"token": new.token, "value": "b"}
    a.close()
    b.close()


def test_close_ends_a_campaign_that_is_still_waiting(client: Client) -> None:
    """``Election.close()``: "Resign any term this election holds"; a closed handle refuses every
    later call.

    A campaign of this handle that is waiting in another thread ends promptly (raises) when the
    handle is closed, like observe() does, and is never elected later."""
    a = client.election("sched", "a", ttl=30.0)
    b = client.election("sched", "b", ttl=30.0)

    def run_b() -> int:
        with b.campaign(timeout=4.0) as term:
            return term.token

    with a.campaign():
        t, outcome, done = in_thread(run_b)
        wait_until(lambda: a.candidates() == 1, timeout=3)
        b.close()
        ended_on_close = done.wait(1.0)
    t.join(5)
    a.close()
    assert ended_on_close, f"close() did not end the waiting campaign; then: {outcome}"
    assert not isinstance(outcome[0], int), "elected after its election handle was closed"


def test_campaign_timeout_false_is_refused_like_any_non_number(client: Client) -> None:
    """``campaign(timeout=False)`` raises InvalidArgumentType, as bools are refused everywhere
    else (observe(timeout=False), claim(timeout=False))."""
    election = client.election("sched", "a", ttl=5.0)
    try:
        with (
            pytest.raises(fencing.InvalidArgumentType),
            election.campaign(timeout=False),  # type: ignore[arg-type]
        ):
            pass
    finally:
        election.close()


def test_concurrent_checks_during_a_takeover_give_one_on_revoked(client: Client) -> None:
    """Eight threads call check() in a loop while the row is taken over; every one ends with
    Fenced, on_revoked runs exactly once."""
    revoked: list[int] = []
    election = client.election("sched", "a", ttl=5.0, on_revoked=lambda t: revoked.append(1))
    results: list[BaseException] = []
    lock = threading.Lock()
    with election.campaign() as term:
        start = threading.Barrier(9)

        def checker() -> None:
            start.wait()
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                try:
                    term.check()
                except BaseException as exc:
                    with lock:
                        results.append(exc)
                    return

        threads = [threading.Thread(target=checker) for _ in range(8)]
        for t in threads:
            t.start()
        start.wait()
        taker = fencing.Ownership(client, ELECTION_GROUP, "op", 5.0, _allow_reserved=True)
        taker.claim("sched", generation=0)
        for t in threads:
            t.join(5)
        taker.close()
    election.close()
    assert len(results) == 8 and all(isinstance(e, fencing.Fenced) for e in results), results
    assert revoked == [1]


@pytest.mark.one_server
async def test_client_close_stops_a_held_terms_renewals(api: Api) -> None:
    """Client.close() ends the renewals of a term its election holds: the leadership never
    outlives the client, and another candidate can be elected."""
    client = api.client()
    election = client.election("e", "a", ttl=1.0)
    campaign = election.campaign(timeout=5)
    term = await campaign.__aenter__()
    try:
        await client.close()
        await asyncio.sleep(2.0)  # two ttls
        other = api.client().election("e", "b", ttl=1.0)
        leader = await other.leader()
        assert leader is None, f"the closed client's term is still renewed: {leader}"
        assert term.lost.is_set(), "the term of a closed client still reads as held"
    finally:
        with contextlib.suppress(Exception):
            await campaign.__aexit__(None, None, None)

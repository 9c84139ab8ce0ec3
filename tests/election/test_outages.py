"""Elections when replies are lost or Redis does not answer for a while: a campaign whose
claim landed but failed leaves no phantom leader, callbacks stay in order, a leader steps
down by its renew deadline before the next is elected, a release or renewal whose reply is
lost hands over promptly and never outlives the handover, ``check()`` never succeeds once
``lost`` is set, and observe() and a waiting campaign ride an outage out (or end on close).
"""

from __future__ import annotations

import threading
import time

import pytest

import fencing
from fencing import Client
from fencing.faults import Proxy

from ..support.polling import wait_until
from ..support.threads import in_thread
from ..support.wire import CLAIM, RELEASE, RENEW


def test_a_campaign_that_fails_after_its_claim_landed_leaves_no_phantom_leader(
    proxied: tuple[Proxy, Client], client: Client
) -> None:
    """When campaign() raises (OutcomeUnknown: every claim reply was lost), the library gives the
    row back (its session is known: release it or at least let the next candidate in);
    ``leader()`` must not name a leader that no process is."""
    proxy, pclient = proxied
    a = pclient.election("sched", "a", ttl=30.0)
    with (
        proxy.drop_replies(CLAIM, count=None),
        pytest.raises(fencing.OutcomeUnknown),
        a.campaign(timeout=2),
    ):
        pytest.fail("elected although every claim reply was lost")
    a.close()
    b = client.election("sched", "b", ttl=30.0)
    info = b.leader()
    try:
        assert info is None, f"phantom leader {info}: no process leads, yet nobody can be elected"
        with b.campaign(timeout=1.0):
            pass
    finally:
        b.close()


def test_a_slow_claim_never_calls_on_elected_after_on_revoked(
    proxied: tuple[Proxy, Client],
) -> None:
    """The renew deadline of a term is timed from before its first claim attempt; the library's own
    retries of a claim whose replies were lost can take longer than ``renew_deadline`` (its
    budget allows up to 5/6 of the TTL).

    Such a term is either not handed to the user, or handed over with the callbacks in order
    (on_elected, then on_revoked) - never on_revoked first."""
    proxy, pclient = proxied
    events: list[tuple[str, bool]] = []
    election = pclient.election(
        "sched",
        "a",
        ttl=2.0,
        renew_deadline=0.3,
        retry_period=0.1,
        on_elected=lambda t: events.append(("elected", t.lost.is_set())),
        on_revoked=lambda t: events.append(("revoked", t.lost.is_set())),
    )
    with election.campaign():  # the claim script is loaded: no NOSCRIPT reply is lost
        pass
    events.clear()
    with proxy.drop_replies(CLAIM, count=2, close=False), election.campaign(timeout=5):
        pass
    election.close()
    assert events[:1] == [("elected", False)], events


def test_lost_renew_replies_step_the_leader_down_before_the_next_is_elected(
    proxied: tuple[Proxy, Client], client: Client
) -> None:
    """Every renew is applied but its reply lost; the leader steps down by its renew deadline
    (on_revoked) before the waiting candidate is elected (on_elected)."""
    proxy, pclient = proxied
    moments: dict[str, float] = {}
    a = pclient.election(
        "sched", "a", ttl=1.0, on_revoked=lambda t: moments.setdefault("a_lost", time.monotonic())
    )
    b = client.election(
        "sched", "b", ttl=1.0, on_elected=lambda t: moments.setdefault("b_won", time.monotonic())
    )
    with a.campaign() as term_a, proxy.drop_replies(RENEW, count=None, close=False):
        done = threading.Event()

        def run_b() -> None:
            with b.campaign(timeout=4.0):
                done.set()

        t = threading.Thread(target=run_b)
        t.start()
        assert term_a.lost.wait(3)
        assert done.wait(4)
        t.join(5)
    assert isinstance(term_a.reason, fencing.LeaseExpired)
    assert moments["a_lost"] < moments["b_won"]
    a.close()
    b.close()


def test_a_lost_release_reply_still_hands_over_promptly(
    proxied: tuple[Proxy, Client], client: Client
) -> None:
    """The release is applied, its reply lost; the retry answers "not held" without harm, and the
    waiter is woken by the release notification, not by the 30 s lease."""
    proxy, pclient = proxied
    a = pclient.election("sched", "a", ttl=30.0)
    b = client.election("sched", "b", ttl=30.0)
    won = threading.Event()

    def run_b() -> None:
        with b.campaign(timeout=4.0):
            won.set()

    with a.campaign():
        t = threading.Thread(target=run_b)
        t.start()
        wait_until(lambda: a.candidates() == 1, timeout=3)
        rule = proxy.drop_replies(RELEASE, count=1)
        left = time.monotonic()
    assert won.wait(4)
    assert time.monotonic() - left < 1.0
    assert rule.hits == 1
    t.join(5)
    a.close()
    b.close()


def test_check_never_succeeds_once_lost_is_set(
    proxied: tuple[Proxy, Client],
) -> None:
    """A leader cut off until its renew deadline steps down; once Redis is back and the row would
    still pass a server check, ``check()`` still raises (the term is over here for good) and no
    renewal revives it."""
    proxy, pclient = proxied
    election = pclient.election("sched", "a", ttl=2.0, renew_deadline=0.5)
    with election.campaign() as term:
        with proxy.drop_requests(RENEW, count=None, close=False):
            assert term.lost.wait(3)
        with pytest.raises(fencing.LeaseExpired):
            term.check()
        assert term.lost.is_set()
    election.close()


def test_a_renewal_in_flight_during_resign_never_outlives_the_handover(
    proxied: tuple[Proxy, Client], client: Client
) -> None:
    """A renewal is applied but its reply is stuck (mute connection) while the leader resigns;
    the release hands over, and the renewal's retry is refused (it cannot extend or take back the
    next leader's term)."""
    proxy, pclient = proxied
    a = pclient.election("sched", "a", ttl=2.0, renew_deadline=1.2, retry_period=0.1)
    b = client.election("sched", "b", ttl=5.0)
    with a.campaign() as term_a:
        rule = proxy.drop_replies(RENEW, count=1, close=False)
        rule.wait(3)  # a renewal is on the wire, applied, its reply withheld
    assert term_a.lost.is_set()
    with b.campaign(timeout=1.0) as term_b:
        time.sleep(0.5)  # the stuck renewal times out and is retried meanwhile
        assert term_b.check().token == term_a.token + 1
        assert not term_b.lost.is_set()
    a.close()
    b.close()


def test_observe_ends_promptly_on_close_during_an_outage(
    proxied: tuple[Proxy, Client],
) -> None:
    """observe(): "Ends cleanly when close() is called ... A Redis outage is logged and waited
    out." Close() ends the iterator promptly even while Redis does not answer."""
    proxy, pclient = proxied
    election = pclient.election("sched", "w", ttl=3.0)
    first = threading.Event()
    done = threading.Event()

    def watch() -> None:
        for _ in election.observe():
            first.set()
        done.set()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    assert first.wait(3)
    rule = proxy.drop_requests(b"EVALSHA", count=None, close=False)
    rule.wait(3)  # it is asking the server now
    closed_at = time.monotonic()
    election.close()
    ended = done.wait(1.5)  # one read's budget (1 s at most) plus slack
    took = time.monotonic() - closed_at
    proxy.clear()
    proxy.sever()
    t.join(5)
    assert ended, f"observe() went on for {took:.2f}s after close()"


def test_a_waiting_campaign_waits_out_a_short_outage_within_its_timeout(
    proxied: tuple[Proxy, Client], client: Client
) -> None:
    """campaign(timeout=...): "Block until elected (up to timeout seconds)"; observe() waits
    outages out. A campaign that is waiting while the leader holds the row rides out a brief
    outage (its claims fail to reach Redis) and is elected once the leader resigns, within
    its timeout."""
    proxy, pclient = proxied
    a = client.election("sched", "a", ttl=30.0)
    b = pclient.election("sched", "b", ttl=1.5)

    def run_b() -> int:
        with b.campaign(timeout=4.0) as term:
            return term.token

    with a.campaign():
        t, outcome, done = in_thread(run_b)
        wait_until(lambda: a.candidates() == 1, timeout=3)
        with proxy.drop_requests(CLAIM, count=None) as rule:
            rule.wait(3)  # b's next claim attempt meets the outage...
            done.wait(1.0)  # ...which lasts one more second
    t.join(5)
    a.close()
    b.close()
    assert outcome and isinstance(outcome[0], int), f"campaign ended with {outcome}"

"""Claims, handovers, lost leases and election terms, as their instruments count them."""

from __future__ import annotations

import threading
import uuid

import pytest

import fencing
from fencing import Client
from fencing.faults import Proxy

from ..support.polling import wait_until
from ..support.telemetry import Recorded
from ..support.wire import RENEW

CLAIMS = "fencing.claims"
LOST = "fencing.lease.lost"
TERMS = "fencing.election.terms"


def test_a_takeover_counts_the_old_lease_lost_and_both_grants(
    client: Client, recorded: Recorded
) -> None:
    a = client.ownership("journal", "host-a", ttl=30.0)
    b = client.ownership("journal", "host-b", ttl=30.0)
    a.claim(["orders/0"])
    with pytest.raises(fencing.OwnershipConflict):
        b.claim(["orders/0"])
    b.claim(["orders/0"], generation=0)  # severs a
    with pytest.raises(fencing.Fenced):
        a.check("orders/0")
    with pytest.raises(fencing.Fenced):
        a.check("orders/0")  # (known lost: counted once)
    a.close()
    b.close()
    points = recorded.collect()
    assert points.by(CLAIMS, "fencing.outcome") == {"granted": 2, "conflict": 1}
    assert points.by(LOST, "fencing.kind") == {"owner": 1}
    claims = recorded.spans("fencing.claim")
    assert [(s.attributes or {}).get("fencing.outcome") for s in claims] == [
        "granted",
        "refused",
        "granted",
    ]


def test_a_waiting_claim_records_its_handover_once_granted(
    client: Client, recorded: Recorded
) -> None:
    holder = client.ownership("journal", "host-a", ttl=30.0)
    waiter = client.ownership("journal", "host-b", ttl=30.0)
    holder.claim("orders/1")
    got: list[fencing.Grant] = []
    thread = threading.Thread(
        target=lambda: got.append(waiter.claim("orders/1", wait=True, timeout=10)["orders/1"])
    )
    thread.start()
    # The waiter's first refusal is counted before it sleeps.
    wait_until(lambda: recorded.collect().sum(CLAIMS, {"fencing.outcome": "conflict"}) == 1,
               what="the waiter refused once")  # fmt: skip
    holder.release()
    thread.join(10)
    assert got and got[0].token == 2
    holder.close()
    waiter.close()
    points = recorded.collect()
    assert points.by(CLAIMS, "fencing.outcome") == {"granted": 1}
    handovers = points.matching("fencing.lease.handover.duration", {"fencing.kind": "owner"})
    assert [h.value for h in handovers] == [1]
    assert points.by(LOST, "fencing.kind") == {}


def test_a_leader_past_its_renew_deadline_counts_a_term_lost(
    proxied: tuple[Proxy, Client], recorded: Recorded
) -> None:
    proxy, pclient = proxied
    name = f"sched-{uuid.uuid4().hex[:8]}"
    election = pclient.election(name, "a", ttl=2.0, renew_deadline=0.5)
    with election.campaign() as term:
        with proxy.drop_requests(RENEW, count=None, close=False):
            assert term.lost.wait(3)
        assert isinstance(term.reason, fencing.LeaseExpired)
    with election.campaign():
        pass  # a term resigned
    election.close()
    points = recorded.collect()
    on = {"fencing.election": name}
    assert points.by(TERMS, "fencing.outcome") == {"won": 2, "lost": 1, "resigned": 1}
    assert points.sum(TERMS, {**on, "fencing.outcome": "lost"}) == 1
    assert points.by(LOST, "fencing.kind") == {"election": 1}
    campaigns = recorded.spans("fencing.campaign")
    assert [dict(s.attributes or {}) for s in campaigns] == [
        {"fencing.election": name, "fencing.script": "claim", "fencing.outcome": "won"}
    ] * 2


def test_a_leaders_renewals_record_their_slack_before_the_deadline(
    client: Client, recorded: Recorded
) -> None:
    name = f"sched-{uuid.uuid4().hex[:8]}"
    election = client.election(name, "a", ttl=1.5, renew_deadline=1.0, retry_period=0.05)
    with election.campaign():
        slack = wait_until(
            lambda: recorded.collect().matching(
                "fencing.election.renew.slack", {"fencing.election": name}
            ),
            what="a renewal's slack",
        )
    election.close()
    point = slack[0]
    # Each renewal came back with most of the renew deadline left (the last one moved it).
    assert point.value >= 1
    assert 0 < point.total / point.value <= 1.0

"""The server's clock jumping forward ends every lease on it at once by server time. A leader
learns of it at its next renewal at the latest: the renewal finds the lease ended, so the
term ends there (``lost``, ``on_revoked`` once, one warning naming the server's clock, the
``fencing.lease.lapsed`` counter) even though nobody else was elected meanwhile. An
ownership handle's renewal renews such a lease, reports the lapse on the grant
(``lapsed_ms``) and warns once. A clock that jumps back only makes leases last longer.
"""

from __future__ import annotations

import logging
import time

import pytest

import fencing
from fencing import LeaseExpired

from ..support.faulty_servers import clocked_server
from ..support.polling import wait_until
from ..support.telemetry import Recorded, install

TTL = 1.5
LAPSED = "fencing.lease.lapsed"


@pytest.fixture
def recorded() -> Recorded:
    found = install()
    found.reset()
    return found


@pytest.mark.timeout(60)
def test_a_forward_jump_ends_the_term_at_the_next_renewal(
    recorded: Recorded, caplog: pytest.LogCaptureFixture
) -> None:
    revoked: list[float] = []
    with clocked_server() as clock:
        client = fencing.Client.from_url(clock.url, namespace="jump")
        election = client.election(
            "leader", candidate_id="a", ttl=TTL, on_revoked=lambda lead: revoked.append(1)
        )
        try:
            with election.campaign() as lead:
                caplog.clear()
                with caplog.at_level(logging.WARNING, logger="fencing"):
                    jumped = time.monotonic()
                    clock.jump(3 * TTL)
                    assert lead.lost.wait(election.retry_period + 1.0)
                    learnt = time.monotonic() - jumped
                    wait_until(lambda: revoked, timeout=5, what="on_revoked")
            assert learnt <= election.retry_period + 0.25, learnt
            assert isinstance(lead.reason, LeaseExpired)
            assert "server's clock jumped forward" in str(lead.reason)
            assert revoked == [1]
            clocky = [r for r in caplog.records if "server's clock" in r.getMessage()]
            assert len(clocky) == 1, [r.getMessage() for r in caplog.records]
            points = recorded.collect()
            assert points.by(LAPSED, "fencing.cause") == {"server-clock": 1}
            # The lease was released with the term: a new campaign wins at once.
            with election.campaign(timeout=TTL) as again:
                assert again.token == lead.token + 1
        finally:
            client.close()


@pytest.mark.timeout(60)
def test_an_owner_renewal_reports_the_lapse_and_warns_once(
    recorded: Recorded, caplog: pytest.LogCaptureFixture
) -> None:
    with clocked_server() as clock:
        client = fencing.Client.from_url(clock.url, namespace="jump")
        owner = client.ownership("jobs", "a", ttl=30.0)
        try:
            granted = owner.claim("j1")["j1"]
            with caplog.at_level(logging.WARNING, logger="fencing"):
                clock.jump(31.0)
                first = owner.renew("j1")["j1"]
                clock.jump(31.0)
                second = owner.renew("j1")["j1"]
                third = owner.renew("j1")["j1"]
            assert (first.token, second.token) == (granted.token, granted.token)
            assert first.lapsed_ms >= 1000 and second.lapsed_ms >= 1000, (first, second)
            assert third.lapsed_ms == 0
            clocky = [r for r in caplog.records if "server's clock" in r.getMessage()]
            assert len(clocky) == 1, [r.getMessage() for r in caplog.records]
            assert recorded.collect().by(LAPSED, "fencing.cause") == {"server-clock": 2}
        finally:
            owner.close()
            client.close()


@pytest.mark.timeout(60)
def test_a_backward_jump_only_lengthens_leases() -> None:
    with clocked_server() as clock:
        client = fencing.Client.from_url(clock.url, namespace="jump")
        held = client.ownership("jobs", "a", ttl=TTL)
        other = client.ownership("jobs", "b", ttl=TTL)
        try:
            granted = held.claim("j1")["j1"]
            clock.jump(-60.0)
            # Renewals go on as usual (no lapse), and the other session is refused.
            for _ in range(3):
                assert held.renew("j1")["j1"].lapsed_ms == 0
                with pytest.raises(fencing.OwnershipConflict):
                    other.claim("j1")
            assert held.check("j1").token == granted.token
        finally:
            held.close()
            other.close()
            client.close()

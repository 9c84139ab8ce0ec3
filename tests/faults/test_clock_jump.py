"""The server's clock jumping forward (an NTP step, a VM migrated): every lease ends at once
by server time while the holders still believe in their terms.

Workloads: exclusive producers in every exclusive mode, and an election with callbacks
whose terms write through ``leadership.producer``. Checked: ``fencing.verify.verify_log``
(G1, G2, G5, G6) over each log with every attempt (writes never overlap: the epoch check),
and the callbacks of two terms overlap by at most one renewal interval (``retry_period``)
plus :data:`SLACK` for the renewal's own round trip and the callback's scheduling: the
holder learns of the loss at its next renewal at the latest.

CI runs one short round per jump (1x and 3x the lease); ``FENCING_SOAK=1`` runs
:data:`SOAK_ROUNDS` of each.
"""

from __future__ import annotations

import logging
import os
import random
import time

import pytest

import fencing
from fencing.verify import verify_log

from ..conftest import SOAK
from ..support.fault_jobs import Jobs
from ..support.fault_workloads import Candidates, Producers, max_overlap
from ..support.faulty_servers import ClockedServer, clocked_server
from ..support.polling import wait_until
from ..support.telemetry import Recorded, install

SOAK_ROUNDS = int(os.environ.get("FENCING_SOAK_ROUNDS", "20"))
LEASE = 1.0
TTL = 1.5
#: What the bound allows beyond one renewal interval: a renewal's round trip and the time
#: on_revoked takes to be scheduled on a loaded machine.
SLACK = 0.25


def jump_round(clock: ClockedServer, leases: float, seed: int) -> dict[str, object]:
    """One round: producers and candidates, the server's clock moved ``leases`` x TTL on."""
    rng = random.Random(seed)
    ns = f"jump-{seed}"
    client = fencing.Client.from_url(clock.url, namespace=ns)
    try:
        producers = Producers(clock.url, ns, "excl", workers=3, lease_ttl=LEASE)
        voters = Candidates(clock.url, ns, "leader", "decisions", candidates=3, ttl=TTL)
        try:
            wait_until(
                lambda: bool(producers.attempts) and any(t.revoked is None for t in voters.terms()),
                timeout=20,
                what="sends and a leader",
            )
            time.sleep(rng.uniform(0.1, TTL / 2))  # the jump lands anywhere in a renewal
            before = [t.token for t in voters.terms()]
            clock.jump(leases * TTL)
            wait_until(
                lambda: [t for t in voters.terms() if t.token not in before and t.revoked is None],
                timeout=20,
                what="a term after the jump",
            )
            acked = len(producers.attempts)
            wait_until(lambda: len(producers.attempts) > acked + 50, timeout=20, what="sends")
        finally:
            stuck = [*producers.stop(), *voters.stop()]
        assert not stuck, stuck
        unexpected = [*producers.unexpected, *voters.unexpected]
        assert not unexpected, unexpected
        excl = verify_log(client, "excl", attempts=producers.attempts, exclusive=True)
        decisions = verify_log(client, "decisions", attempts=voters.attempts, exclusive=True)
        assert excl.ok, excl.summary()
        assert decisions.ok, decisions.summary()
        terms = voters.terms()
        overlap = max_overlap(terms, time.monotonic())
        assert overlap <= voters.retry_period + SLACK, (overlap, voters.retry_period, terms)
        reasons = sorted({t.reason for t in terms if t.token in before and t.revoked})
        return {"acked": excl.records, "terms": len(terms), "overlap": round(overlap, 3),
                "bound": voters.retry_period, "reasons": reasons}  # fmt: skip
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.timeout(100)
@pytest.mark.parametrize("leases", [1.0, 3.0])
def test_a_forward_jump_never_overlaps_writes_and_callbacks_by_more_than_a_renewal(
    leases: float,
) -> None:
    with clocked_server() as clock:
        stats = jump_round(clock, leases, random.randrange(2**31))
    print(stats)


@pytest.mark.soak
@pytest.mark.timeout(SOAK_ROUNDS * 2 * 60)
@pytest.mark.parametrize("leases", [1.0, 3.0])
def test_forward_jumps_soak(leases: float) -> None:
    assert SOAK
    with clocked_server() as clock:
        for n in range(SOAK_ROUNDS):
            started = time.monotonic()
            stats = jump_round(clock, leases, 2000 + n)
            print(f"jump {leases}x round {n}: {stats} in {time.monotonic() - started:.1f}s")


@pytest.mark.timeout(60)
def test_a_producer_renewal_after_a_forward_jump_warns_once_and_counts_the_lapse(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The jump ends the producer's lease by server time; its next renewal (nobody took the
    partition meanwhile) renews it, names the server's clock once and counts the lapse. The
    producer goes on at its epoch: the epoch check, not the lease, keeps writes safe."""
    recorded: Recorded = install()
    with clocked_server() as clock:
        client = fencing.Client.from_url(clock.url, namespace="jump-producer")
        try:
            p = client.topic("t", partitions=1).producer(
                fencing.AccessMode.EXCLUSIVE, lease_ttl=LEASE
            )
            assert p.send(b"before").offset == 0
            recorded.reset()
            with caplog.at_level(logging.WARNING, logger="fencing"):
                clock.jump(3 * LEASE)
                wait_until(
                    lambda: any("server's clock" in r.getMessage() for r in caplog.records),
                    timeout=5,
                    what="the renewal's warning",
                )
                first = recorded.collect().by("fencing.lease.lapsed", "fencing.cause")
                clock.jump(3 * LEASE)
                again: dict[object, float] = {}

                def lapsed_again() -> bool:
                    again.update(recorded.collect().by("fencing.lease.lapsed", "fencing.cause"))
                    return bool(again)

                wait_until(lapsed_again, timeout=5, what="the second lapse counted")
            assert first == again == {"server-clock": 1}, (first, again)
            clocky = [r for r in caplog.records if "server's clock" in r.getMessage()]
            assert len(clocky) == 1, [r.getMessage() for r in caplog.records]
            assert "partition 0" in clocky[0].getMessage()
            md = p.send(b"after")
            assert (md.offset, md.epoch) == (1, 1)
            p.close()
        finally:
            client.close()


def jobs_round(clock: ClockedServer, leases: float, seed: int) -> dict[str, object]:
    """One round of the jobs (a copy job resumed from saved state, resenders by message id,
    a consumer group with commits), the server's clock moved ``leases`` x TTL on."""
    rng = random.Random(seed)
    ns = f"jump-jobs-{seed}"
    client = fencing.Client.from_url(clock.url, namespace=ns)
    try:
        with Jobs([clock.url], ns) as jobs:

            def jump() -> None:
                time.sleep(rng.uniform(0.1, TTL / 2))  # the jump lands anywhere in a renewal
                clock.jump(leases * TTL)

            jobs.around(jump, after=20)
        return jobs.exact(client)
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_forward_jump_keeps_copy_jobs_message_ids_and_commits_exact() -> None:
    with clocked_server() as clock:
        print(jobs_round(clock, 3.0, random.randrange(2**31)))


@pytest.mark.soak
@pytest.mark.timeout(SOAK_ROUNDS * 2 * 60)
@pytest.mark.parametrize("leases", [1.0, 3.0])
def test_forward_jumps_under_jobs_soak(leases: float) -> None:
    assert SOAK
    with clocked_server() as clock:
        for n in range(SOAK_ROUNDS):
            started = time.monotonic()
            stats = jobs_round(clock, leases, 4000 + n)
            print(f"jobs jump {leases}x round {n}: {stats} in {time.monotonic() - started:.1f}s")

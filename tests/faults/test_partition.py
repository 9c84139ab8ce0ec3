"""A real network partition: the server in a network namespace, reached over two veth pairs;
a cut takes the current leader's pair down, so the clients on it are cut off both ways,
their connections open and silent, while the clients on the other pair go on.

Workloads on each side of the cut: exclusive producers in every exclusive mode, and an
election with callbacks whose terms write through ``leadership.producer``. Checked:
``fencing.verify.verify_log`` (G1, G2, G5, G6) over each log with every attempt, and the
election's contract: the callbacks of two terms never overlap (a cut-off leader's renew
deadline ends its term before its lease can lapse on the server).

CI runs one short round (one cut of 2 s); ``FENCING_SOAK=1`` runs
:data:`SOAK_ROUNDS` rounds with cuts of 1 to 30 s.
"""

from __future__ import annotations

import os
import random
import time

import pytest

import fencing
from fencing.verify import verify_log

from ..conftest import SOAK
from ..support.fault_jobs import Jobs
from ..support.fault_workloads import Candidates, Producers, max_overlap
from ..support.faulty_servers import Link, partitioned_server
from ..support.polling import wait_until

SOAK_ROUNDS = int(os.environ.get("FENCING_SOAK_ROUNDS", "20"))
LEASE = 1.0


def cut_round(link: Link, seconds: float, seed: int) -> dict[str, object]:
    """One round: producers and candidates on both paths, path a cut for ``seconds``."""
    rng = random.Random(seed)
    ns = f"part-{seed}"
    client = fencing.Client.from_url(link.url("b"), namespace=ns)
    try:
        sides = [
            Producers(link.url(path), ns, "excl", workers=2, lease_ttl=LEASE, label=f"p{path}")
            for path in "ab"
        ]
        voters = [
            Candidates(
                link.url(path), ns, "leader", "decisions", candidates=2, ttl=1.5, label=f"c{path}"
            )
            for path in "ab"
        ]
        try:
            wait_until(lambda: all(s.attempts for s in sides), timeout=20, what="sends began")
            time.sleep(rng.uniform(0.2, 1.0))  # the cut lands anywhere in a term
            # The side of the leader is cut off: its term must end before another's begins.
            leader = wait_until(
                lambda: [t for v in voters for t in v.terms() if t.revoked is None],
                timeout=20,
                what="a leader",
            )[0]
            path = leader.candidate[1]
            link.cut(path)
            time.sleep(seconds)  # the length of the partition is the fault itself
            link.heal(path)
            acked = len([a for s in sides for a in s.attempts if a.outcome == "acked"])
            wait_until(
                lambda: (
                    len([a for s in sides for a in s.attempts if a.outcome == "acked"]) > acked + 20
                ),
                timeout=30,
                what="sends after the heal",
            )
        finally:
            stuck = [w for x in (*sides, *voters) for w in x.stop()]
        assert not stuck, stuck
        unexpected = [u for x in (*sides, *voters) for u in x.unexpected]
        assert not unexpected, unexpected
        excl = verify_log(
            client, "excl", attempts=[a for s in sides for a in s.attempts], exclusive=True
        )
        decisions = verify_log(
            client,
            "decisions",
            attempts=[a for v in voters for a in v.attempts],
            exclusive=True,
        )
        assert excl.ok, excl.summary()
        assert decisions.ok, decisions.summary()
        terms = [t for v in voters for t in v.terms()]
        overlap = max_overlap(terms, time.monotonic())
        assert overlap <= 0.0, (overlap, terms)
        cut_off = next(t for t in terms if t.token == leader.token)
        assert cut_off.revoked is not None, terms  # the cut-off leader learnt of its loss
        return {"acked": excl.records, "terms": len(terms), "overlap": overlap}
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.timeout(100)
def test_a_cut_off_holder_is_fenced_and_terms_never_overlap() -> None:
    with partitioned_server() as link:
        stats = cut_round(link, 2.0, random.randrange(2**31))
    print(stats)


@pytest.mark.soak
@pytest.mark.timeout(SOAK_ROUNDS * 90)
def test_partitions_of_1_to_30_seconds() -> None:
    assert SOAK
    lengths = [1.0, 3.0, 10.0, 30.0]
    with partitioned_server() as link:
        for n in range(SOAK_ROUNDS):
            seconds = lengths[n % len(lengths)]
            started = time.monotonic()
            stats = cut_round(link, seconds, 1000 + n)
            print(f"partition {seconds}s round {n}: {stats} in {time.monotonic() - started:.1f}s")


def jobs_round(link: Link, seconds: float, seed: int) -> dict[str, object]:
    """One round of the jobs (a copy job resumed from saved state, resenders by message id,
    a consumer group with commits), their workers on both paths, path a cut for
    ``seconds``."""
    rng = random.Random(seed)
    ns = f"part-jobs-{seed}"
    client = fencing.Client.from_url(link.url("b"), namespace=ns)
    try:
        with Jobs([link.url("a"), link.url("b")], ns) as jobs:

            def partition() -> None:
                time.sleep(rng.uniform(0.0, 0.5))  # the cut lands anywhere in the work
                link.cut("a")
                time.sleep(seconds)  # the length of the partition is the fault itself
                link.heal("a")

            jobs.around(partition)
        return jobs.exact(client)
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_cut_keeps_copy_jobs_message_ids_and_commits_exact() -> None:
    with partitioned_server() as link:
        print(jobs_round(link, 2.0, random.randrange(2**31)))


@pytest.mark.soak
@pytest.mark.timeout(SOAK_ROUNDS * 90)
def test_partitions_under_jobs_soak() -> None:
    assert SOAK
    lengths = [1.0, 3.0, 10.0, 30.0]
    with partitioned_server() as link:
        for n in range(SOAK_ROUNDS):
            seconds = lengths[n % len(lengths)]
            started = time.monotonic()
            stats = jobs_round(link, seconds, 5000 + n)
            print(
                f"jobs partition {seconds}s round {n}: {stats} in {time.monotonic() - started:.1f}s"
            )

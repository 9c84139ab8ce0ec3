"""Racing claims on one resource: never two holders at once (G8).

Real processes (spawn) each claim the same resource with their own handle, many times, and
write a shared record on the test server while they hold it; the record must show strictly
nested, non-overlapping holds with tokens growing by exactly one. Threads racing a claim
without waiting see exactly one winner per round, whatever label they share. A claim with a
generation that another session outbids while it runs keeps what it took and says so.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

import fencing
from fencing import Client, Fenced, Grant, OwnershipConflict, StaleGeneration
from fencing._keys import slot_of
from fencing._text import text

from ..conftest import ServerInfo

GROUP = "race"
RESOURCE = "shared/0"
PROCESSES = 6
HOLDS_PER_PROCESS = 25
# Leases never lapse during a hold (a hold is a few round trips), so the check is exact.
TTL = 5.0
# Everything must be over by then; a healthy run takes a few seconds.
RACE_SECONDS = 40.0


@dataclass
class ChildReport:
    """What one racing process tells the test when it is done."""

    index: int
    pid: int
    holds: int = 0
    conflicts: int = 0
    violations: list[str] = field(default_factory=list)


def _hold_repeatedly(
    url: str,
    namespace: str,
    log_key: str,
    index: int,
    holds: int,
    occupancy: Any,
    occupancy_lock: Any,
    start: Any,
    reports: Any,
) -> None:
    """One racing process: claim, record "enter", check, record "exit", release; repeat."""
    report = ChildReport(index=index, pid=os.getpid())
    try:
        client = fencing.Client.from_url(url, namespace=namespace)
        raw = redis.Redis.from_url(url, socket_timeout=10)
        owner = client.ownership(GROUP, owner_id=f"proc-{index}", ttl=TTL)
        # Every process is ready (spawned, imported, connected) before any claims: the race
        # is real, not one process done before the next has started.
        start.wait(timeout=RACE_SECONDS)
        deadline = time.monotonic() + RACE_SECONDS
        while report.holds < holds:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"deadline reached after {report.holds} holds")
            # A non-waiting attempt first makes the contention visible to the test.
            try:
                grant = owner.claim([RESOURCE])[RESOURCE]
            except OwnershipConflict:
                report.conflicts += 1
                grant = owner.claim([RESOURCE], wait=True, timeout=left)[RESOURCE]
            if not grant.new:
                report.violations.append(f"claim kept an old grant: {grant}")
            with occupancy_lock:
                if occupancy.value != 0:
                    report.violations.append(
                        f"granted token {grant.token} while occupancy was {occupancy.value}"
                    )
                occupancy.value += 1
            raw.rpush(log_key, f"enter {grant.token} {report.pid}")
            checked = owner.check(RESOURCE)
            if (checked.token, checked.generation) != (grant.token, grant.generation):
                report.violations.append(f"check() saw {checked}, granted {grant}")
            raw.rpush(log_key, f"exit {grant.token} {report.pid}")
            with occupancy_lock:
                occupancy.value -= 1
            released = owner.release([RESOURCE])
            if released != {RESOURCE: True}:
                report.violations.append(f"release of token {grant.token} said {released}")
            report.holds += 1
        owner.close()
        client.close()
        raw.close()
    except BaseException:
        report.violations.append(traceback.format_exc())
    reports.put(report)


@pytest.mark.slow
@pytest.mark.one_server
def test_processes_never_hold_at_once(server: ServerInfo, namespace: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    occupancy = ctx.Value("i", 0, lock=False)
    occupancy_lock = ctx.Lock()
    start = ctx.Barrier(PROCESSES)
    reports = ctx.Queue()
    log_key = f"{namespace}:test:race-log"
    procs = [
        ctx.Process(
            target=_hold_repeatedly,
            args=(
                server.url,
                namespace,
                log_key,
                i,
                HOLDS_PER_PROCESS,
                occupancy,
                occupancy_lock,
                start,
                reports,
            ),
        )
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    try:
        got: list[ChildReport] = []
        deadline = time.monotonic() + RACE_SECONDS + 20
        while len(got) < PROCESSES:
            try:
                got.append(reports.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                pytest.fail(f"only {len(got)} of {PROCESSES} processes reported in time")
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()

    violations = [v for r in got for v in r.violations]
    assert violations == []
    assert sorted(r.index for r in got) == list(range(PROCESSES))
    assert [r.holds for r in got] == [HOLDS_PER_PROCESS] * PROCESSES
    assert occupancy.value == 0
    # The race really happened: some claims were refused while another process held it.
    assert sum(r.conflicts for r in got) > 0

    holds = PROCESSES * HOLDS_PER_PROCESS
    raw = redis.Redis.from_url(server.url, socket_timeout=10)
    try:
        entries = [text(e) for e in raw.lrange(log_key, 0, -1)]
        row = {text(k): text(v) for k, v in raw.hgetall(_row_key(namespace)).items()}
    finally:
        raw.close()
    assert len(entries) == 2 * holds
    pids = {r.pid for r in got}
    per_pid: dict[int, int] = dict.fromkeys(pids, 0)
    tokens: list[int] = []
    for i in range(0, len(entries), 2):
        enter, exit_ = entries[i].split(" "), entries[i + 1].split(" ")
        assert enter[0] == "enter", (i, entries[i])
        assert exit_ == ["exit", *enter[1:]], (i, entries[i], entries[i + 1])
        token, pid = int(enter[1]), int(enter[2])
        assert pid in pids
        per_pid[pid] += 1
        tokens.append(token)
    # Every grant went to a session that did not hold it: the token grew by one each time.
    assert tokens == list(range(1, holds + 1))
    assert per_pid == dict.fromkeys(pids, HOLDS_PER_PROCESS)
    # The row ends released, at the last token and generation.
    assert (row["session"], row["token"], row["gen"]) == ("", str(holds), str(holds))


def _row_key(namespace: str) -> str:
    return fencing._keys.Keys(namespace).ownership(GROUP, RESOURCE)


# -- threads racing claim() without waiting ---------------------------------------------------

THREADS = 5
ROUNDS = 40


@dataclass
class Outcome:
    """What one thread got in one round: a grant or a conflict."""

    thread: int
    grant: Grant | None = None
    conflict: OwnershipConflict | None = None


def test_threads_racing_claim_one_winner_per_round(client: Client) -> None:
    # One label for all: identity is the session, so the label gives nobody an advantage.
    owners = [client.ownership(GROUP, owner_id="same-label", ttl=TTL) for _ in range(THREADS)]
    start = threading.Barrier(THREADS, timeout=30)
    settled = threading.Barrier(THREADS, timeout=30)
    rounds: list[list[Outcome]] = [[] for _ in range(ROUNDS)]
    rounds_lock = threading.Lock()
    failures: list[str] = []

    def racer(index: int) -> None:
        owner = owners[index]
        try:
            for n in range(ROUNDS):
                start.wait()
                try:
                    outcome = Outcome(index, grant=owner.claim(RESOURCE)[RESOURCE])
                except OwnershipConflict as exc:
                    outcome = Outcome(index, conflict=exc)
                with rounds_lock:
                    rounds[n].append(outcome)
                settled.wait()
                # Released before this thread reaches the next round's start barrier.
                if outcome.grant is not None:
                    assert owner.release(RESOURCE) == {RESOURCE: True}
        except threading.BrokenBarrierError:
            pass
        except BaseException:
            failures.append(traceback.format_exc())
            start.abort()
            settled.abort()

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert failures == []

    for n, outcomes in enumerate(rounds):
        assert sorted(o.thread for o in outcomes) == list(range(THREADS))
        won = [o for o in outcomes if o.grant is not None]
        lost = [o.conflict for o in outcomes if o.conflict is not None]
        assert len(won) == 1, f"round {n}: {len(won)} winners"
        assert len(lost) == THREADS - 1
        grant = won[0].grant
        assert grant is not None
        assert (grant.group, grant.resource, grant.token, grant.generation, grant.new) == (
            GROUP,
            RESOURCE,
            n + 1,
            n + 1,
            True,
        )
        for conflict in lost:
            assert (
                conflict.group,
                conflict.resource,
                conflict.holder_label,
                conflict.holder_token,
            ) == (GROUP, RESOURCE, "same-label", n + 1)
            assert 0 < conflict.remaining <= TTL
            assert "wait=True" in str(conflict)
    for owner in owners:
        owner.close()


# -- a generation raised while a claim with a generation runs -------------------------------


def _row(raw: redis.Redis, client: Client, resource: str) -> dict[str, str]:
    data = raw.hgetall(client.keys.ownership(GROUP, resource))
    return {text(k): text(v) for k, v in data.items()}


@pytest.mark.parametrize(("other", "outbid"), [("ra", "rb"), ("rb", "ra")])
def test_a_claim_outbid_after_its_generation_check_keeps_what_it_took(
    client: Client, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch, other: str, outbid: str
) -> None:
    """X holds ``other`` at generation 3, Y holds ``outbid`` at 4. Z claims both at 5; right
    after its generation check passed, W claims ``outbid`` at 10. A resource Z took before
    meeting the refusal stays Z's (its holder was severed for good either way), and the
    StaleGeneration says which resource went which way."""
    assert slot_of(client.keys.ownership(GROUP, "ra")) < slot_of(client.keys.ownership(GROUP, "rb"))
    x = client.ownership(GROUP, "host-x", ttl=TTL)
    y = client.ownership(GROUP, "host-y", ttl=TTL)
    w = client.ownership(GROUP, "host-w", ttl=TTL)
    z = client.ownership(GROUP, "host-z", ttl=TTL)
    x.claim(other, generation=3)
    y.claim(outbid, generation=4)
    real_claim_one = z._claims.claim_one
    raised: list[Grant] = []

    def claim_one(target: Any, generation: int | None, **kwargs: Any) -> Grant:
        # The first resource's claim: every generation check of the call is behind it.
        if not raised:
            raised.append(w.claim(outbid, generation=10)[outbid])
        return real_claim_one(target, generation, **kwargs)

    monkeypatch.setattr(z._claims, "claim_one", claim_one)
    with pytest.raises(StaleGeneration) as info:
        z.claim(["rb", "ra"], generation=5)
    err = info.value
    assert [(g.generation, g.token) for g in raised] == [(10, 2)]
    assert (err.resource, err.current, err.requested) == (outbid, 10, 5)
    stored = _row(raw, client, outbid)
    assert (stored["session"], stored["label"], stored["gen"], stored["token"]) == (
        w.session,
        "host-w",
        "10",
        "2",
    )
    with pytest.raises(Fenced):
        y.check(outbid)
    stored = _row(raw, client, other)
    if other == "ra":
        # ra comes first in slot order: taken (severing X) before rb was refused; Z keeps it.
        assert (stored["session"], stored["label"], stored["gen"], stored["token"]) == (
            z.session,
            "host-z",
            "5",
            "2",
        )
        grant = err.granted["ra"]
        assert list(err.granted) == ["ra"]
        assert (grant.resource, grant.generation, grant.token, grant.new) == ("ra", 5, 2, True)
        assert z.grants == {"ra": grant}
        checked = z.check("ra")
        assert (checked.generation, checked.token) == (5, 2)
        with pytest.raises(Fenced):
            x.check("ra")
    else:
        # ra (outbid) comes first: refused before anything was taken; X still holds rb.
        assert err.granted == {}
        assert z.grants == {}
        assert (stored["session"], stored["label"], stored["gen"], stored["token"]) == (
            x.session,
            "host-x",
            "3",
            "1",
        )
        assert x.check("rb").token == 1
    assert err.refused == {outbid: err}
    for owner in (x, y, w, z):
        owner.close()

"""Leader election with real processes: SIGKILL, SIGSTOP past the TTL, a
black-holed connection, callbacks and ``exit_on_loss``, the whole history checked.

Every candidate is a ``spawn``ed process (:mod:`tests.election.election_worker`) with a
client of its own, reporting every callback, send and term end on a pipe; the test drives
it through another pipe and signals. One clock is used for "when did each process believe it led":
``time.monotonic()`` (CLOCK_MONOTONIC, one clock for every process on this host), and
``time.time()`` where a moment is compared with the server's clock (``TIME``, same host).

- :func:`test_decisions_log_proves_fencing_across_a_kill_and_a_pause`: four candidates act
  as leaders on an ``EXCLUSIVE_WITH_FENCING`` producer; the first leader is SIGKILLed, the
  second is SIGSTOPped between its check of ``lost`` and its send, past its TTL, and resumed
  once the third leads. The whole ``decisions`` log read back from Redis is checked.
- :func:`test_renew_deadline_under_a_partition_never_lets_two_believe_they_lead`: each
  candidate's connection runs through a proxy; round after round the leader's is
  black-holed. Its ``lost`` is set by the deadline timer before its lease lapses by server
  time and before the next election; the believed intervals never overlap.
- :func:`test_callbacks_in_real_processes`: no ``on_revoked`` without a term; exactly one
  for a leader SIGSTOPped past its TTL and resumed.
- :func:`test_exit_on_loss_ends_the_process_with_status_70`: black-holed, paused and
  superseded, taken over (status 70); resigning is no loss (status 0).
- :func:`test_a_leader_that_sees_lost_first_is_still_a_loss_not_a_resignation`: a leader
  whose loop sees ``lost`` before the timer thread ends the term still lost it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

import fencing
from fencing import Client
from fencing._keys import ELECTION_GROUP
from fencing._sync.leadership import EXIT_ON_LOSS_STATUS
from fencing.faults import Proxy

from ..conftest import ServerInfo
from ..support.fleet import Event, Fleet, Worker
from .election_worker import TOPIC, Config, candidate

pytestmark = [pytest.mark.slow, pytest.mark.one_server]

TTL = 1.0
#: Bounds on waits: a process starting (spawn + imports), one step of a scenario.
START_TIMEOUT = 20.0
STEP_TIMEOUT = 10.0
#: Sends a leader makes before the test moves on (so every term leaves records).
SENDS_PER_TERM = 5


# -- a fleet of candidate processes ------------------------------------------------------------


class Candidates(Fleet):
    """Candidate processes of one election (:mod:`tests.election.election_worker`), run by
    the suite's :class:`~tests.support.fleet.Fleet`, and everything they reported, in
    arrival order.

    Arrival order across processes is not the order things happened in: timing checks use
    the clocks in the events. Every process is SIGKILLed (stopped or not) on exit.
    """

    def __init__(self, url: str, namespace: str, election: str) -> None:
        super().__init__(step_timeout=STEP_TIMEOUT)
        self.url = url
        self.namespace = namespace
        self.election = election

    def campaign(self, cid: str, url: str | None = None, **options: Any) -> Worker:
        """Start candidate ``cid`` (on ``url``, else the fleet's) with these options."""
        cfg = Config(
            url=url or self.url,
            namespace=self.namespace,
            cid=cid,
            election=self.election,
            **{"ttl": TTL, **options},
        )
        return self.start(cid, candidate, cfg)

    def wait_ready(self) -> None:
        for cid in self.workers:
            self.wait_for(f"{cid} ready", lambda e, cid=cid: e["ev"] == "ready" and e["cid"] == cid)

    def of(self, cid: str, *kinds: str) -> list[Event]:
        return self.workers[cid].of(*kinds)

    def count(self, cid: str, kind: str) -> int:
        return len(self.of(cid, kind))


def read_log(client: fencing.Client) -> list[fencing.Record]:
    reader = client.topic(TOPIC).reader(0, "earliest")
    records: list[fencing.Record] = []
    while batch := reader.read(max_records=10_000):
        records.extend(batch)
    return records


class ExpiryWatch:
    """Polls an election's ownership row from the test process (not through any proxy) and
    keeps, per token, the latest lease expiry seen by server time (ms)."""

    def __init__(self, r: redis.Redis, key: str) -> None:
        self.r = r
        self.key = key
        self.expires: dict[int, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.002):
            token, expires = self.r.hmget(self.key, ["token", "expires"])
            if token is not None and expires is not None:
                t = int(token)
                self.expires[t] = max(self.expires.get(t, 0), int(expires))

    def __enter__(self) -> ExpiryWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(STEP_TIMEOUT)


@pytest.fixture
def upstream_port(server: ServerInfo) -> int:
    return urlsplit(server.url).port or 6379


# -- 1. the decisions log ----------------------------------------------------------------------

VALUE = re.compile(r"term (\d+) acts (\d+)")


def test_decisions_log_proves_fencing_across_a_kill_and_a_pause(
    server: ServerInfo, namespace: str, client: fencing.Client
) -> None:
    observer = client.election("decider", "observer", ttl=TTL)
    with Candidates(server.url, namespace, "decider") as fleet:
        cids = [f"c{i}" for i in range(4)]
        for cid in cids:
            fleet.campaign(cid, act=True)
        fleet.wait_ready()

        def elected(token: int) -> Event:
            return fleet.wait_for(
                f"term {token} elected", lambda e: e["ev"] == "elected" and e["token"] == token
            )

        def acting(cid: str, since: int) -> None:
            fleet.wait_until(
                f"{cid} acts",
                lambda: (
                    sum(e["ev"] == "sent" for e in fleet.log[since:] if e["cid"] == cid)
                    >= SENDS_PER_TERM
                ),
                STEP_TIMEOUT,
            )

        # Term 1; the three others are all campaigning meanwhile.
        l1 = elected(1)["cid"]
        acting(l1, 0)
        fleet.wait_until("three waiting", lambda: observer.candidates() == 3, STEP_TIMEOUT)
        # The leader dies.
        fleet.signal(l1, signal.SIGKILL)
        assert fleet.finish(l1) == -signal.SIGKILL
        mark = len(fleet.log)
        l2 = elected(2)["cid"]
        acting(l2, mark)
        # The next one stops between checking `lost` (not set) and the send it allowed,
        # and stays stopped past its TTL: the third is elected and acts meanwhile.
        fleet.send(l2, "hold")
        holding = fleet.wait_for(
            f"{l2} holds", lambda e: e["ev"] == "holding" and e["cid"] == l2, since=mark
        )
        fleet.signal(l2, signal.SIGSTOP)
        mark = len(fleet.log)
        l3 = elected(3)["cid"]
        acting(l3, mark)
        info = observer.leader()
        assert info is not None
        assert (info.label, info.token) == (l3, 3)
        assert l2 not in {e["cid"] for e in fleet.log[mark:]}, "a stopped process reported"
        # It resumes and does what its check allowed: the send must be refused.
        fleet.signal(l2, signal.SIGCONT)
        fleet.send(l2, "go")
        assert fleet.finish(l2) == 0
        # Term 4: the last candidate, after the third resigns.
        mark = len(fleet.log)
        fleet.send(l3, "resign")
        l4 = elected(4)["cid"]
        acting(l4, mark)
        fleet.send(l4, "resign")
        assert fleet.finish(l3) == 0
        assert fleet.finish(l4) == 0

    leaders = {1: l1, 2: l2, 3: l3, 4: l4}
    assert sorted(leaders.values()) == cids

    # What the stopped leader did after the pause: every send refused, the first of them
    # the very send its check of `lost` had allowed.
    late = [e for e in fleet.of(l2, "sent", "fenced", "send_error") if e["n"] >= holding["n"]]
    assert late, "the resumed leader made no late send"
    assert late[0]["n"] == holding["n"]
    assert {e["ev"] for e in late} == {"fenced"}, late
    assert all("ProducerFenced" in e["error"] for e in late)
    # Nobody else was ever refused or failed a send.
    for cid in cids:
        others = fleet.of(cid, "fenced", "send_error")
        assert others == (late if cid == l2 else []), others

    # Each leader held one term: one on_elected, one on_revoked (the killed one reports none).
    for token, cid in leaders.items():
        assert [e["token"] for e in fleet.of(cid, "elected")] == [token]
        assert [e["token"] for e in fleet.of(cid, "producer")] == [token]
        assert [e["epoch"] for e in fleet.of(cid, "producer")] == [token]
        revoked = fleet.of(cid, "revoked")
        if token == 1:
            assert revoked == []
            continue
        assert [e["token"] for e in revoked] == [token]
        (exit_event,) = fleet.of(cid, "exit")
        assert (exit_event["elected"], exit_event["revoked"]) == (1, 1)
        if token == 2:
            assert revoked[0]["reason"] in ("LeaseExpired", "Fenced")
            assert "resigned" not in revoked[0]["text"]
        else:
            assert "resigned" in revoked[0]["text"]

    # The whole log, as Redis has it.
    records = read_log(client)
    assert [r.offset for r in records] == list(range(len(records)))
    segments: list[tuple[int, list[int]]] = []
    for record in records:
        match = VALUE.fullmatch(record.value.decode())
        assert match, record
        term, n = int(match[1]), int(match[2])
        token = int(record.headers["token"])
        # The token in the header is the term's, and the producer epoch it was written under.
        assert term == token == record.epoch, record
        if segments and segments[-1][0] == token:
            segments[-1][1].append(n)
        else:
            segments.append((token, [n]))
    # Tokens never go down along the log, and each term is one contiguous segment.
    assert [token for token, _ in segments] == [1, 2, 3, 4]
    by_token = dict(segments)
    for token, cid in leaders.items():
        acked = fleet.of(cid, "sent")
        ns = [e["n"] for e in acked]
        assert ns == list(range(len(ns)))
        assert len(ns) >= SENDS_PER_TERM
        logged = by_token[token]
        if token == 1:
            # SIGKILLed: its last send may have landed without being reported.
            assert logged in (ns, [*ns, len(ns)])
        else:
            assert logged == ns
        first = next(r.offset for r in records if int(r.headers["token"]) == token)
        assert [e["offset"] for e in acked] == list(range(first, first + len(acked)))
        assert {e["epoch"] for e in acked} == {token}
    # No record of the stopped leader after the next leader's first record, and none of
    # its refused sends anywhere.
    values = [r.value.decode() for r in records]
    last_l2 = max(i for i, r in enumerate(records) if int(r.headers["token"]) == 2)
    first_l3 = min(i for i, r in enumerate(records) if int(r.headers["token"]) == 3)
    assert last_l2 < first_l3
    assert not {e["value"] for e in late} & set(values)
    print(
        f"\n[{server.kind}] terms {leaders}; records per term "
        f"{[len(ns) for _, ns in segments]}; late sends refused {len(late)} "
        f"(already known fenced locally: {sum(e['known'] for e in late)})"
    )


# -- 2. the renew deadline under a partition ---------------------------------------------------

PARTITION_ROUNDS = 3
DEADLINE = 0.6
RETRY = 0.1


def test_renew_deadline_under_a_partition_never_lets_two_believe_they_lead(
    server: ServerInfo,
    namespace: str,
    client: fencing.Client,
    r: redis.Redis,
    upstream_port: int,
) -> None:
    key = client.keys.ownership(ELECTION_GROUP, "part")
    cids = ["p0", "p1", "p2"]
    rounds: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        proxies = {cid: stack.enter_context(Proxy(upstream_port)) for cid in cids}
        fleet = stack.enter_context(Candidates(server.url, namespace, "part"))
        watch = stack.enter_context(ExpiryWatch(r, key))
        for cid in cids:
            fleet.campaign(
                cid,
                url=proxies[cid].url_for(server.url),
                renew_deadline=DEADLINE,
                retry_period=RETRY,
                campaign_timeout=0.3,
                campaigns=0,
            )
        fleet.wait_ready()
        leader = fleet.wait_for("first leader", lambda e: e["ev"] == "elected")
        for _ in range(PARTITION_ROUNDS):
            cid, token = leader["cid"], leader["token"]
            # Let it renew a few times first (a settled leader, not one just elected).
            first_seen = fleet.wait_until(
                f"{cid} renews", lambda token=token: watch.expires.get(token), STEP_TIMEOUT
            )
            fleet.wait_until(
                f"{cid} renews again",
                lambda token=token, first=first_seen: watch.expires[token] > first + 2 * RETRY,
                STEP_TIMEOUT,
            )
            mark = len(fleet.log)
            proxies[cid].drop_requests(b"*", count=None, close=False)  # a black hole
            blocked_at = time.monotonic()
            revoked = fleet.wait_for(
                f"{cid} steps down",
                lambda e, cid=cid: e["ev"] == "revoked" and e["cid"] == cid,
                since=mark,
            )
            successor = fleet.wait_for(
                "a new leader",
                lambda e, token=token: e["ev"] == "elected" and e["token"] > token,
                since=mark,
            )
            proxies[cid].clear()
            proxies[cid].sever()
            rounds.append(
                {
                    "cid": cid,
                    "token": token,
                    "blocked_at": blocked_at,
                    "revoked": revoked,
                    "successor": successor,
                    "expires_ms": watch.expires[token],
                }
            )
            leader = successor
        # The waiting candidates leave first, then the last leader resigns.
        waiting = [cid for cid in cids if cid != leader["cid"]]
        for cid in waiting:
            fleet.send(cid, "stop")
        for cid in waiting:
            assert fleet.finish(cid) == 0
        fleet.send(leader["cid"], "stop")
        assert fleet.finish(leader["cid"]) == 0

    for rnd in rounds:
        revoked, successor = rnd["revoked"], rnd["successor"]
        assert revoked["token"] == rnd["token"]
        assert revoked["reason"] == "LeaseExpired", revoked["text"]
        # Stepped down by the deadline timer: soon after the black hole...
        assert revoked["mono"] - rnd["blocked_at"] < TTL
        # ...before the lease lapsed by the server's clock (same host: same wall clock)...
        assert revoked["wall"] * 1000 < rnd["expires_ms"]
        # ...and before the next leader was elected, who was elected only once the lease
        # had lapsed by server time.
        assert successor["token"] == rnd["token"] + 1
        assert successor["cid"] != rnd["cid"]
        assert revoked["mono"] < successor["mono"]
        assert round(successor["term_started"] * 1000) >= rnd["expires_ms"]

    # The whole history: the intervals in which each process believed it led.
    intervals = []
    for event in fleet.log:
        if event["ev"] == "elected":
            (end,) = [e for e in fleet.of(event["cid"], "revoked") if e["token"] == event["token"]]
            intervals.append((event["mono"], end["mono"], event["token"], event["cid"], end))
    intervals.sort()
    assert [i[2] for i in intervals] == list(range(1, len(intervals) + 1))
    for before, after in itertools.pairwise(intervals):
        (_, lost_at, token, cid, _), (elected_at, _, next_token, next_cid, _) = before, after
        assert lost_at < elected_at, f"{cid} (token {token}) overlaps {next_cid} ({next_token})"
    # Exactly one step-down per black hole; every other term ended by resigning at the end.
    reasons = [(i[2], i[4]["reason"], "resigned" in i[4]["text"]) for i in intervals]
    lapsed = [token for token, reason, _ in reasons if reason == "LeaseExpired"]
    assert lapsed == [rnd["token"] for rnd in rounds]
    assert all(resigned for token, _, resigned in reasons if token not in lapsed), reasons
    assert len(intervals) == PARTITION_ROUNDS + 1
    print(
        f"\n[{server.kind}] terms {[(i[2], i[3]) for i in intervals]}; stepped down after "
        f"{[round(rnd['revoked']['mono'] - rnd['blocked_at'], 3) for rnd in rounds]}s; "
        "margin to the lease end "
        f"{[round(rnd['expires_ms'] / 1000 - rnd['revoked']['wall'], 3) for rnd in rounds]}s"
    )


# -- 3. callbacks in real processes ------------------------------------------------------------


def test_callbacks_in_real_processes(server: ServerInfo, namespace: str) -> None:
    with Candidates(server.url, namespace, "cb") as fleet:
        fleet.campaign("a")
        a = fleet.wait_for("a elected", lambda e: e["ev"] == "elected" and e["cid"] == "a")
        assert a["token"] == 1
        # b campaigns twice while a leads and never wins; c waits for its turn.
        fleet.campaign("b", campaign_timeout=0.5, campaigns=2)
        fleet.campaign("c")
        assert fleet.finish("b") == 0
        fleet.wait_for("c ready", lambda e: e["ev"] == "ready" and e["cid"] == "c")
        # a is stopped past its TTL: c is elected meanwhile; then a resumes.
        fleet.signal("a", signal.SIGSTOP)
        c = fleet.wait_for("c elected", lambda e: e["ev"] == "elected" and e["cid"] == "c")
        assert c["token"] == 2
        fleet.signal("a", signal.SIGCONT)
        assert fleet.finish("a") == 0
        fleet.send("c", "resign")
        assert fleet.finish("c") == 0

    assert fleet.of("b", "elected", "revoked") == []
    assert len(fleet.of("b", "not_elected")) == 2
    (exit_b,) = fleet.of("b", "exit")
    assert (exit_b["elected"], exit_b["revoked"]) == (0, 0)
    (revoked_a,) = fleet.of("a", "revoked")
    assert revoked_a["token"] == 1
    assert revoked_a["reason"] in ("LeaseExpired", "Fenced")
    assert "resigned" not in revoked_a["text"], "a lost term is not a resignation"
    (ended_a,) = fleet.of("a", "ended")
    assert ended_a["lost_in_block"]
    (exit_a,) = fleet.of("a", "exit")
    assert (exit_a["elected"], exit_a["revoked"]) == (1, 1)
    (revoked_c,) = fleet.of("c", "revoked")
    assert revoked_c["token"] == 2
    assert "resigned" in revoked_c["text"]
    (exit_c,) = fleet.of("c", "exit")
    assert (exit_c["elected"], exit_c["revoked"]) == (1, 1)


# -- 4. exit_on_loss ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["black-holed", "paused-and-superseded", "taken-over", "resigned"])
def test_exit_on_loss_ends_the_process_with_status_70(
    server: ServerInfo,
    namespace: str,
    client: fencing.Client,
    r: redis.Redis,
    upstream_port: int,
    how: str,
) -> None:
    key = client.keys.ownership(ELECTION_GROUP, "exit")
    with contextlib.ExitStack() as stack:
        proxy = stack.enter_context(Proxy(upstream_port))
        fleet = stack.enter_context(Candidates(server.url, namespace, "exit"))
        url = proxy.url_for(server.url) if how == "black-holed" else server.url
        fleet.campaign("a", url=url, exit_on_loss=True)
        a = fleet.wait_for("a elected", lambda e: e["ev"] == "elected")
        assert a["token"] == 1
        if how == "black-holed":
            proxy.drop_requests(b"*", count=None, close=False)
        elif how == "paused-and-superseded":
            fleet.campaign("b")
            fleet.wait_for("b ready", lambda e: e["ev"] == "ready" and e["cid"] == "b")
            fleet.signal("a", signal.SIGSTOP)
            fleet.wait_for("b elected", lambda e: e["ev"] == "elected" and e["cid"] == "b")
            fleet.signal("a", signal.SIGCONT)
        elif how == "taken-over":
            # An operator takes the row over (what `fencing release` does): a supersedes.
            taker = fencing.Ownership(client, ELECTION_GROUP, "operator", 5.0, _allow_reserved=True)
            stack.callback(taker.close)
            taker.claim("exit", generation=0)
        else:
            fleet.send("a", "resign")
        status = fleet.finish("a")
        if "b" in fleet.workers:
            fleet.send("b", "stop")
            assert fleet.finish("b") == 0
        row = r.hgetall(key)

    (revoked,) = fleet.of("a", "revoked")
    if how == "resigned":
        assert status == 0
        assert "resigned" in revoked["text"]
        assert len(fleet.of("a", "ended", "exit")) == 2
        return
    assert status == EXIT_ON_LOSS_STATUS, revoked["text"]
    # Ended by the library right after on_revoked: the campaign block was never left.
    assert fleet.of("a", "ended", "exit") == []
    expected = {
        "black-holed": {"LeaseExpired"},
        "paused-and-superseded": {"LeaseExpired", "Fenced"},
        "taken-over": {"Fenced"},
    }[how]
    assert revoked["reason"] in expected, revoked
    if how == "black-holed":
        # It exited before its lease lapsed by server time (nobody else ran; it never
        # released: the row still holds its term with the last lease it got).
        assert int(row["token"]) == 1
        assert revoked["wall"] * 1000 < int(row["expires"])


# -- a leader whose loop sees lost first -------------------------------------------------------


def test_a_leader_that_sees_lost_first_is_still_a_loss_not_a_resignation(
    server: ServerInfo, namespace: str
) -> None:
    """``lost.is_set()`` (and ``lost.wait()``) report the renew deadline's loss themselves,
    before the timer thread ends the term. A leader whose loop sees ``lost`` first and
    leaves its ``campaign`` block - the documented pattern - has still lost its term, not
    resigned it: ``on_revoked`` and ``reason`` say ``LeaseExpired``, and
    ``exit_on_loss=True`` exits with status 70. Deterministic here: the leader does
    CPU-bound work holding the GIL (switch interval 1 s > renew deadline), so its loop always
    looks at ``lost`` before the starved timer thread runs (the black-holed leaders of the
    partition test and of ``exit_on_loss`` meet the same order by chance)."""
    with Candidates(server.url, namespace, "busy") as fleet:
        fleet.campaign("a", ttl=0.5, exit_on_loss=True, busy=True)
        status = fleet.finish("a")
    (revoked,) = fleet.of("a", "revoked")
    assert revoked["reason"] == "LeaseExpired", revoked["text"]
    assert status == EXIT_ON_LOSS_STATUS


# -- a leader paused past its lease, resumed after a successor was elected ---------------------


def paused_leader(channel: Any, url: str, namespace: str, name: str) -> None:
    """Campaign, report the term, then on "check" call ``leadership.check()`` and report
    what it raised and whether on_revoked had run by then."""
    client = fencing.Client.from_url(url, namespace=namespace)
    revoked: list[float] = []
    election = client.election(
        name,
        "paused",
        ttl=TTL,
        on_revoked=lambda term: revoked.append(time.monotonic()),
    )
    with election.campaign() as term:
        channel.report("elected", token=term.token)
        assert channel.command() == "check"
        try:
            term.check()
            channel.report("checked", error=None)
        except fencing.FencingError as exc:
            channel.report(
                "checked",
                error=type(exc).__name__,
                message=str(exc),
                revoked_before=len(revoked) == 1,
                reason=str(term.reason),
            )
    channel.report("done", revoked=len(revoked))
    client.close()


def test_a_leader_paused_past_its_lease_is_told_fenced_once_a_successor_was_elected(
    server: ServerInfo, namespace: str
) -> None:
    """SIGSTOP the leader past its lease, elect another, SIGCONT it: its first check()
    raises Fenced (not LeaseExpired: a successor was granted), and on_revoked has run
    before check() returns; its reason says it was paused, once."""
    client = fencing.Client.from_url(server.url, namespace=namespace)
    with Fleet() as fleet:
        fleet.start("a", paused_leader, server.url, namespace, "sched")
        elected = fleet.wait_for("a elected", lambda e: e["ev"] == "elected", wid="a")
        fleet.pause("a")
        successor = client.election("sched", "b", ttl=TTL)
        with successor.campaign(timeout=10) as term:
            assert term.token == elected["token"] + 1
            fleet.unpause("a")
            fleet.send("a", "check")
            checked = fleet.wait_for("a checked", lambda e: e["ev"] == "checked", wid="a")
        assert checked["error"] == "Fenced", checked
        assert checked["revoked_before"] is True
        assert f"token {term.token}" in checked["message"]
        # Whichever it noticed first on waking: its own deadline (then it says it was
        # paused), or the takeover notification.
        reason = checked["reason"]
        assert "paused" in reason or f"superseded by token {term.token}" in reason, reason
        assert reason.count("election 'sched'") == 1
        done = fleet.wait_for("a done", lambda e: e["ev"] == "done", wid="a")
        assert done["revoked"] == 1
        assert fleet.finish("a") == 0
    successor.close()
    client.close()


_PAUSED_LEADER = textwrap.dedent(
    """
    import sys, time, fencing
    url, ns = sys.argv[1], sys.argv[2]
    client = fencing.Client.from_url(url, namespace=ns)
    election = client.election("sched", candidate_id="paused", ttl=1.0)
    with election.campaign() as term:
        print("elected", time.monotonic(), flush=True)
        last = 0.0
        while True:                        # the documented loop: act while not lost
            now = time.monotonic()         # taken before the look: a pause after the look
            if term.lost.is_set():         # and before acting is the token's to cover
                break
            last = now
        print("believed_until", last, flush=True)
        print("lost_seen", time.monotonic(), type(term.reason).__name__, flush=True)
    """
)


def test_lost_is_set_before_a_paused_leader_acts_again_after_another_was_elected(
    server: ServerInfo, client: Client
) -> None:
    """The module promises that "the intervals in which two processes believe they lead never
    overlap": ``lost`` is set by the renew deadline before the lease can lapse.

    A leader SIGSTOPped past its TTL, resumed after another candidate was elected, never sees
    ``lost.is_set() == False`` again (its renew deadline passed long ago by CLOCK_MONOTONIC,
    which runs on through SIGSTOP)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_LEADER, server.url, client.keys.namespace],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line and line[0] == "elected", line
        time.sleep(0.05)  # let it spin in its acting loop (not a synchronisation)
        os.kill(proc.pid, signal.SIGSTOP)
        other = client.election("sched", candidate_id="other", ttl=1.0)
        with other.campaign(timeout=4.0) as term:
            other_elected = time.monotonic()  # no later than when it began to lead
            os.kill(proc.pid, signal.SIGCONT)
            out = dict(
                (parts[0], parts[1:])
                for parts in (proc.stdout.readline().split() for _ in range(2))
            )
            assert not term.lost.is_set()
        other.close()
        believed_until = float(out["believed_until"][0])
        assert believed_until < other_elected, (
            f"the paused leader acted as leader {believed_until - other_elected:.4f}s after "
            "another process was elected (lost was still unset)"
        )
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(5)


_EXIT_ON_LOSS = textwrap.dedent(
    """
    import sys, time, fencing
    from fencing._keys import ELECTION_GROUP
    url, ns = sys.argv[1], sys.argv[2]
    client = fencing.Client.from_url(url, namespace=ns)
    election = client.election(
        "sched", "a", ttl=5.0, exit_on_loss=True, on_revoked=lambda term: sys.exit(3)
    )
    with election.campaign() as term:
        taker = fencing.Ownership(client, ELECTION_GROUP, "op", 5.0, _allow_reserved=True)
        taker.claim("sched", generation=0)          # superseded: a loss, not a resign
        term.lost.wait(3)
        time.sleep(1.0)
        print("still running after the loss", flush=True)
        sys.stdout.flush()
        import os; os._exit(0)
    """
)


def test_exit_on_loss_ends_the_process_even_if_on_revoked_raises_system_exit(
    server: ServerInfo, namespace: str
) -> None:
    """``exit_on_loss=True``: "a term lost by anything but resigning ends the process
    (os._exit(70)) right after on_revoked". The process ends (status 70, or on_revoked's own
    exit) whatever on_revoked raises."""
    proc = subprocess.run(
        [sys.executable, "-c", _EXIT_ON_LOSS, server.url, namespace],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert "still running" not in proc.stdout, (proc.returncode, proc.stderr[-500:])
    assert proc.returncode in (70, 3)

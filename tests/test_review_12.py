"""Review 12: a hostile look at leader election and single readers.

Each test is named for what should hold. Where a docstring has "Happens:", it records
the hole the review reproduced on the first version (commit 412abfe/c74e93f); every one
was fixed afterwards and the test now guards it. Tests marked "Held" were attacks that
held from the start. Only the suite's throwaway servers are used (``server``,
``fresh_server``); faults come from :class:`fencing.faults.Proxy`, pauses from SIGSTOP on a
child process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis

import fencing
from fencing import Client, Leadership, Topic
from fencing._keys import ELECTION_GROUP
from fencing._lua_loader import script
from fencing.faults import Proxy

from .conftest import ServerInfo
from .helpers import wait_until

CLAIM = b"EVALSHA\r\n$40\r\n" + script("claim").sha1.encode()
COMMIT = b"EVALSHA\r\n$40\r\n" + script("commit").sha1.encode()
RENEW = b"EVALSHA\r\n$40\r\n" + script("renew").sha1.encode()
RELEASE = b"EVALSHA\r\n$40\r\n" + script("release").sha1.encode()
CHECK = b"EVALSHA\r\n$40\r\n" + script("check").sha1.encode()


@pytest.fixture
def proxied(server: ServerInfo, namespace: str) -> Iterator[tuple[Proxy, Client]]:
    """A fencing client whose every connection runs through a fault-injecting proxy."""
    url = urlsplit(server.url)
    if url.scheme != "redis" or not url.port:
        pytest.skip("the proxy needs a TCP server")
    with Proxy(url.port) as proxy:
        client = Client.from_url(proxy.url_for(server.url), namespace=namespace)
        yield proxy, client
        client.close()


def _fill(topic: Topic, n: int, partition: int = 0) -> None:
    with topic.producer() as p:
        p.send_batch([fencing.Record(value=b"v%03d" % i) for i in range(n)], partition=partition)


# -- 1. the documented usage `while not leadership.lost.is_set(): act` after a pause ---------

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
    """The module promises that "the intervals in which two processes believe they lead
    never overlap": ``lost`` is set by the renew deadline before the lease can lapse.

    Should: a leader SIGSTOPped past its TTL, resumed after another candidate was
    elected, never sees ``lost.is_set() == False`` again (its renew deadline passed long
    ago by CLOCK_MONOTONIC, which runs on through SIGSTOP).
    Happens: ``lost`` is a plain Event set by a timer thread; after SIGCONT the acting
    thread (which held the GIL when stopped) keeps reading ``lost`` as unset for
    thousands of iterations until the timer thread gets to run, while the other process
    has been leading for a while: both believe they lead at once.
    """
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


# -- 2. callbacks: on_revoked runs (and returns) while on_elected is still running -----------


def test_a_takeover_during_on_elected_revokes_at_once_and_sets_lost_for_it(
    client: Client,
) -> None:
    """Callbacks run "once per term actually held"; users pair them (on_elected starts the
    leader's work, on_revoked stops it).

    A term lost involuntarily while on_elected still sets up (here another session takes
    the row over) runs on_revoked at once, as client-go cancels the leading callback's
    context: it must stop what the term does before a successor can act, whatever
    on_elected is doing. on_elected sees ``lost`` set (its cancellation signal) and the
    campaign block is entered with ``lost`` set."""
    events: list[str] = []
    in_elected = threading.Event()
    revoked = threading.Event()
    go = threading.Event()
    seen_lost: list[bool] = []

    def elected(term: Leadership) -> None:
        events.append("elected:start")
        in_elected.set()
        go.wait(5)  # slow setup (load state, open connections...)
        seen_lost.append(term.lost.is_set())
        events.append("elected:end")

    def on_revoked(term: Leadership) -> None:
        events.append("revoked")
        revoked.set()

    election = client.election("sched", "a", ttl=5.0, on_elected=elected, on_revoked=on_revoked)
    errors: list[BaseException] = []
    entered: list[bool] = []

    def run() -> None:
        try:
            with election.campaign(timeout=5) as term:
                entered.append(term.lost.is_set())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    try:
        assert in_elected.wait(5)
        # Another session takes the row over while on_elected is still setting up.
        taker = fencing.Ownership(client, ELECTION_GROUP, "operator", 5.0, _allow_reserved=True)
        taker.claim("sched", generation=0)
        assert revoked.wait(5)  # at once, on_elected still running
    finally:
        go.set()
        t.join(5)
    taker.close()
    election.close()
    assert not errors
    assert events == ["elected:start", "revoked", "elected:end"], events
    assert seen_lost == [True] and entered == [True]


# -- 3. a claim whose reply is lost: the row stays held by a session nobody renews -----------


def test_a_campaign_that_fails_after_its_claim_landed_leaves_no_phantom_leader(
    proxied: tuple[Proxy, Client], client: Client
) -> None:
    """Should: when campaign() raises (OutcomeUnknown: every claim reply was lost), the
    library gives the row back (its session is known: release it or at least let the
    next candidate in); ``leader()`` must not name a leader that no process is.
    Happens: the claim was applied on the server (the session holds the row), the
    grant was never recorded, so closing the handle releases nothing: ``leader()``
    reports candidate "a" as leading for the whole TTL (up to 7 days is allowed) and
    every other candidate is locked out, though nobody leads.
    """
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


def test_a_consumer_that_fails_to_open_after_its_claim_landed_leaves_the_partition_free(
    proxied: tuple[Proxy, Client], client: Client
) -> None:
    """Should: a consumer whose open raised (OutcomeUnknown: the claim reply was lost)
    does not keep its partition; another member can open it at once.
    Happens: the claim landed, the handle never recorded it, the partition is held by
    a session nobody renews or releases: every member gets OwnershipConflict for the
    whole TTL.
    """
    proxy, pclient = proxied
    topic = pclient.topic("orders", partitions=1)
    _fill(topic, 3)
    with proxy.drop_replies(CLAIM, count=None), pytest.raises(fencing.OutcomeUnknown):
        topic.consumer("g", "a", partitions=[0], ttl=30.0)
    with client.topic("orders").consumer("g", "b", partitions=[0], ttl=30.0) as c:
        assert [r.offset for r in c.poll()] == [0, 1, 2]


# -- 4. close() while a campaign waits ---------------------------------------------------------


def test_close_ends_a_campaign_that_is_still_waiting(client: Client) -> None:
    """``Election.close()``: "Resign any term this election holds"; a closed handle
    refuses every later call.

    Should: a campaign of this handle that is waiting in another thread ends promptly
    (raises) when the handle is closed, like observe() does, and is never elected later.
    Happens: the waiting campaign is not told; once the leader resigns it is elected on
    the closed handle, so a process that closed its election (at shutdown) becomes
    leader afterwards.
    """
    a = client.election("sched", "a", ttl=30.0)
    b = client.election("sched", "b", ttl=30.0)
    outcome: list[object] = []
    done = threading.Event()

    def run_b() -> None:
        try:
            with b.campaign(timeout=4.0) as term:
                outcome.append(term.token)
        except BaseException as exc:
            outcome.append(exc)
        finally:
            done.set()

    with a.campaign():
        t = threading.Thread(target=run_b)
        t.start()
        wait_until(lambda: a.candidates() == 1, timeout=3)
        b.close()
        ended_on_close = done.wait(1.0)
    t.join(5)
    a.close()
    assert ended_on_close, f"close() did not end the waiting campaign; then: {outcome}"
    assert not isinstance(outcome[0], int), "elected after its election handle was closed"


# -- 5. a blocking poll that outlives a takeover ---------------------------------------------


def _blocked_in_xread(raw: redis.Redis) -> bool:
    return any("xread" in str(c.get("cmd", "")) for c in raw.client_list())


def test_a_blocking_poll_returns_nothing_appended_after_its_member_was_superseded(
    client: Client, raw: redis.Redis
) -> None:
    """Module doc: "Every poll first checks the grants by server time, so a member that
    was paused and superseded finds out there, never by reading on."

    Should: a poll(block_ms=...) that was blocking when another member took the
    partition over (and this member was told, by the severed notification) raises
    Fenced (or returns nothing) instead of handing over records appended after the
    takeover, which the new owner is processing.
    Happens: the grant is checked once before the XREAD BLOCK loop; the severed member
    returns the record appended after the takeover as if it still owned the partition.
    """
    topic = client.topic("orders", partitions=1)
    _fill(topic, 2)
    member = topic.consumer("g", "a", partitions=[0], start="latest", ttl=30.0)
    got: list[object] = []

    def poll() -> None:
        try:
            got.append(member.poll(max_records=10, block_ms=4000))
        except BaseException as exc:
            got.append(exc)

    t = threading.Thread(target=poll)
    t.start()
    try:
        wait_until(lambda: _blocked_in_xread(raw), timeout=3)
        taker = client.ownership("g", "operator", ttl=30.0)
        taker.claim(["orders/0"], generation=0)
        wait_until(member._owner.severed.is_set, timeout=3)  # it was told
        _fill(topic, 1)
    finally:
        t.join(6)
    taker.close()
    member.close()
    result = got[0]
    assert not (isinstance(result, list) and result), (
        f"a superseded member's poll returned {[r.offset for r in result]} "  # type: ignore[union-attr]
        "appended after the takeover"
    )


# -- 6. commit and G9's "highest offset seen" --------------------------------------------------


def test_a_commit_after_the_partition_went_back_in_history_is_state_lost(
    client: Client, raw: redis.Redis
) -> None:
    """G9: "Every fenced call sends the incarnation it saw and the highest offset it has
    seen ... a next offset below what the handle already saw means the store went
    backwards: the call raises StateLost and writes nothing."

    The partition is put back to an older copy of itself (DUMP/RESTORE of the partition's
    keys: what a failover that lost writes leaves), same incarnation, next offset 5
    where the consumer already read up to 10.
    Should: commit raises StateLost and writes nothing.
    Happens: commit-3 checks only the incarnation; commit({0: 4}) is stored silently
    (and commit() of the position raises OffsetOutOfRange, not StateLost).
    """
    topic = client.topic("orders", partitions=1)
    _fill(topic, 5)
    pk = client.keys.partition("orders", 0)
    snapshot = {k: raw.dump(k) for k in (pk.meta, pk.stream)}
    _fill(topic, 5)
    with topic.consumer("g", "a", partitions=[0], start="earliest", ttl=30.0) as c:
        assert len(c.poll(max_records=100)) == 10
        for k, v in snapshot.items():
            raw.restore(k, 0, v, replace=True)
        assert raw.hget(pk.meta, "next") == b"5"
        with pytest.raises(fencing.StateLost):
            c.commit({0: 4})
        assert raw.hget(pk.committed, "g") is None, "a commit into a rewound partition landed"


def test_a_commit_of_the_position_after_a_rewind_is_state_lost_not_out_of_range(
    client: Client, raw: redis.Redis
) -> None:
    """Same rewind as above. Should: commit() of the consumer's position (10, past the
    rewound end 5) raises StateLost, which tells the operator what happened. Happens:
    OffsetOutOfRange, which reads as a caller error."""
    topic = client.topic("orders", partitions=1)
    _fill(topic, 5)
    pk = client.keys.partition("orders", 0)
    snapshot = {k: raw.dump(k) for k in (pk.meta, pk.stream)}
    _fill(topic, 5)
    with topic.consumer("g", "a", partitions=[0], start="earliest", ttl=30.0) as c:
        assert len(c.poll(max_records=100)) == 10
        for k, v in snapshot.items():
            raw.restore(k, 0, v, replace=True)
        with pytest.raises(fencing.StateLost):
            c.commit()


# -- 7. a commit whose reply is lost, retried after a takeover ---------------------------------


def test_a_commit_that_landed_before_a_takeover_is_not_reported_as_fenced_and_unwritten(
    proxied: tuple[Proxy, Client], client: Client, raw: redis.Redis
) -> None:
    """Consumer.commit: "if another member took the partition over, it raises Fenced and
    writes nothing for that partition".

    The commit runs, its reply is lost (the connection stays mute until the socket
    timeout), another member takes the partition over, the library's retry is refused.
    Should: OutcomeUnknown (the first attempt may have landed), as the append does with
    ``ambiguous_after_retry``; never "Fenced, nothing written" for a write that is there.
    Happens: Fenced, while the committed offset in Redis is the one this call wrote.
    """
    proxy, pclient = proxied
    topic = pclient.topic("orders", partitions=1)
    _fill(topic, 5)
    pk = client.keys.partition("orders", 0)
    member = topic.consumer("g", "a", partitions=[0], ttl=10.0)
    member.commit({0: 1})  # the script is loaded (a NOSCRIPT reply is not what we lose)
    member.poll(max_records=3)
    rule = proxy.drop_replies(COMMIT, count=1, close=False)
    outcome: list[BaseException | dict[int, int]] = []

    def commit() -> None:
        try:
            outcome.append(member.commit())
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=commit)
    t.start()
    rule.wait(5)
    wait_until(lambda: raw.hget(pk.committed, "g") == b"3", timeout=3)  # it landed
    taker = client.ownership("g", "operator", ttl=10.0)
    taker.claim(["orders/0"], generation=0)
    assert t.is_alive(), "the retry ran before the takeover: the scenario did not happen"
    t.join(5)
    taker.close()
    member.close()
    assert raw.hget(pk.committed, "g") == b"3"
    assert isinstance(outcome[0], fencing.OutcomeUnknown), (
        f"told {outcome[0]!r} although its commit of 3 is stored"
    )


# -- 8. forks ------------------------------------------------------------------------------


def test_a_forked_child_never_sees_the_parents_term_as_its_own(client: Client) -> None:
    """DESIGN: in a forked child "the parent's handles do no I/O at all" and "the parent's
    leases lapse as if the child did not exist"; check() raises ProcessBoundError there.

    Should: in the child, ``leadership.lost`` reads as set (the child never holds the
    term), at the latest once the parent lost it.
    Happens: the child's copy of ``lost`` is an Event nobody will ever set (the timer
    and renewer threads are not in the child): after the parent was superseded the
    child still reads ``lost.is_set() == False`` for ever, so the documented loop
    ``while not leadership.lost.is_set(): act`` runs on in the child with no leader.
    """
    election = client.election("sched", "a", ttl=5.0)
    with election.campaign() as term:
        go_r, go_w = os.pipe()
        ans_r, ans_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.read(go_r, 1)
                try:
                    term.check()
                    checked = b"c"  # check() passed in the child: worse still
                except fencing.ProcessBoundError:
                    checked = b"p"
                except BaseException:
                    checked = b"e"
                os.write(ans_w, (b"1" if term.lost.is_set() else b"0") + checked)
            finally:
                os._exit(0)
        taker = fencing.Ownership(client, ELECTION_GROUP, "operator", 5.0, _allow_reserved=True)
        taker.claim("sched", generation=0)
        assert term.lost.wait(5)
        os.write(go_w, b"x")
        answer = os.read(ans_r, 2)
        os.waitpid(pid, 0)
        taker.close()
    election.close()
    assert answer[1:] == b"p", "check() in the child should raise ProcessBoundError"
    assert answer[:1] == b"1", "the child reads lost as unset after the parent's term ended"


# -- 9. re-entrancy of callbacks --------------------------------------------------------------


def test_closing_the_election_from_on_revoked_does_not_stall_for_the_ttl(client: Client) -> None:
    """Should: ``election.close()`` (or ``leadership.resign()``) called from on_revoked
    returns at once: the term is already ending, in this very thread.
    Happens: when the term ends by resigning (leaving the campaign block), on_revoked
    runs in the resigning thread; close() there resigns the same term again, which waits
    on ``_finished`` (set only after on_revoked returns) for a whole TTL: leaving the
    block takes ``ttl`` seconds (10 s by default) and the release waits as long.
    """
    ttl = 3.0
    election = client.election("sched", "a", ttl=ttl, on_revoked=lambda term: election.close())
    started = time.monotonic()
    with election.campaign():
        started = time.monotonic()
    took = time.monotonic() - started
    assert took < 1.0, f"leaving the campaign block took {took:.2f}s"


# -- 10. state loss (FLUSHALL) -------------------------------------------------------------------


def test_an_election_handle_never_gets_a_smaller_token_after_the_store_lost_state(
    fresh_server: ServerInfo, namespace: str
) -> None:
    """The token is "the fencing token for writes elsewhere (UPDATE ... WHERE token <= $1)"
    and "grows by one on every grant to a new session and never goes down"; G9: a handle
    that saw state raises StateLost rather than starting afresh on reset epochs.

    Should: an Election handle that already led with token 3 raises StateLost when it
    campaigns after a FLUSHALL (or at least never leads with a token <= 3).
    Happens: each campaign makes a new Ownership with no memory, so the handle is
    elected with token 1: every store fenced with the README's ``token <= $1`` refuses
    the new leader, while a stale holder of token 3 would still pass that fence.
    """
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
    """Held: a FLUSHALL under a leader ends its term with StateLost (never a silent fresh
    start), on_revoked runs once, check() raises StateLost."""
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


def test_flushall_under_a_consumer_is_state_lost_for_poll_and_commit(
    fresh_server: ServerInfo, namespace: str
) -> None:
    """Held: after a FLUSHALL (and a producer writing a new history), the consumer's poll
    and commit raise StateLost and write nothing."""
    client = fencing.Client.from_url(fresh_server.url, namespace=namespace)
    raw = redis.Redis.from_url(fresh_server.url)
    try:
        topic = client.topic("orders", partitions=1)
        _fill(topic, 5)
        with topic.consumer("g", "a", partitions=[0], ttl=30.0) as c:
            assert len(c.poll()) == 5
            raw.flushall()
            other = fencing.Client.from_url(fresh_server.url, namespace=namespace)
            _fill(other.topic("orders", partitions=1), 7)
            other.close()
            with pytest.raises(fencing.StateLost):
                c.commit()
            with pytest.raises(fencing.StateLost):
                c.poll()
        assert raw.hget(client.keys.partition("orders", 0).committed, "g") is None
    finally:
        client.close()
        raw.close()


# -- 11. bad input ---------------------------------------------------------------------------


def test_campaign_timeout_false_is_refused_like_any_non_number(client: Client) -> None:
    """Should: ``campaign(timeout=False)`` raises InvalidArgumentType (bools are refused
    everywhere else, e.g. observe(timeout=False), claim(timeout=False)).
    Happens: ``False != 0`` is False, so it is taken as timeout=0 and campaigns."""
    election = client.election("sched", "a", ttl=5.0)
    try:
        with (
            pytest.raises(fencing.InvalidArgumentType),
            election.campaign(timeout=False),  # type: ignore[arg-type]
        ):
            pass
    finally:
        election.close()


@pytest.mark.parametrize("offset", [2**53, 10**17, 2**64])
def test_a_huge_commit_offset_is_refused_before_io_with_a_clear_error(
    client: Client, offset: int
) -> None:
    """Should: an offset no partition can reach is refused in Python (InvalidArgument or
    OffsetOutOfRange), before any I/O. Happens: it reaches the script, whose BAD_ARGUMENT
    comes back as a bare FencingError("unexpected reply from a redis-fencing script")."""
    topic = client.topic("orders", partitions=1)
    _fill(topic, 1)
    with (
        topic.consumer("g", "a", partitions=[0]) as c,
        pytest.raises((fencing.InvalidArgument, fencing.OffsetOutOfRange)),
    ):
        c.commit({0: offset})


def test_a_corrupt_committed_offset_raises_a_typed_error(client: Client, raw: redis.Redis) -> None:
    """Should: a committed offset that is not a number (written by another program) is a
    typed FencingError (StateLost / WrongKeyType) naming the key, like every other
    foreign value. Happens: a bare ValueError from int() escapes open and committed()."""
    topic = client.topic("orders", partitions=1)
    _fill(topic, 1)
    raw.hset(client.keys.partition("orders", 0).committed, "g", "abc")
    with pytest.raises(fencing.FencingError):
        topic.consumer("g", "a", partitions=[0])


# -- 12. a slow claim: elected on a term that is already over -------------------------------


def test_a_slow_claim_never_calls_on_elected_after_on_revoked(
    proxied: tuple[Proxy, Client],
) -> None:
    """The renew deadline of a term is timed from before its first claim attempt; the
    library's own retries of a claim whose replies were lost can take longer than
    ``renew_deadline`` (its budget allows up to 5/6 of the TTL).

    Should: such a term is either not handed to the user, or handed over with the
    callbacks in order (on_elected, then on_revoked) - never on_revoked first.
    Happens: the timer thread starts before on_elected and finds the deadline passed:
    on_revoked runs, then on_elected runs for a term that is already over (``lost`` set),
    and a user who starts work in on_elected and stops it in on_revoked leaves it
    running with no leader.
    """
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


# -- held: what the attacks did not break ------------------------------------------------------


def test_lost_renew_replies_step_the_leader_down_before_the_next_is_elected(
    proxied: tuple[Proxy, Client], client: Client
) -> None:
    """Held: every renew is applied but its reply lost; the leader steps down by its renew
    deadline (on_revoked) before the waiting candidate is elected (on_elected)."""
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
    """Held: the release is applied, its reply lost; the retry answers "not held" without
    harm, the waiter is woken by the release notification, not by the 30 s lease."""
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
    """Held: a leader cut off until its renew deadline steps down; once Redis is back and
    the row would still pass a server check, ``check()`` still raises (the term is over
    here for good) and no renewal revives it."""
    proxy, pclient = proxied
    election = pclient.election("sched", "a", ttl=2.0, renew_deadline=0.5)
    with election.campaign() as term:
        with proxy.drop_requests(RENEW, count=None, close=False):
            assert term.lost.wait(3)
        with pytest.raises(fencing.LeaseExpired):
            term.check()
        assert term.lost.is_set()
    election.close()


def test_concurrent_checks_during_a_takeover_give_one_on_revoked(client: Client) -> None:
    """Held: eight threads call check() in a loop while the row is taken over; every one
    ends with Fenced, on_revoked runs exactly once."""
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


def test_a_consumer_in_a_forked_child_does_nothing_and_the_parent_keeps_its_partition(
    client: Client, raw: redis.Redis
) -> None:
    """Held: in a forked child the parent's consumer refuses poll/commit
    (ProcessBoundError) and its close() releases nothing."""
    topic = client.topic("orders", partitions=1)
    _fill(topic, 3)
    c = topic.consumer("g", "a", partitions=[0], ttl=10.0)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            for fn in (c.poll, c.commit):
                try:
                    fn()
                    code |= 1
                except fencing.ProcessBoundError:
                    pass
            c.close()
        except BaseException:
            code |= 2
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    code = os.read(r, 1)[0]
    os.waitpid(pid, 0)
    assert code == 0
    assert [rec.offset for rec in c.poll()] == [0, 1, 2]
    assert c.commit() == {0: 3}
    c.close()


def test_wrong_type_keys_under_an_election_are_refused_and_left_alone(
    client: Client, raw: redis.Redis
) -> None:
    """Held: a foreign value at the candidates key or at the election row is refused
    with WrongKeyType and left as it was."""
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


# -- 13. more: observe during an outage, on_revoked exiting, a failed open's leftovers --------


def test_observe_ends_promptly_on_close_during_an_outage(
    proxied: tuple[Proxy, Client],
) -> None:
    """observe(): "Ends cleanly when close() is called ... A Redis outage is logged and
    waited out." Should: close() ends the iterator promptly even while Redis does not
    answer. Happens: the iterator is inside leader(), which retries for the whole budget
    (up to 5/6 of the TTL: about 8 s at the default ttl=10), and only then looks at the
    closed flag."""
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


def test_on_revoked_calling_sys_exit_still_releases_the_row(client: Client) -> None:
    """Should: the row is released (waiters woken) whatever on_revoked does; a common
    on_revoked is ``sys.exit(1)`` ("stop this process when we stop leading").
    Happens: only ``Exception`` is caught around on_revoked: a SystemExit skips the
    release, the change notification and the bookkeeping, so the next candidate waits
    for the whole TTL although the leader gave up."""
    election = client.election("sched", "a", ttl=30.0, on_revoked=lambda term: sys.exit(1))
    with pytest.raises(SystemExit), election.campaign():
        pass
    info = client.election("sched", "observer", ttl=30.0).leader()
    assert info is None, f"the row is still held after the leader exited: {info}"


def test_a_consumer_that_could_not_open_leaves_no_subscription_behind(
    client: Client, raw: redis.Redis
) -> None:
    """Should: a consumer whose open failed (the partition is held: OwnershipConflict)
    leaves nothing behind, so a retry loop around ``topic.consumer(...)`` runs for ever
    in bounded memory. Happens: the open's ownership handle is never closed on a
    refused claim; its session's pub/sub subscription stays, one more channel per
    attempt on the client's pub/sub connection and on the server."""
    topic = client.topic("orders", partitions=1)
    _fill(topic, 1)
    holder = topic.consumer("g", "holder", partitions=[0], ttl=30.0)
    pattern = f"{client.namespace}:*:session:*"  # one channel per (resource, session)

    def sessions() -> int:
        return len(raw.pubsub_shardchannels(pattern))

    before = sessions()
    for _ in range(20):
        with pytest.raises(fencing.OwnershipConflict):
            topic.consumer("g", "retry", partitions=[0], ttl=30.0)
    leaked = sessions() - before
    holder.close()
    assert leaked == 0, f"{leaked} session channels left subscribed by 20 failed opens"


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
    (os._exit(70)) right after on_revoked".
    Should: the process ends (status 70, or on_revoked's own exit) whatever on_revoked
    raises. Happens: on_revoked runs on the timer thread; its SystemExit (sys.exit() from
    a callback) escapes ``_finish`` (only Exception is caught), ends that thread alone,
    and os._exit is never reached: the process runs on after losing the term."""
    proc = subprocess.run(
        [sys.executable, "-c", _EXIT_ON_LOSS, server.url, namespace],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert "still running" not in proc.stdout, (proc.returncode, proc.stderr[-500:])
    assert proc.returncode in (70, 3)


def test_check_does_not_confirm_a_term_that_was_resigned_while_it_ran(
    proxied: tuple[Proxy, Client],
) -> None:
    """Leadership.check: "Raises Fenced once ... the term was resigned"; ``lost`` is "set
    the moment the term ends here".

    A worker thread calls check(); its first reply is lost, so the library retries it.
    Meanwhile another thread resigns (a shutdown handler): ``lost`` is set and on_revoked
    runs (the release comes after it). The retried server check still finds the row held.
    Should: check() raises Fenced: the term ended here before check() returned.
    Happens: ``_reason`` is looked at only before the server call; check() returns the
    grant ("you lead") after ``lost`` was set and on_revoked began.
    """
    proxy, pclient = proxied
    seen = proxy.observe(CHECK)

    def revoked(term: Leadership) -> None:
        # Hold the release back until the retried check reached the server: it then
        # still finds the row held (check() returns only once on_revoked has run).
        deadline = time.monotonic() + 5
        while seen.hits < 3 and time.monotonic() < deadline:
            time.sleep(0.005)

    election = pclient.election("sched", "a", ttl=10.0, on_revoked=revoked)
    result: list[object] = []
    with election.campaign() as term:
        term.check()  # the check script is loaded
        rule = proxy.drop_replies(CHECK, count=1, close=False)

        def worker() -> None:
            try:
                result.append(term.check())
            except BaseException as exc:
                result.append(exc)

        t1 = threading.Thread(target=worker)
        t1.start()
        rule.wait(5)
        t2 = threading.Thread(target=term.resign)
        t2.start()
        assert term.lost.wait(3)
        t1.join(5)
        t2.join(5)
    election.close()
    assert isinstance(result[0], fencing.Fenced), (
        f"check() returned {result[0]!r} after the term was resigned (lost was set)"
    )


def test_a_waiting_campaign_waits_out_a_short_outage_within_its_timeout(
    proxied: tuple[Proxy, Client], client: Client
) -> None:
    """campaign(timeout=...): "Block until elected (up to timeout seconds)"; observe()
    waits outages out. Should: a campaign that is waiting while the leader holds the
    row rides out a brief outage (its claims fail to reach Redis) and is elected once the
    leader resigns, within its timeout. Happens: the first claim attempt that fails
    for longer than its retry budget (ttl/3) ends the whole campaign with
    OutcomeUnknown, long before the timeout."""
    proxy, pclient = proxied
    a = client.election("sched", "a", ttl=30.0)
    b = pclient.election("sched", "b", ttl=1.5)
    outcome: list[object] = []
    done = threading.Event()

    def run_b() -> None:
        try:
            with b.campaign(timeout=4.0) as term:
                outcome.append(term.token)
        except BaseException as exc:
            outcome.append(exc)
        finally:
            done.set()

    with a.campaign():
        t = threading.Thread(target=run_b)
        t.start()
        wait_until(lambda: a.candidates() == 1, timeout=3)
        with proxy.drop_requests(CLAIM, count=None) as rule:
            rule.wait(3)  # b's next claim attempt meets the outage...
            done.wait(1.0)  # ...which lasts one more second
    t.join(5)
    a.close()
    b.close()
    assert outcome and isinstance(outcome[0], int), f"campaign ended with {outcome}"


def test_a_renewal_in_flight_during_resign_never_outlives_the_handover(
    proxied: tuple[Proxy, Client], client: Client
) -> None:
    """Held: a renewal is applied but its reply is stuck (mute connection) while the
    leader resigns; the release hands over, and the renewal's retry is refused (it
    cannot extend or take back the next leader's term)."""
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

"""How a term ends voluntarily (resign, close()) while its on_elected still runs: interrupted
callers, the bound on the wait, check() during it, and a takeover during it."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import redis

import fencing
import fencing.aio
from fencing import Client, Leadership
from fencing._keys import ELECTION_GROUP
from fencing._text import text
from fencing.faults import Proxy

from ..support.polling import wait_until, wait_until_async
from ..support.wire import CHECK

pytestmark = pytest.mark.one_server


def row(url: str, client: Any, name: str) -> dict[str, str]:
    raw = redis.Redis.from_url(url)
    try:
        data = raw.hgetall(client.keys.ownership(ELECTION_GROUP, name))
    finally:
        raw.close()
    return {text(k): text(v) for k, v in data.items()}


# -- asyncio: close() cancelled while it waits for on_elected -----------------------------


async def _close_cancelled(url: str, ns: str) -> dict:
    client = fencing.aio.Client.from_url(url, namespace=ns)
    events: list[str] = []
    started = asyncio.Event()
    release_elected = asyncio.Event()
    terms: list[Any] = []

    async def on_elected(term: Any) -> None:
        events.append(f"elected {term.token}")
        terms.append(term)
        started.set()
        await release_elected.wait()  # long start-up work that ignores lost
        events.append(f"elected-returned {term.token}")

    async def on_revoked(term: Any) -> None:
        events.append(f"revoked {term.token}")

    election = client.election(
        "e", candidate_id="a", ttl=3.0, on_elected=on_elected, on_revoked=on_revoked
    )
    other = client.election("e", candidate_id="b", ttl=3.0)

    async def campaign() -> None:
        async with election.campaign():
            events.append("block entered")

    camp = asyncio.ensure_future(campaign())
    await asyncio.wait_for(started.wait(), 30)
    closer = asyncio.ensure_future(election.close())
    # close() sets lost, then waits for on_elected: cancel it in that wait.
    await wait_until_async(terms[0].lost.is_set, what="close() waiting for on_elected")
    closer.cancel()  # e.g. asyncio.wait_for(election.close(), ...) timing out
    try:
        await closer
    except asyncio.CancelledError:
        events.append("close cancelled")
    row_after_cancel = row(url, client, "e")
    # can a successor be elected while on_elected still runs?
    successor = None
    try:
        async with other.campaign(timeout=0.5) as t:
            successor = t.token
            events.append(f"successor elected {t.token} while a's on_elected runs")
    except fencing.OwnershipConflict:
        pass
    release_elected.set()
    try:
        await asyncio.wait_for(camp, 5)
    except Exception as exc:
        events.append(f"campaign raised {type(exc).__name__}")
    await wait_until_async(
        lambda: any(e.startswith("revoked ") for e in events), what="on_revoked", timeout=30
    )
    await other.close()
    await client.close()
    return {"events": events, "row": row_after_cancel, "successor": successor}


def test_a_close_cancelled_while_it_waits_for_on_elected_is_completed_when_on_elected_returns(
    server: Any, namespace: str
) -> None:
    out = asyncio.run(_close_cancelled(server.url, namespace))
    ev = out["events"]
    print(ev, out["row"])
    n_el = sum(1 for e in ev if e.startswith("elected "))
    n_rev = sum(1 for e in ev if e.startswith("revoked "))
    assert n_el == n_rev == 1, f"on_elected {n_el}x, on_revoked {n_rev}x: {ev}"
    assert out["successor"] is None, f"successor elected while on_elected ran, no on_revoked: {ev}"


# -- sync: close() in the main thread interrupted by KeyboardInterrupt ------------------


def test_a_close_interrupted_while_it_waits_for_on_elected_is_completed_when_on_elected_returns(
    server: Any, namespace: str
) -> None:
    client = fencing.Client.from_url(server.url, namespace=namespace)
    events: list[str] = []
    started = threading.Event()
    release_elected = threading.Event()
    terms: list[Any] = []

    def on_elected(term: Any) -> None:
        events.append(f"elected {term.token}")
        terms.append(term)
        started.set()
        release_elected.wait(30)
        events.append("elected-returned")

    def on_revoked(term: Any) -> None:
        events.append(f"revoked {term.token}")

    # close() waits for on_elected up to the renew deadline (20 s): the interrupt lands in it.
    election = client.election(
        "e", candidate_id="a", ttl=30.0, on_elected=on_elected, on_revoked=on_revoked
    )

    def campaign() -> None:
        try:
            with election.campaign():
                events.append("block entered")
        except Exception as exc:
            events.append(f"campaign raised {type(exc).__name__}")

    t = threading.Thread(target=campaign)
    t.start()
    assert started.wait(30)

    closing = threading.Event()

    def interrupt(*_: Any) -> None:
        if closing.is_set():  # (never outside the close() below: pytest would stop)
            raise KeyboardInterrupt

    def interrupt_when_close_waits() -> None:
        # close() sets lost, then waits for on_elected: interrupt it in that wait.
        wait_until(terms[0].lost.is_set, timeout=30, what="close() waiting for on_elected")
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)

    old = signal.signal(signal.SIGALRM, interrupt)
    interrupter = threading.Thread(target=interrupt_when_close_waits)
    interrupter.start()
    try:
        closing.set()
        election.close()  # a user's finally: election.close(), then Ctrl-C
        closing.clear()
        events.append("close returned")
    except KeyboardInterrupt:
        closing.clear()
        events.append("close interrupted")
    finally:
        interrupter.join(30)
        signal.signal(signal.SIGALRM, old)
    stored = row(server.url, client, "e")
    release_elected.set()
    t.join(30)
    wait_until(lambda: any(e.startswith("revoked ") for e in events), what="on_revoked")
    print(events, stored)
    client.close()
    n_el = sum(1 for e in events if e.startswith("elected "))
    n_rev = sum(1 for e in events if e.startswith("revoked "))
    assert n_el == n_rev == 1, f"on_elected {n_el}x, on_revoked {n_rev}x; row {stored}: {events}"


# -- close() from another thread while on_elected ignores lost: how long? ---------------

#: How long an on_elected that ignores lost lasts at most: far past any wait close() may
#: spend on it, however busy the machine.
ON_ELECTED_LASTS = 30.0


def test_a_voluntary_end_waits_for_on_elected_at_most_the_renew_deadline_and_check_after_on_revoked(
    server: Any, namespace: str
) -> None:
    client = fencing.Client.from_url(server.url, namespace=namespace)
    events: list[tuple[float, str]] = []
    started = threading.Event()
    close_returned = threading.Event()
    terms: list[Leadership] = []
    t0 = time.monotonic()

    def log(s: str) -> None:
        events.append((round(time.monotonic() - t0, 2), s))

    def on_elected(term: Leadership) -> None:
        log("elected")
        terms.append(term)
        started.set()
        # Ignores lost, and outlasts the wait close() may spend on it (the renew_deadline):
        # it returns only once close() has, or after ON_ELECTED_LASTS.
        close_returned.wait(ON_ELECTED_LASTS)
        log("elected-returned")

    def on_revoked(term: Any) -> None:
        log("revoked")

    election = client.election(
        "e",
        candidate_id="a",
        ttl=1.5,
        renew_deadline=1.0,
        on_elected=on_elected,
        on_revoked=on_revoked,
    )
    campaign_out: list[str] = []

    def campaign() -> None:
        try:
            with election.campaign():
                campaign_out.append("entered")
        except Exception as exc:
            campaign_out.append(type(exc).__name__)

    t = threading.Thread(target=campaign)
    t.start()
    assert started.wait(10)
    term = terms[0]
    check_out: list[str] = []

    def checker() -> None:
        # check() while close() waits for on_elected (close() sets lost first).
        wait_until(term.lost.is_set, timeout=30, what="close() under way")
        try:
            term.check()
            check_out.append("ok")
        except fencing.FencingError as exc:
            check_out.append(type(exc).__name__)
        log(f"check returned {check_out[-1]}")

    ct = threading.Thread(target=checker)
    ct.start()
    a = time.monotonic()
    election.close()
    took = time.monotonic() - a
    log("close returned")
    close_returned.set()
    t.join(30)
    ct.join(30)
    client.close()
    print(events, campaign_out, took)
    order = [e for _, e in events]
    # check() must not return before on_revoked ran
    assert order.index("revoked") < next(i for i, e in enumerate(order) if e.startswith("check")), (
        events
    )
    # The renew deadline and a release, with room for a busy machine; far below the
    # ON_ELECTED_LASTS that waiting for on_elected to return would take.
    assert took < 1.0 + 4.0, (
        f"close() waited {took:.2f}s for on_elected (renew_deadline 1.0): {events}"
    )
    assert order.index("close returned") < order.index("elected-returned"), events


# -- a takeover while the term ends (or while on_elected runs) -----------------------------


#: A's lease in the takeover tests: long enough that the operator's release (a process of its
#: own, slow to start on a busy machine) lands while close() still waits for on_elected, and
#: that a revoke must come from the takeover, not from the lease running out.
TAKEOVER_TTL = 30.0


def _run(server: Any, namespace: str, with_close: bool) -> list[tuple[float, str]]:
    client = fencing.Client.from_url(server.url, namespace=namespace)
    events: list[tuple[float, str]] = []
    lock = threading.Lock()
    started = threading.Event()
    revoked = threading.Event()
    terms: list[Leadership] = []
    t0 = time.monotonic()

    def log(s: str) -> None:
        with lock:
            events.append((round(time.monotonic() - t0, 2), s))

    def a_elected(term: Leadership) -> None:
        log(f"A elected {term.token}")
        terms.append(term)
        started.set()
        # Long start-up work that does not look at lost: it lasts until the revoke was seen
        # (or the lease ran out), so on_revoked runs before it returns only if it runs at once.
        revoked.wait(TAKEOVER_TTL)
        log("A elected-returned")

    def a_revoked(term: Leadership) -> None:
        reason = term.reason
        by = reason.holder_token if isinstance(reason, fencing.Fenced) else None
        log(f"A revoked {term.token} superseded-by {by}")
        revoked.set()

    def b_elected(term: Leadership) -> None:
        log(f"B elected {term.token}")

    a = client.election(
        "e",
        candidate_id="a",
        ttl=TAKEOVER_TTL,
        renew_deadline=TAKEOVER_TTL * 2 / 3,
        on_elected=a_elected,
        on_revoked=a_revoked,
    )
    b = client.election("e", candidate_id="b", ttl=3.0, renew_deadline=2.0, on_elected=b_elected)

    def run_a() -> None:
        try:
            with a.campaign():
                pass
        except Exception as exc:
            log(f"A campaign {type(exc).__name__}")

    ta = threading.Thread(target=run_a)
    ta.start()
    assert started.wait(10)

    def run_b() -> None:
        try:
            with b.campaign(timeout=TAKEOVER_TTL):
                time.sleep(0.5)  # pacing: B holds its term a moment
        except Exception as exc:
            log(f"B campaign {type(exc).__name__}")

    tb = threading.Thread(target=run_b)
    tb.start()
    wait_until(lambda: b.candidates() == 1, what="B waiting as a candidate")
    if with_close:
        tc = threading.Thread(target=a.close)
        tc.start()
        # close() sets lost first, then waits for on_elected (up to the renew deadline).
        wait_until(terms[0].lost.is_set, what="close() waiting for A's on_elected")
    log("operator release")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "fencing.cli",
            "release",
            "__election__",
            "e",
            "--yes",
            "--url",
            server.url,
            "--namespace",
            namespace,
        ],
        check=True,
        capture_output=True,
    )
    log("operator release done")
    ta.join(TAKEOVER_TTL + 10)
    tb.join(TAKEOVER_TTL + 10)
    if with_close:
        tc.join(TAKEOVER_TTL + 10)
    a.close()
    b.close()
    client.close()
    return events


def _check_takeover(events: list[tuple[float, str]]) -> None:
    """A's on_revoked ran at once on the takeover (an involuntary loss), before its
    on_elected returned, also while a close() waited for that on_elected. (An operator's
    forced release does not wait for the old leader: B may be elected in between.)"""
    order = [e for _, e in events]

    def index(prefix: str) -> int:
        return next(i for i, e in enumerate(order) if e.startswith(prefix))

    revokes = [e for e in order if e.startswith("A revoked")]
    assert len(revokes) == 1, events
    # Ended by the takeover (the operator's token superseded A's), not by a resign or the
    # lease: on_elected was still blocked when on_revoked ran.
    a_token = int(order[index("A elected ")].split()[2])
    superseded_by = revokes[0].split()[-1]
    assert superseded_by != "None" and int(superseded_by) > a_token, events
    assert index("operator release") < index("A revoked") < index("A elected-returned"), events


def test_a_takeover_while_on_elected_runs_revokes_at_once(server: Any, namespace: str) -> None:
    events = _run(server, namespace, with_close=False)
    _check_takeover(events)


def test_a_takeover_while_close_waits_for_on_elected_revokes_at_once(
    server: Any, namespace: str
) -> None:
    events = _run(server, namespace, with_close=True)
    _check_takeover(events)


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
        go.wait(30)  # slow setup (load state, open connections...): until the revoke
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
            with election.campaign(timeout=30) as term:
                entered.append(term.lost.is_set())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    try:
        assert in_elected.wait(30)
        # Another session takes the row over while on_elected is still setting up.
        taker = fencing.Ownership(client, ELECTION_GROUP, "operator", 5.0, _allow_reserved=True)
        taker.claim("sched", generation=0)
        assert revoked.wait(30)  # on_elected still running (it waits for this)
    finally:
        go.set()
        t.join(30)
    taker.close()
    election.close()
    assert not errors
    assert events == ["elected:start", "revoked", "elected:end"], events
    assert seen_lost == [True] and entered == [True]


def test_check_does_not_confirm_a_term_that_was_resigned_while_it_ran(
    proxied: tuple[Proxy, Client],
) -> None:
    """Leadership.check: "Raises Fenced once ... the term was resigned"; ``lost`` is "set the
    moment the term ends here".

    A worker thread calls check(); its first reply is lost, so the library retries it. Meanwhile
    another thread resigns (a shutdown handler): ``lost`` is set and on_revoked runs (the
    release comes after it). The retried server check still finds the row held. Check()
    raises Fenced: the term ended here before check() returned."""
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
        rule.wait(30)
        t2 = threading.Thread(target=term.resign)
        t2.start()
        assert term.lost.wait(30)
        t1.join(30)
        t2.join(30)
    election.close()
    assert isinstance(result[0], fencing.Fenced), (
        f"check() returned {result[0]!r} after the term was resigned (lost was set)"
    )


def test_closing_the_election_from_on_revoked_does_not_stall_for_the_ttl(client: Client) -> None:
    """``election.close()`` (or ``leadership.resign()``) called from on_revoked returns at once:
    the term is already ending, in this very thread."""
    ttl = 30.0
    election = client.election("sched", "a", ttl=ttl, on_revoked=lambda term: election.close())
    started = time.monotonic()
    with election.campaign():
        started = time.monotonic()
    took = time.monotonic() - started
    # A stall waits for the ttl; a loaded machine takes far less than a third of it.
    assert took < ttl / 3, f"leaving the campaign block took {took:.2f}s"


def test_on_revoked_calling_sys_exit_still_releases_the_row(client: Client) -> None:
    """The row is released (waiters woken) whatever on_revoked does; a common on_revoked is
    ``sys.exit(1)`` ("stop this process when we stop leading")."""
    election = client.election("sched", "a", ttl=30.0, on_revoked=lambda term: sys.exit(1))
    with pytest.raises(SystemExit), election.campaign():
        pass
    info = client.election("sched", "observer", ttl=30.0).leader()
    assert info is None, f"the row is still held after the leader exited: {info}"

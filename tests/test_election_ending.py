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

import redis

import fencing
import fencing.aio
from fencing._keys import ELECTION_GROUP
from fencing._text import text


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

    async def on_elected(term: Any) -> None:
        events.append(f"elected {term.token}")
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
    await asyncio.wait_for(started.wait(), 5)
    closer = asyncio.ensure_future(election.close())
    await asyncio.sleep(0.3)
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
    await asyncio.sleep(0.5)
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

    def on_elected(term: Any) -> None:
        events.append(f"elected {term.token}")
        started.set()
        release_elected.wait(20)
        events.append("elected-returned")

    def on_revoked(term: Any) -> None:
        events.append(f"revoked {term.token}")

    election = client.election(
        "e", candidate_id="a", ttl=3.0, on_elected=on_elected, on_revoked=on_revoked
    )

    def campaign() -> None:
        try:
            with election.campaign():
                events.append("block entered")
        except Exception as exc:
            events.append(f"campaign raised {type(exc).__name__}")

    t = threading.Thread(target=campaign)
    t.start()
    assert started.wait(5)

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        election.close()  # a user's finally: election.close(), then Ctrl-C
        events.append("close returned")
    except KeyboardInterrupt:
        events.append("close interrupted")
    finally:
        signal.signal(signal.SIGALRM, old)
    stored = row(server.url, client, "e")
    release_elected.set()
    t.join(10)
    time.sleep(0.3)
    print(events, stored)
    client.close()
    n_el = sum(1 for e in events if e.startswith("elected "))
    n_rev = sum(1 for e in events if e.startswith("revoked "))
    assert n_el == n_rev == 1, f"on_elected {n_el}x, on_revoked {n_rev}x; row {stored}: {events}"


# -- close() from another thread while on_elected ignores lost: how long? ---------------


def test_a_voluntary_end_waits_for_on_elected_at_most_the_renew_deadline_and_check_after_on_revoked(
    server: Any, namespace: str
) -> None:
    client = fencing.Client.from_url(server.url, namespace=namespace)
    events: list[tuple[float, str]] = []
    started = threading.Event()
    t0 = time.monotonic()

    def log(s: str) -> None:
        events.append((round(time.monotonic() - t0, 2), s))

    def on_elected(term: Any) -> None:
        log("elected")
        started.set()
        time.sleep(4.0)  # ignores lost; renew_deadline is 1.0
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
    assert started.wait(5)
    term = None
    for _ in range(100):
        if election._terms:
            term = election._terms[0]
            break
        time.sleep(0.01)
    check_out: list[str] = []

    def checker() -> None:
        time.sleep(0.1)
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
    t.join(10)
    ct.join(10)
    client.close()
    print(events, campaign_out, took)
    order = [e for _, e in events]
    # check() must not return before on_revoked ran
    assert order.index("revoked") < next(i for i, e in enumerate(order) if e.startswith("check")), (
        events
    )
    assert took < 1.0 + 0.5, (
        f"close() waited {took:.2f}s for on_elected (renew_deadline 1.0): {events}"
    )


# -- a takeover while the term ends (or while on_elected runs) -----------------------------


def _run(server: Any, namespace: str, with_close: bool) -> list[tuple[float, str]]:
    client = fencing.Client.from_url(server.url, namespace=namespace)
    events: list[tuple[float, str]] = []
    lock = threading.Lock()
    started = threading.Event()
    t0 = time.monotonic()

    def log(s: str) -> None:
        with lock:
            events.append((round(time.monotonic() - t0, 2), s))

    def a_elected(term: Any) -> None:
        log(f"A elected {term.token}")
        started.set()
        time.sleep(3.0)  # long start-up work that does not look at lost
        log("A elected-returned")

    def a_revoked(term: Any) -> None:
        log(f"A revoked {term.token}")

    def b_elected(term: Any) -> None:
        log(f"B elected {term.token}")

    a = client.election(
        "e",
        candidate_id="a",
        ttl=3.0,
        renew_deadline=2.0,
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
    assert started.wait(5)

    def run_b() -> None:
        try:
            with b.campaign(timeout=8):
                time.sleep(0.5)
        except Exception as exc:
            log(f"B campaign {type(exc).__name__}")

    tb = threading.Thread(target=run_b)
    tb.start()
    time.sleep(0.3)
    if with_close:
        tc = threading.Thread(target=a.close)
        tc.start()
        time.sleep(0.3)
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
    ta.join(10)
    tb.join(10)
    if with_close:
        tc.join(10)
    a.close()
    b.close()
    client.close()
    return events


def _check_takeover(events: list[tuple[float, str]]) -> None:
    """A's on_revoked ran at once on the takeover (an involuntary loss), well before its
    on_elected returned, also while a close() waited for that on_elected. (An operator's
    forced release does not wait for the old leader: B may be elected in between.)"""
    def at(prefix: str) -> float:
        return next(ts for ts, e in events if e.startswith(prefix))

    assert any(e.startswith("A revoked") for _, e in events), events
    assert at("A revoked") - at("operator release done") < 0.5, events
    assert at("A revoked") < at("A elected-returned"), events
    assert sum(1 for _, e in events if e.startswith("A revoked")) == 1, events


def test_a_takeover_while_on_elected_runs_revokes_at_once(server: Any, namespace: str) -> None:
    events = _run(server, namespace, with_close=False)
    _check_takeover(events)


def test_a_takeover_while_close_waits_for_on_elected_revokes_at_once(
    server: Any, namespace: str
) -> None:
    events = _run(server, namespace, with_close=True)
    _check_takeover(events)

"""What a claim that fails leaves behind (lost replies, interrupts, races with other
claimers): never a grant the caller does not know of, never "the holder severed and nobody
holds it" by a call that raised, and StaleGeneration's granted/refused as Redis holds them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import pytest
import redis

import fencing
import fencing.aio
from fencing._text import text
from fencing.faults import Proxy

from ..support.polling import wait_until_async
from ..support.wire import CLAIM


def row(raw: redis.Redis, client: Any, group: str, resource: str) -> dict[str, str]:
    data = raw.hgetall(client.keys.ownership(group, resource))
    return {text(k): text(v) for k, v in data.items()}


def ordered(owner: Any, names: list[str]) -> list[str]:
    return [t.resource for t in owner._ordered(names)]


def warm(client: Any) -> None:
    o = client.ownership("warm", "w", ttl=5)
    o.claim("w")
    o.close()


# -- a None claim whose first reply was lost (retried: "kept", new=False) ---------------


def test_a_claim_without_generation_refused_after_a_lost_reply_holds_none(
    server: Any, pclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """Contract: a claim with None that is refused gives back what it newly took, so it
    holds none of them. A lost reply on the first resource is retried by the driver, the
    retry answers "kept" (new=False), so the undo skips it."""
    warm(pclient)
    h = pclient.ownership("g", "h", ttl=10)
    first, second = ordered(h, ["ra", "rb"])
    other = client.ownership("g", "other", ttl=10)
    other.claim(second)
    with proxy.drop_replies(CLAIM, count=1) as lost, pytest.raises(fencing.OwnershipConflict):
        h.claim([first, second])
    assert lost.hits == 1
    stored = row(raw, pclient, "g", first)
    try:
        assert h.grants == {}, f"handle still holds {h.grants}"
        assert stored.get("session") != h.session, (
            f"{first!r} is held in Redis by the refused claim's session: {stored}"
        )
    finally:
        other.close()
        h.close()


# -- "held before" includes a grant already known superseded -----------------------------


async def _superseded_then_cancelled(url: str, purl: str, ns: str, proxy: Proxy) -> dict:
    client = fencing.aio.Client.from_url(url, namespace=ns)
    pclient = fencing.aio.Client.from_url(purl, namespace=ns)
    try:
        w = pclient.ownership("warm", "w", ttl=5)
        await w.claim("w")
        await w.close()
        h = pclient.ownership("g", "h", ttl=10)
        await h.claim("r")  # token 1
        s2 = client.ownership("g", "s2", ttl=10)
        await s2.claim("r", generation=0)  # severs h: token 2
        await wait_until_async(h.severed.is_set, what="h told it was severed")
        with proxy.drop_replies(CLAIM, count=None, close=False) as lost:
            task = asyncio.ensure_future(h.claim("r", generation=0))
            await wait_until_async(lambda: lost.hits >= 1, what="the claim reached the server")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        raw = redis.Redis.from_url(url)
        stored = {text(k): text(v) for k, v in raw.hgetall(client.keys.ownership("g", "r")).items()}
        raw.close()
        s2_fenced = False
        try:
            await s2.check("r")
        except fencing.Fenced:
            s2_fenced = True
        h_state = "held"
        try:
            await h.check("r")
        except fencing.FencingError as exc:
            h_state = type(exc).__name__
        return {
            "stored": stored,
            "h_session": h.session,
            "s2_fenced": s2_fenced,
            "h_state": h_state,
            "h_grants": h.grants,
        }
    finally:
        await client.close()
        await pclient.close()


def test_an_interrupted_claim_over_a_superseded_grant_is_given_back(
    server: Any, proxy: Proxy, namespace: str
) -> None:
    """h held r, was severed (notified), re-claims r with generation 0, the claim lands and
    the task is cancelled. r was 'held before' by _grants only (a superseded grant), so the
    unknown-outcome claim is not given back: the row is h's session in Redis while h's
    check() says Fenced, and s2 was severed."""
    out = asyncio.run(
        _superseded_then_cancelled(server.url, proxy.url_for(server.url), namespace, proxy)
    )
    stored = out["stored"]
    orphan = stored.get("session") == out["h_session"] and out["h_state"] != "held"
    assert not orphan, (
        f"row held by h's session (token {stored.get('token')}) but h says {out['h_state']}, "
        f"s2 fenced={out['s2_fenced']}: nobody holds r usably: {out}"
    )


# -- generation race: granted/refused vs grants vs Redis ---------------------------------


def test_a_generation_race_reports_granted_and_refused_as_redis_holds_them(
    server: Any, client: fencing.Client, raw: redis.Redis, proxy: Proxy
) -> None:

    names = [f"x{i}" for i in range(4)]
    violations: list[str] = []
    raced = 0
    runs = 60
    for run in range(runs):
        group = f"race{run}"
        h = client.ownership(group, "h", ttl=10)
        order = ordered(h, names)
        holders = []
        for n in order:
            o = client.ownership(group, "hold-" + n, ttl=10)
            o.claim(n, generation=3)
            holders.append(o)
        bump = order[1 + run % 3]
        spoiler = client.ownership(group, "spoiler", ttl=10)
        first_key = client.keys.ownership(group, order[0])
        go = threading.Event()

        def race(
            go: threading.Event = go,
            first_key: str = first_key,
            spoiler: Any = spoiler,
            bump: str = bump,
        ) -> None:
            r2 = redis.Redis.from_url(server.url)
            go.wait()
            # spin until h took the first resource, then bump a later one
            end = time.monotonic() + 2
            while time.monotonic() < end:
                if r2.hget(first_key, "label") == b"h":
                    break
            with contextlib.suppress(fencing.FencingError):
                spoiler.claim(bump, generation=7)
            r2.close()

        t = threading.Thread(target=race)
        t.start()
        go.set()
        try:
            h.claim(order, generation=5)
            exc = None
        except fencing.StaleGeneration as e:
            exc = e
        t.join()
        if exc is not None:
            if exc.granted:
                raced += 1
            for n, g in exc.granted.items():
                st = row(raw, client, group, n)
                if st.get("session") != h.session or int(st["token"]) != g.token:
                    violations.append(f"run {run}: granted {n} but Redis {st}")
                if h.grants.get(n) != g and h.grants.get(n, None) is None:
                    violations.append(f"run {run}: granted {n} not in grants {h.grants}")
            for n in exc.refused:
                st = row(raw, client, group, n)
                if st.get("session") == h.session:
                    violations.append(f"run {run}: refused {n} held by h in Redis")
            for n in order:
                st = row(raw, client, group, n)
                if n not in exc.granted and st.get("session") == h.session:
                    violations.append(f"run {run}: {n} not granted but held by h: {st}")
                untouched = n not in exc.granted and n not in exc.refused and n != bump
                if untouched and st.get("label") != "hold-" + n:
                    violations.append(f"run {run}: {n} in neither map changed: {st}")
            if set(h.grants) != set(exc.granted):
                violations.append(
                    f"run {run}: grants {set(h.grants)} != granted {set(exc.granted)}"
                )
        else:
            for n in order:
                st = row(raw, client, group, n)
                if st.get("session") != h.session and not (
                    n == bump and st.get("label") == "spoiler"
                ):
                    violations.append(f"run {run}: success but {n} is {st}")
        # nobody-holds check
        for n in order:
            st = row(raw, client, group, n)
            if not st.get("session"):
                violations.append(f"run {run}: {n} held by nobody: {st}")
        for o in [*holders, spoiler, h]:
            o.close()
    print(f"raced (granted non-empty) {raced}/{runs}")
    assert not violations, violations[:10]

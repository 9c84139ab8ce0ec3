"""Ownership, written once, run for sync and asyncio: claims, waits, releases, stale and
unknown outcomes.

Also run on a cluster, as an ACL user and over TLS (``tests/cluster``, ``tests/secure``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
import redis.cluster

import fencing
from fencing._text import text
from fencing.faults import Proxy

from ..conftest import ServerInfo
from ..support.flavours import Api
from ..support.wire import CLAIM


def _row(api: Api, client: Any, group: str, resource: str) -> dict[str, str]:
    """An ownership row as stored, read straight from the server (a cluster too)."""
    scheme, rest = api.url.split("://", 1)
    raw: Any = (
        redis.cluster.RedisCluster.from_url(f"{scheme.replace('+cluster', '')}://{rest}")
        if scheme.endswith("+cluster")
        else redis.Redis.from_url(api.url)
    )
    try:
        data = raw.hgetall(client.keys.ownership(group, resource))
    finally:
        raw.close()
    return {text(k): text(v) for k, v in data.items()}


async def test_claim_conflict_wait_and_release_wakes_the_waiter(api: Api) -> None:
    client = api.client()
    a = client.ownership("jobs", "a", ttl=30)
    b = client.ownership("jobs", "b", ttl=30)
    grant = (await a.claim(["r/0"]))["r/0"]
    assert (grant.generation, grant.token, grant.new) == (1, 1, True)
    with pytest.raises(fencing.OwnershipConflict) as err:
        await b.claim("r/0")
    assert err.value.holder_label == "a"
    waiter = asyncio.ensure_future(b.claim("r/0", wait=True, timeout=10))
    await asyncio.sleep(0.2)
    started = time.monotonic()
    assert await a.release() == {"r/0": True}
    taken = (await asyncio.wait_for(waiter, 10))["r/0"]
    assert time.monotonic() - started < 10.0  # woken by the release, not by the 30 s lease
    assert (taken.generation, taken.token) == (2, 2)
    with pytest.raises(fencing.InvalidArgument):  # released: nothing left to check
        await a.check("r/0")
    await a.close()
    await b.close()


async def test_a_claim_refused_as_stale_severs_no_holder(api: Api) -> None:
    client = api.client()
    x = client.ownership("jobs", "x", ttl=5)
    y = client.ownership("jobs", "y", ttl=5)
    await x.claim("ra", generation=3)  # "ra" comes before "rb" in hash-slot order
    await y.claim("rb", generation=10)
    z = client.ownership("jobs", "z", ttl=5)
    with pytest.raises(fencing.StaleGeneration) as err:
        await z.claim(["ra", "rb"], generation=5)
    ra = _row(api, client, "jobs", "ra")
    assert (ra["session"], ra["label"], ra["gen"], ra["token"]) == (x.session, "x", "3", "1")
    assert (err.value.resource, err.value.current, err.value.requested) == ("rb", 10, 5)
    assert (err.value.granted, err.value.refused) == ({}, {"rb": err.value})
    assert z.grants == {}
    rb = _row(api, client, "jobs", "rb")
    assert (rb["session"], rb["label"], rb["gen"], rb["token"]) == (y.session, "y", "10", "1")
    checked = await x.check("ra")
    assert (checked.generation, checked.token) == (3, 1)
    for owner in (x, y, z):
        await owner.close()


async def test_a_reclaim_whose_outcome_is_unknown_keeps_the_grant_held_before(
    api: Api, server: ServerInfo, proxy: Proxy
) -> None:
    client = api.client(url=proxy.url_for(server.url))
    owner = client.ownership("jobs", "a", ttl=3)
    grant = (await owner.claim("r"))["r"]
    lost = proxy.drop_replies(CLAIM, count=None, close=False)
    with lost, pytest.raises(fencing.OutcomeUnknown):
        await owner.claim("r")
    assert lost.hits >= 1
    stored = _row(api, client, "jobs", "r")
    assert (stored["session"], stored["label"], stored["gen"], stored["token"]) == (
        owner.session,
        "a",
        "1",
        "1",
    )
    assert owner.grants == {"r": grant}
    checked = await owner.check("r")
    assert (checked.generation, checked.token) == (1, 1)
    assert await owner.release() == {"r": True}
    await owner.close()

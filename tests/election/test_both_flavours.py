"""Elections, written once, run for sync and asyncio: terms, callbacks, resign, observe().

Also run on a cluster, as an ACL user and over TLS (``tests/cluster``, ``tests/secure``).
"""

from __future__ import annotations

import asyncio

import pytest

import fencing

from ..support.flavours import Api
from ..support.polling import wait_until_async, wait_until_equal_async


async def test_election_terms_grow_callbacks_run_once_and_resign_wakes(api: Api) -> None:
    client = api.client()
    events: list[str] = []
    e1 = client.election(
        "sched",
        "one",
        ttl=2.0,
        on_elected=lambda t: events.append(f"elected {t.token}"),
        on_revoked=lambda t: events.append(f"revoked {t.token}"),
    )
    e2 = client.election("sched", "two", ttl=2.0)
    assert await e1.leader() is None
    terms: list[object] = []
    elected, leave = asyncio.Event(), asyncio.Event()

    async def second() -> None:
        async with e2.campaign(timeout=10) as term2:
            terms.append(term2)
            elected.set()
            await leave.wait()

    async with e1.campaign() as term:
        assert term.token == 1
        info = await e1.leader()
        assert (info.label, info.token) == ("one", 1)
        task = asyncio.ensure_future(second())
        await wait_until_equal_async(e2.candidates, 1, what="two waiting as a candidate")
        assert not elected.is_set()
    assert term.lost.is_set()
    await asyncio.wait_for(elected.wait(), 10)
    term2 = terms[0]
    assert term2.token == 2
    with pytest.raises(fencing.Fenced):
        await term.check()
    assert (await term2.check()).token == 2
    leave.set()
    await task
    assert term2.lost.is_set()
    assert events == ["elected 1", "revoked 1"]
    await e1.close()
    await e2.close()


async def test_observe_reports_each_leader_change(api: Api) -> None:
    client = api.client()
    watcher = client.election("obs", "watcher", ttl=2.0)
    seen: list[object] = []

    async def watch() -> None:
        async for info in watcher.observe(timeout=3):
            seen.append(None if info is None else info.token)
            if len(seen) == 3:
                return

    task = asyncio.ensure_future(watch())
    await wait_until_async(lambda: seen == [None], what="the watcher saw no leader")
    leader = client.election("obs", "leader", ttl=2.0)
    async with leader.campaign():
        await wait_until_async(lambda: len(seen) == 2, what="the watcher saw the leader")
    await asyncio.wait_for(task, 10)
    assert seen == [None, 1, None]
    await watcher.close()
    await leader.close()

"""Election callbacks, written once, run for sync and asyncio: when ``on_elected`` and
``on_revoked`` run relative to each other and to a successor's term, whatever ends the term
(cut off from Redis, ``close()`` from another thread or task, ``close()`` from inside a
callback)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

import fencing
from fencing.faults import Proxy

from ..support.flavours import Api
from ..support.polling import wait_until, wait_until_async

#: Repetitions of the timing scenarios in one run (more in a soak).
ROUNDS = 3
SOAK_ROUNDS = 25


class Timeline:
    """What happened when (time.monotonic()), from any thread or task."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[tuple[str, float]] = []

    def note(self, what: str) -> None:
        with self._lock:
            self.events.append((what, time.monotonic()))

    def at(self, what: str) -> float:
        times = [t for name, t in self.events if name == what]
        assert len(times) == 1, (what, self.events)
        return times[0]

    def count(self, what: str) -> int:
        return sum(1 for name, _ in self.events if name == what)


#: The longest an on_elected of these tests works: far past any deadline or wait they race.
WORK_AT_MOST = 30.0

#: What ends an on_elected's work (given its term and the timeline): the event the test
#: races it against.
Until = Callable[[Any, Timeline], bool]


def slow_callback(api: Api, timeline: Timeline, name: str, until: Until) -> Callable[..., Any]:
    """An on_elected of the test's flavour that notes its start and end and works in between
    without looking at ``lost`` (start-up work) until ``until(term, timeline)`` holds, at most
    :data:`WORK_AT_MOST` seconds: it outlasts whatever the test waits for, however busy the
    machine, and returns soon after."""
    if api.is_async:

        async def work(term: Any) -> None:
            timeline.note(f"{name} elected")
            with contextlib.suppress(AssertionError):
                await wait_until_async(lambda: until(term, timeline), WORK_AT_MOST, interval=0.005)
            timeline.note(f"{name} elected returned")

        return work

    def work_sync(term: Any) -> None:
        timeline.note(f"{name} elected")
        with contextlib.suppress(AssertionError):
            wait_until(lambda: until(term, timeline), WORK_AT_MOST, interval=0.005)
        timeline.note(f"{name} elected returned")

    return work_sync


class Scenario(NamedTuple):
    """A leads (its on_elected still working), B is a candidate of the same election."""

    timeline: Timeline
    a: Any
    b: Any
    entered: list[Any]  # the terms A's campaign block was entered with
    leading: asyncio.Future[None]  # A's campaign block


async def a_leads(
    api: Api, a_client: Any, b_client: Any, name: str, *, ttl: float, work: Until, **a_options: Any
) -> Scenario:
    """Elect A (whose on_elected notes its start, works until ``work(term, timeline)``,
    notes its end) and make B; return once A's on_elected started."""
    timeline = Timeline()
    a = a_client.election(
        name,
        "a",
        ttl=ttl,
        **a_options,
        on_elected=slow_callback(api, timeline, "a", work),
        on_revoked=lambda term: timeline.note("a revoked"),
    )
    b = b_client.election(name, "b", ttl=ttl, on_elected=lambda term: timeline.note("b elected"))
    entered: list[Any] = []

    async def lead_a() -> None:
        async with a.campaign() as term:
            entered.append(term)

    leading = asyncio.ensure_future(lead_a())
    await wait_until_async(lambda: timeline.count("a elected") == 1, interval=0.005)
    return Scenario(timeline, a, b, entered, leading)


async def cut_off_during_on_elected(api: Api, proxy: Proxy, round_: int) -> None:
    cut_client = api.client(proxy.url_for(api.url))
    timeline, a, b, entered, leading = await a_leads(
        api,
        cut_client,
        api.client(),
        f"sched{round_}",
        ttl=1.0,
        renew_deadline=0.6,
        work=lambda term, timeline: timeline.count("a revoked") > 0,
    )
    proxy.drop_requests(b"*", count=None, close=False)  # a black hole between A and Redis
    try:
        async with b.campaign(timeout=10) as term_b:
            assert term_b.token == 2
            await asyncio.wait_for(leading, 10)
    finally:
        proxy.clear()
        proxy.sever()
    # A's term ended by its deadline while its on_elected still ran: on_revoked came first,
    # before the lease could lapse, so before B was elected; A's block saw lost set.
    assert timeline.at("a revoked") < timeline.at("b elected")
    assert timeline.at("a revoked") < timeline.at("a elected returned")
    assert len(entered) == 1
    assert entered[0].lost.is_set()
    assert isinstance(entered[0].reason, fencing.LeaseExpired)
    assert timeline.count("a revoked") == 1
    await a.close()
    await b.close()


@pytest.mark.one_server
async def test_a_leader_cut_off_while_on_elected_runs_is_revoked_before_a_successor_leads(
    api: Api, proxy: Proxy
) -> None:
    for round_ in range(ROUNDS):
        await cut_off_during_on_elected(api, proxy, round_)


@pytest.mark.soak
async def test_a_leader_cut_off_while_on_elected_runs_is_revoked_before_a_successor_leads_soak(
    api: Api, proxy: Proxy
) -> None:
    for round_ in range(SOAK_ROUNDS):
        await cut_off_during_on_elected(api, proxy, round_)


async def close_during_on_elected(api: Api, round_: int) -> None:
    client = api.client()
    # on_elected works until close() began (it sets lost first); close() may wait for it up
    # to the renew deadline (20 s).
    timeline, a, b, entered, leading = await a_leads(
        api, client, client, f"sched{round_}", ttl=30.0, work=lambda term, _: term.lost.is_set()
    )

    async def lead_b() -> None:
        async with b.campaign(timeout=10):
            pass

    succeeding = asyncio.ensure_future(lead_b())
    await a.close()  # from another thread (sync) or task (asyncio)
    with pytest.raises(fencing.InvalidArgument, match="closed"):
        await asyncio.wait_for(leading, 10)  # the block is never entered
    await asyncio.wait_for(succeeding, 10)
    # The voluntary end waited for on_elected, ran on_revoked, and only then released the
    # row: B was elected after both.
    assert entered == []
    assert timeline.at("a elected returned") < timeline.at("a revoked")
    assert timeline.at("a revoked") < timeline.at("b elected")
    await b.close()


@pytest.mark.one_server
async def test_close_during_on_elected_ends_the_term_only_after_it_returned(api: Api) -> None:
    for round_ in range(ROUNDS):
        await close_during_on_elected(api, round_)


async def test_close_from_inside_on_elected_does_not_wait_for_itself(api: Api) -> None:
    timeline = Timeline()
    client = api.client()
    holder: list[Any] = []

    if api.is_async:

        async def elected(term: Any) -> None:
            timeline.note("elected")
            await holder[0].close()
            timeline.note("closed inside")

    else:

        def elected(term: Any) -> None:
            timeline.note("elected")
            holder[0].close()
            timeline.note("closed inside")

    ttl = 30.0
    election = client.election(
        "inside", "a", ttl=ttl, on_elected=elected, on_revoked=lambda t: timeline.note("revoked")
    )
    holder.append(election if api.is_async else election._obj)
    with pytest.raises(fencing.InvalidArgument, match="closed"):
        async with election.campaign(timeout=5):
            pass
    assert [name for name, _ in timeline.events] == ["elected", "revoked", "closed inside"]
    # The row was released: another candidate is elected at once, not after the lease.
    other = client.election("inside", "b", ttl=ttl)
    started = time.monotonic()
    async with other.campaign(timeout=ttl / 2) as term:
        assert term.token == 2
    # (Far below the lease a row left held would take, with room for a busy machine.)
    assert time.monotonic() - started < ttl / 3
    await other.close()

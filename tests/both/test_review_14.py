"""Review of issue 14 (the asyncio flavour): holes found by a Jepsen-style pass.

Each test states the hole it reproduces. Cancellation tests run under asyncio only (a
thread cannot be cancelled at an await); the others run for both flavours.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

import fencing
from fencing import AccessMode, ProducerBusy
from fencing._keys import slot_of

from ..support.flavours import Api


async def _until(predicate: Any, timeout: float = 5.0) -> None:
    """Spin the loop (one turn at a time) until ``predicate()`` holds."""
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition never held"
        await asyncio.sleep(0)


def _keeper_tasks(client: Any) -> int:
    keeper = client._keeper
    if hasattr(keeper, "_tasks"):  # asyncio: one task per schedule
        return sum(1 for t in keeper._tasks if not t.cancelled)
    return sum(1 for _, _, t in keeper._heap if not t.cancelled)  # sync: a heap


# -- consumer.poll: a cancelled poll must not swallow records it already read -------------------


async def test_cancelled_poll_over_two_partitions_skips_no_record(aio_api: Api) -> None:
    """Hole: ``Consumer._fetch`` reads the partitions one after the other and each read
    moves that reader's position. A poll cancelled while it reads partition 1 has moved
    partition 0 past records it never returned: the next poll (and a default commit)
    skips them for good."""
    client = aio_api.client()
    topic = client.topic("t", partitions=2)
    async with await topic.producer() as producer:
        for p in (0, 1):
            await producer.send_batch([b"a", b"b", b"c"], partition=p)
    async with await topic.consumer("g", "m", partitions=[0, 1], start="earliest") as consumer:
        task = asyncio.ensure_future(consumer.poll(max_records=100))
        # Partition 0 is read first; its position moves as soon as its records are in,
        # while the task already waits on partition 1's read.
        await _until(lambda: consumer.position(0) == 3 or task.done())
        assert not task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        seen = [(r.partition, r.offset) for r in await consumer.poll(max_records=100)]
        assert sorted(seen) == [(p, o) for p in (0, 1) for o in range(3)], (
            f"records read by the cancelled poll were never returned: {seen}"
        )


async def test_cancelled_blocking_poll_skips_no_record(aio_api: Api) -> None:
    """Hole: a blocking poll moves the reader past the records that arrived, then checks
    the grant (``Consumer._after_block``); cancelled during that check it puts the position
    back only for a FencingError, so the records are skipped."""
    client = aio_api.client()
    topic = client.topic("t", partitions=1)
    await topic.open()
    async with await topic.consumer("g", "m", partitions=[0], start="earliest") as consumer:
        task = asyncio.ensure_future(consumer.poll(max_records=100, block_ms=5000))
        await asyncio.sleep(0.2)  # the poll now blocks on the empty partition
        async with await topic.producer() as producer:
            await producer.send_batch([b"a", b"b"], partition=0)
        await _until(lambda: consumer.position(0) == 2 or task.done())
        assert not task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        seen = [r.offset for r in await consumer.poll(max_records=100)]
        assert seen == [0, 1], f"records read by the cancelled poll were never returned: {seen}"


# -- election: a cancelled campaign must leave no term behind -----------------------------------


async def test_campaign_cancelled_after_its_grant_leaves_no_term_renewing(aio_api: Api) -> None:
    """Hole: ``Election._try_win`` starts the term (renewal and deadline tasks, listed in
    ``_terms``) and then awaits ``_publish_change``; a cancellation there propagates out of
    ``campaign()`` without resigning. The caller never got a Leadership, yet the term keeps
    renewing its lease for ever: every other candidate is locked out until close()."""
    client = aio_api.client()
    election = client.election("e", "a", ttl=1.0)
    entered = asyncio.Event()
    real_publish = election._publish_change

    async def slow_publish(message: str) -> None:
        entered.set()
        await asyncio.sleep(0.5)  # one round trip, stretched so the test can aim at it
        await real_publish(message)

    election._publish_change = slow_publish

    async def lead() -> None:
        async with election.campaign(timeout=5):
            await asyncio.sleep(30)

    task = asyncio.ensure_future(lead())
    await asyncio.wait_for(entered.wait(), 5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await asyncio.sleep(1.5)  # longer than the ttl: an unrenewed lease has lapsed
    other = aio_api.client().election("e", "b", ttl=1.0)
    leader = await other.leader()
    try:
        assert leader is None, f"a cancelled campaign still holds the lease: {leader}"
        assert not election._terms, "a cancelled campaign left a term running"
    finally:
        await election.close()


async def test_campaign_cancelled_while_deregistering_leaves_no_lease(aio_api: Api) -> None:
    """Hole: once the claim is granted, ``Election._try_win`` deregisters the candidate in a
    ``finally``; a cancellation there skips the ``except`` that closes the owner, so the
    grant stays held (by nobody) until its lease lapses, and other candidates wait a ttl."""
    client = aio_api.client()
    election = client.election("e", "a", ttl=3.0)
    deregistering = asyncio.Event()
    real_register = election._register

    async def slow_register(session: str, ttl_ms: int) -> None:
        if ttl_ms == 0:
            deregistering.set()
            await asyncio.sleep(0.5)
        await real_register(session, ttl_ms)

    election._register = slow_register

    async def lead() -> None:
        async with election.campaign(timeout=5):
            await asyncio.sleep(30)

    task = asyncio.ensure_future(lead())
    await asyncio.wait_for(deregistering.wait(), 5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    other = aio_api.client().election("e", "b", ttl=3.0)
    try:
        # Well below the ttl: the cancelled campaign gave its grant back at once.
        async with other.campaign(timeout=1.0) as term:
            assert term.token >= 2
    finally:
        await election.close()


# -- client.close(): nothing of the client may go on running ------------------------------------


async def test_client_close_stops_a_held_terms_renewals(api: Api) -> None:
    """Hole: the election's renewal and deadline runners are spawned outside the keeper, and
    ``Client.close`` does not end them: after close() the term goes on renewing its lease
    (through a fresh driver the closed client makes on demand), so the leadership outlives
    the client and no other process can be elected."""
    client = api.client()
    election = client.election("e", "a", ttl=1.0)
    campaign = election.campaign(timeout=5)
    term = await campaign.__aenter__()
    try:
        await client.close()
        await asyncio.sleep(2.0)  # two ttls
        other = api.client().election("e", "b", ttl=1.0)
        leader = await other.leader()
        assert leader is None, f"the closed client's term is still renewed: {leader}"
        assert term.lost.is_set(), "the term of a closed client still reads as held"
    finally:
        with contextlib.suppress(Exception):
            await campaign.__aexit__(None, None, None)


# -- producer.open: a failed open leaves no renewal behind --------------------------------------


async def test_failed_shared_open_leaves_no_renewal_task(api: Api) -> None:
    """Hole: ``Producer.open`` schedules the renewal after the first partition, and on a
    failure releases the partitions but never cancels it. For SHARED the renewal of a
    producer that is not registered returns 0 (not fenced), so the task runs every ttl/3
    for the life of the client: a service retrying ``topic.producer()`` against a live
    exclusive holder piles up one task (and one round trip per partition) per attempt."""
    client = api.client()
    topic = client.topic("t", partitions=2)
    await topic.open()
    holder_client = api.client()
    holder_topic = holder_client.topic("t")
    await holder_topic.open()
    holder = await holder_topic.producer(AccessMode.EXCLUSIVE, lease_ttl=30.0)
    # The partition a producer takes first (ascending slot) is free again; the other one
    # is still held exclusively, so a SHARED open gets the first and is refused the second.
    first = min((holder_topic.partition_keys(p) for p in (0, 1)), key=lambda k: slot_of(k.owner))
    await holder._leave(first, "x", holder.epoch(first.partition))
    try:
        before = _keeper_tasks(client)
        for _ in range(3):
            with pytest.raises(ProducerBusy):
                await topic.producer(AccessMode.SHARED, lease_ttl=0.3)
        await asyncio.sleep(0.5)  # a few renewal turns
        assert _keeper_tasks(client) == before, "failed opens left renewal tasks running"
    finally:
        await holder.close()


# -- close(): a cancelled close must not make the next close a no-op ----------------------------


async def test_close_cancelled_midway_can_be_retried_and_frees_the_partitions(aio_api: Api) -> None:
    """Hole: ``Producer.close`` sets ``_closed`` before it leaves the partitions, and
    ``close`` returns at once when ``_closed`` is set. A close cancelled mid-way (a shutdown
    under ``asyncio.timeout``, a TaskGroup torn down) leaves partitions held, and calling
    close() again does nothing: the exclusive lease blocks everyone until it lapses."""
    client = aio_api.client()
    topic = client.topic("t", partitions=4)
    await topic.open()
    for turns in range(1, 6):
        producer = await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=10.0)
        closing = asyncio.ensure_future(producer.close())
        for _ in range(turns):
            await asyncio.sleep(0)
        closing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await closing
        await producer.close()  # the retry every caller would make
        try:
            other = await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=10.0)
        except ProducerBusy as exc:
            raise AssertionError(
                f"close cancelled after {turns} turns, then closed again: still held ({exc})"
            ) from exc
        await other.close()


async def test_release_cancelled_midway_can_be_retried(aio_api: Api) -> None:
    """Hole: ``Ownership.release`` pops each grant before its release call; a release (or
    close) cancelled during that call forgets the grant, so a second release/close gives
    nothing back and the resource stays held until the lease lapses."""
    client = aio_api.client()
    for turns in range(1, 6):
        owner = client.ownership("g", "a", ttl=10.0)
        await owner.claim(["r0", "r1", "r2", "r3"])
        releasing = asyncio.ensure_future(owner.close())
        for _ in range(turns):
            await asyncio.sleep(0)
        releasing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await releasing
        with contextlib.suppress(fencing.InvalidArgument):
            await owner.close()
        check = client.ownership("g", "b", ttl=10.0)
        try:
            await check.claim(["r0", "r1", "r2", "r3"])
        except fencing.OwnershipConflict as exc:
            raise AssertionError(
                f"close cancelled after {turns} turns, then closed again: still held ({exc})"
            ) from exc
        await check.close()


# -- the notifier: a channel subscribed again right after its last subscriber left ---------------


async def test_resubscribing_a_channel_its_last_subscriber_just_left_is_confirmed_at_once(
    aio_api: Api,
) -> None:
    """Hole (latency): ``Notifier._remove`` drops the channel's confirmation event and kicks a
    sync; a new subscriber of the same channel before that sync ran gets a fresh event, the
    sync finds the channel wanted and still subscribed (nothing to send), so no
    confirmation ever comes and ``async with notifier.subscribe(ch)`` waits its full
    ``_CONFIRM_SECONDS`` (2 s). Any waiter that subscribes right after another one left
    (same client, same resource) stalls 2 s before it looks again."""
    client = aio_api.client()
    notifier = client._notifications
    async with notifier.subscribe("review-14"):
        pass
    started = time.monotonic()
    async with notifier.subscribe("review-14"):
        took = time.monotonic() - started
    assert took < 0.5, f"subscribing again took {took:.2f}s (the confirmation never came)"


async def test_second_waiting_claim_on_a_resource_is_woken_promptly(api: Api) -> None:
    """Guard (passes): a waiting claim that follows another, timed-out waiter of the same
    resource on the same client is woken by the release, not by its polling."""
    client = api.client()
    holder = client.ownership("g", "holder", ttl=10.0)
    await holder.claim("r")
    first = client.ownership("g", "first", ttl=10.0)
    with pytest.raises(fencing.OwnershipConflict):
        await first.claim("r", wait=True, timeout=0.3)
    second = client.ownership("g", "second", ttl=10.0)
    started = time.monotonic()
    claim = asyncio.ensure_future(second.claim("r", wait=True, timeout=5))
    await asyncio.sleep(0.1)
    await holder.release()
    await claim
    took = time.monotonic() - started
    await second.close()
    assert took < 1.0, f"a waiting claim took {took:.2f}s to see a release 0.1s in"

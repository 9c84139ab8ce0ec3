"""Cancellation (asyncio only): tasks cancelled at random points during sends, opens and
claims. A cancelled send either happened or did not, and the producer settles which before
its next send on that partition; the whole log keeps G1, G2, G5 and G6 (checked by
:func:`fencing.verify.verify_log`); no lease is left held."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random

import pytest

import fencing
from fencing import AccessMode, ProducerBusy
from fencing.verify import Attempt, verify_log

from ..support.flavours import Api
from ..support.polling import wait_until_async

SEED = int(os.environ.get("CANCEL_SEED", "0")) or random.randrange(1 << 30)


async def cancel_soon(task: asyncio.Future[object], rng: random.Random) -> None:
    """Cancel ``task`` after 0 to 15 turns of the loop: every await point gets its turn."""
    await cancel_after(task, rng.randint(0, 15))


async def cancel_after(task: asyncio.Future[object], turns: int) -> None:
    """Cancel ``task`` after ``turns`` turns of the loop."""
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()


async def test_cancelled_sends_land_once_or_never_and_the_log_holds(aio_api: Api) -> None:
    rng = random.Random(SEED)
    client = aio_api.client()
    topic = client.topic("t", partitions=2)
    attempts: list[Attempt] = []
    cancelled = 0
    async with topic.producer(AccessMode.EXCLUSIVE, lease_ttl=2.0) as producer:
        for i in range(200):
            value, partition = f"v{i}".encode(), i % 2
            task = asyncio.ensure_future(producer.send(value, partition=partition))
            if rng.random() < 0.7:
                await cancel_soon(task, rng)
            try:
                md = await task
            except asyncio.CancelledError:
                cancelled += 1
                attempts.append(Attempt(value, partition, "unknown"))
            else:
                attempts.append(Attempt(value, partition, "acked", md.offset, md.epoch))
        # The next send on each partition settles what a cancelled one left pending.
        for partition in (0, 1):
            value = f"last-{partition}".encode()
            md = await producer.send(value, partition=partition)
            attempts.append(Attempt(value, partition, "acked", md.offset, md.epoch))
            assert producer._queues[partition].standing.pending is None
    assert cancelled > 20, f"seed {SEED}: too few cancellations to mean anything"
    with fencing.Client.from_url(aio_api.url, namespace=aio_api.namespace) as checker:
        report = verify_log(checker, "t", attempts=attempts)
    assert report.ok, f"seed {SEED}: {report.summary()}"


async def test_cancelled_waiting_opens_and_claims_leave_nothing_held(aio_api: Api) -> None:
    """A waiting open or claim cancelled at any await point (every turn of the loop from 0
    to 15, then random ones) ends in CancelledError: the holders live throughout, so none
    may wait on and return later. Nothing is left queued or held."""
    rng = random.Random(SEED)
    client = aio_api.client()
    topic = client.topic("t", partitions=2)
    holder = await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=5.0)
    owner = client.ownership("g", "holder", ttl=30.0)
    await owner.claim("busy")
    for i in range(32):
        turns = i if i < 16 else rng.randint(0, 15)
        await owner.renew()  # (a claim may only end cancelled, never granted)
        waiter = asyncio.ensure_future(
            topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, lease_ttl=5.0, wait_timeout=5)
        )
        await cancel_after(waiter, turns)
        with pytest.raises(asyncio.CancelledError):
            await waiter  # never opened: the holder lives
        claimer = client.ownership("g", f"w{i}", ttl=5.0)
        claim = asyncio.ensure_future(claimer.claim("busy", wait=True, timeout=5))
        await cancel_after(claim, turns)
        with pytest.raises(asyncio.CancelledError):
            await claim
        await claimer.close()
    await holder.close()
    await owner.close()
    # Nothing left queued or held by a cancelled waiter: exclusive at once, claimed at once.
    async with topic.producer(AccessMode.EXCLUSIVE, lease_ttl=5.0) as alone:
        assert (await alone.send(b"x", partition=0)).offset == 0
    check = client.ownership("g", "check", ttl=5.0)
    assert (await check.claim("busy"))["busy"].generation >= 1
    await check.close()


async def test_cancelled_free_claims_are_given_back_unless_they_returned(aio_api: Api) -> None:
    rng = random.Random(SEED)
    client = aio_api.client()
    for i in range(40):
        owner = client.ownership("free", f"o{i}", ttl=5.0)
        claim = asyncio.ensure_future(owner.claim(f"r{i}"))
        await cancel_soon(claim, rng)
        try:
            await claim
        except asyncio.CancelledError:
            # Cancelled mid-claim: the claim gave back whatever it may have been granted.
            assert owner.grants == {}
            check = client.ownership("free", f"check{i}", ttl=5.0)
            await check.claim(f"r{i}")  # no wait: nobody holds it
            await check.close()
        else:
            assert set(owner.grants) == {f"r{i}"}
        await owner.close()


async def test_cancelled_poll_over_two_partitions_skips_no_record(aio_api: Api) -> None:
    """A poll reads the partitions one after the other, each read moving that reader's position;
    a poll cancelled while it reads partition 1 puts partition 0's position back too: the next
    poll returns every record the cancelled one did not (and a default commit skips none)."""
    client = aio_api.client()
    topic = client.topic("t", partitions=2)
    async with topic.producer() as producer:
        for p in (0, 1):
            await producer.send_batch([b"a", b"b", b"c"], partition=p)
    async with topic.consumer("g", "m", partitions=[0, 1], start="earliest") as consumer:
        task = asyncio.ensure_future(consumer.poll(max_records=100))
        # Partition 0 is read first; its position moves as soon as its records are in,
        # while the task already waits on partition 1's read.
        await wait_until_async(
            lambda: consumer.position(0) == 3 or task.done(), timeout=5.0, interval=0
        )
        assert not task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        seen = [(r.partition, r.offset) for r in await consumer.poll(max_records=100)]
        assert sorted(seen) == [(p, o) for p in (0, 1) for o in range(3)], (
            f"records read by the cancelled poll were never returned: {seen}"
        )


async def test_cancelled_blocking_poll_skips_no_record(aio_api: Api) -> None:
    """A blocking poll moves the reader past the records that arrived, then checks the grant;
    cancelled during that check, it puts the position back (as for a FencingError): the next poll
    returns those records."""
    client = aio_api.client()
    topic = client.topic("t", partitions=1)
    await topic.open()
    async with topic.consumer("g", "m", partitions=[0], start="earliest") as consumer:
        task = asyncio.ensure_future(consumer.poll(max_records=100, block_ms=5000))
        await asyncio.sleep(0.2)  # the poll now blocks on the empty partition
        async with topic.producer() as producer:
            await producer.send_batch([b"a", b"b"], partition=0)
        await wait_until_async(
            lambda: consumer.position(0) == 2 or task.done(), timeout=5.0, interval=0
        )
        assert not task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        seen = [r.offset for r in await consumer.poll(max_records=100)]
        assert seen == [0, 1], f"records read by the cancelled poll were never returned: {seen}"


async def test_campaign_cancelled_after_its_grant_leaves_no_term_renewing(aio_api: Api) -> None:
    """A campaign cancelled after its claim was granted, while it publishes the change, resigns
    the term it started: the caller never got a Leadership, so nothing goes on renewing its
    lease, and another candidate is elected."""
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
    """A campaign cancelled once its claim is granted, while it deregisters the candidate, gives
    the grant back: no lease is left held by nobody for other candidates to wait out."""
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


async def test_close_cancelled_midway_can_be_retried_and_frees_the_partitions(aio_api: Api) -> None:
    """A producer's close() cancelled mid-way (a shutdown under ``asyncio.timeout``, a TaskGroup
    torn down) can be called again, and the second close() leaves every partition: no exclusive
    lease is left to block everyone until it lapses."""
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
    """A release (or close) cancelled during its release call keeps the grants it did not give
    back yet: a second release/close gives them back, and the resource is free at once, not when
    the lease lapses."""
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

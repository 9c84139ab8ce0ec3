"""Cancellation (asyncio only): tasks cancelled at random points during sends, opens and
claims. A cancelled send either happened or did not, and the producer settles which before
its next send on that partition; the whole log keeps G1, G2, G5 and G6 (checked by
:func:`fencing.verify.verify_log`); no lease is left held."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random

import fencing
from fencing import AccessMode
from fencing.verify import Attempt, verify_log

from ..support.flavours import Api

SEED = int(os.environ.get("CANCEL_SEED", "0")) or random.randrange(1 << 30)


async def cancel_soon(task: asyncio.Future[object], rng: random.Random) -> None:
    """Cancel ``task`` after 0 to 15 turns of the loop: every await point gets its turn."""
    for _ in range(rng.randint(0, 15)):
        await asyncio.sleep(0)
    task.cancel()


async def test_cancelled_sends_land_once_or_never_and_the_log_holds(aio_api: Api) -> None:
    rng = random.Random(SEED)
    client = aio_api.client()
    topic = client.topic("t", partitions=2)
    attempts: list[Attempt] = []
    cancelled = 0
    async with await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=2.0) as producer:
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
            assert producer._standing[partition].pending is None
    assert cancelled > 20, f"seed {SEED}: too few cancellations to mean anything"
    with fencing.Client.from_url(aio_api.url, namespace=aio_api.namespace) as checker:
        report = verify_log(checker, "t", attempts=attempts)
    assert report.ok, f"seed {SEED}: {report.summary()}"


async def test_cancelled_waiting_opens_and_claims_leave_nothing_held(aio_api: Api) -> None:
    rng = random.Random(SEED)
    client = aio_api.client()
    topic = client.topic("t", partitions=2)
    holder = await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=5.0)
    owner = client.ownership("g", "holder", ttl=5.0)
    await owner.claim("busy")
    for i in range(30):
        waiter = asyncio.ensure_future(
            topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, lease_ttl=5.0, wait_timeout=5)
        )
        await cancel_soon(waiter, rng)
        with contextlib.suppress(asyncio.CancelledError):
            (await waiter)  # never opened: the holder lives
        claimer = client.ownership("g", f"w{i}", ttl=5.0)
        claim = asyncio.ensure_future(claimer.claim("busy", wait=True, timeout=5))
        await cancel_soon(claim, rng)
        with contextlib.suppress(asyncio.CancelledError):
            await claim
        await claimer.close()
    await holder.close()
    await owner.close()
    # Nothing left queued or held by a cancelled waiter: exclusive at once, claimed at once.
    async with await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=5.0) as alone:
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

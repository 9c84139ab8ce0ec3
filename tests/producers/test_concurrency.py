"""Concurrency, written once: asyncio tasks on one loop, or (sync flavour) threads. The
invariants are checked over the whole log read back from Redis, not one interleaving."""

from __future__ import annotations

import asyncio

import fencing
from fencing import AccessMode
from fencing.verify import Attempt, verify_log

from ..support.flavours import Api


async def test_writers_taking_over_in_turn_never_interleave_epochs(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1)
    await topic.open()
    attempts: list[Attempt] = []

    async def writer(w: int) -> None:
        for turn in range(3):
            producer = await topic.producer(AccessMode.EXCLUSIVE_WITH_FENCING, lease_ttl=2.0)
            try:
                for i in range(40):
                    value = f"w{w}-{turn}-{i}".encode()
                    try:
                        md = await producer.send(value)
                    except fencing.ProducerFenced:
                        attempts.append(Attempt(value, 0, "fenced"))
                        break
                    except fencing.FencingError:
                        attempts.append(Attempt(value, 0, "unknown"))
                    else:
                        attempts.append(Attempt(value, 0, "acked", md.offset, md.epoch))
                    await asyncio.sleep(0)
            finally:
                await producer.close()

    await asyncio.wait_for(asyncio.gather(*(writer(w) for w in range(6))), 60)
    acked = [a for a in attempts if a.outcome == "acked"]
    assert len(acked) >= 40
    with fencing.Client.from_url(api.url, namespace=api.namespace) as checker:
        report = verify_log(checker, "t", attempts=attempts)
    assert report.ok, report.summary()
    assert len({a.epoch for a in acked}) > 1  # the writers did take over from each other


async def test_shared_producers_of_many_tasks_lose_and_double_nothing(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=4)
    await topic.open()
    sent: dict[bytes, tuple[int, int]] = {}

    async def writer(w: int) -> None:
        async with topic.producer() as producer:
            for i in range(25):
                value = f"{w}-{i}".encode()
                md = await producer.send(value, partition=(w + i) % 4)
                sent[value] = (md.partition, md.offset)

    await asyncio.wait_for(asyncio.gather(*(writer(w) for w in range(12))), 60)
    seen: dict[bytes, tuple[int, int]] = {}
    for p in range(4):
        reader = await topic.reader(p)
        records = await reader.read(max_records=10_000)
        assert [r.offset for r in records] == list(range(len(records)))
        for r in records:
            assert r.value not in seen
            seen[r.value] = (p, r.offset)  # type: ignore[assignment]
    assert seen == sent
    assert len(seen) == 12 * 25


async def test_more_calls_in_flight_than_connections_wait_for_one(api: Api) -> None:
    # redis-py refuses the connection past max_connections at once; the client's calls wait
    # for one to come back instead (here 4 connections for 40 writers).
    sep = "&" if "?" in api.url else "?"
    client = api.client(f"{api.url}{sep}max_connections=4")
    topic = client.topic("t", partitions=4)
    await topic.open()

    async def writer(w: int) -> list[int]:
        async with topic.producer() as producer:
            return [(await producer.send(b"x", partition=w % 4)).offset for _ in range(10)]

    results = await asyncio.wait_for(asyncio.gather(*(writer(w) for w in range(40))), 60)
    assert sum(len(r) for r in results) == 400
    assert [(await topic.offsets(p))[1] for p in range(4)] == [100, 100, 100, 100]

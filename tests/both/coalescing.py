"""Helpers shared by the group-commit tests (test_coalesce, test_review_16)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import redis

import fencing

from .flavors import unwrap


async def result_of(future: Any) -> Any:
    """The result of a send_async() future of either flavour."""
    if isinstance(future, concurrent.futures.Future):
        return await asyncio.wrap_future(future)
    return await future


def script_calls(url: str) -> int:
    """How many EVALSHA calls the server ran so far."""
    with redis.Redis.from_url(url) as r:
        stats = r.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def read_all(topic: Any, partition: int = 0) -> list[fencing.Record]:
    """Every record of one partition, read back through the library."""
    reader = await topic.reader(partition)
    records: list[fencing.Record] = []
    while True:
        page = list(await reader.read(max_records=10_000))
        if not page:
            return records
        records += page


class Held:
    """The lock of a producer's partition, held by the test as a call in flight holds it
    (so sends are queued for sure, not by a lucky interleaving)."""

    def __init__(self, producer: Any, partition: int = 0) -> None:
        self.producer = unwrap(producer)
        self.standing = self.producer._standing[partition]

    async def __aenter__(self) -> Held:
        lock = self.standing.lock
        if isinstance(lock, asyncio.Lock):
            await lock.acquire()
        else:
            assert lock.acquire(timeout=5)
        return self

    def queued(self) -> int:
        return len(self.standing.queue)

    async def __aexit__(self, *exc: object) -> None:
        self.standing.lock.release()
        self.producer._wake_head(self.standing)

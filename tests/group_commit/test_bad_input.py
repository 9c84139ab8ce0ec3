"""Bad input to ``send``, ``send_batch`` and ``send_async`` is refused with its typed error
before it is queued (never waiting behind a call in flight) and before any I/O."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import fencing
import fencing._group_commit
from fencing import AccessMode

from ..support.flavours import Api
from ..support.group_commit import Held, bounded, script_calls
from ..support.logs import records_of_async
from ..support.polling import wait_until_async


async def test_bad_input_to_send_async_is_refused_before_queueing(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=2, max_record_bytes=100)
    async with await topic.producer() as producer:
        with pytest.raises(fencing.InvalidArgumentType):
            await producer.send_async(123)  # type: ignore[arg-type]
        with pytest.raises(fencing.RecordTooLarge):
            await producer.send_async(b"x" * 101)
        with pytest.raises(fencing.InvalidArgument):
            await producer.send_async(b"x", partition=2)
        with pytest.raises(fencing.InvalidArgumentType):
            await producer.send_async(b"x", partition="0")  # type: ignore[arg-type]
        await producer.flush()
    for p in (0, 1):
        assert await records_of_async(topic, p) == []
    with pytest.raises(fencing.InvalidArgument):
        await topic.producer(linger_ms=-1)
    with pytest.raises(fencing.InvalidArgumentType):
        await topic.producer(batch_size=1.5)  # type: ignore[arg-type]


async def test_bad_input_is_refused_before_queueing_while_a_call_is_in_flight(api: Api) -> None:
    """With the partition's lock held (a call in flight), good sends queue up and every bad
    send/send_batch/send_async raises its typed error at once: it never queued (a queued
    one would wait for the lock). The good ones all land, at consecutive offsets."""
    client = api.client()
    topic = client.topic("t", partitions=2, max_record_bytes=100, max_batch_records=5)
    async with await topic.producer(AccessMode.EXCLUSIVE) as producer:
        for p in (0, 1):
            await producer.send(b"first", partition=p)
        async with Held(producer) as held:
            good = [asyncio.ensure_future(producer.send(b"g%d" % i, partition=0)) for i in range(5)]
            await wait_until_async(lambda: held.queued() == 5)
            for kwargs, error in BAD_SENDS:
                with pytest.raises(error):
                    await bounded(producer.send(**kwargs), 2)
                if "expected_offset" not in kwargs:
                    with pytest.raises(error):
                        await bounded(producer.send_async(**kwargs), 2)
                good.append(asyncio.ensure_future(producer.send(b"g%d" % len(good), partition=0)))
                await wait_until_async(lambda: held.queued() == len(good))
            for records, kwargs, error in BAD_BATCHES:
                with pytest.raises(error):
                    await bounded(producer.send_batch(records, **kwargs), 2)
            assert held.queued() == len(good)
        mds = await bounded(asyncio.gather(*good))
    assert [md.offset for md in mds] == list(range(1, len(good) + 1))
    assert [r.value for r in await records_of_async(topic, 0)] == [b"first"] + [
        b"g%d" % i for i in range(len(good))
    ]
    assert [r.value for r in await records_of_async(topic, 1)] == [b"first"]


async def test_an_expected_offset_too_large_is_refused_before_any_io(api: Api) -> None:
    """``send(..., partition=0, expected_offset=2**63)`` (or 2**53 + 1).

    InvalidArgument raised before the send is queued, no script call (like a negative
    expected_offset)."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer() as producer:
        await producer.send(b"first")
        for too_large in (2**53 + 1, 2**63):
            before = script_calls(api.url)
            with pytest.raises(fencing.InvalidArgument):
                await producer.send(b"x", partition=0, expected_offset=too_large)
            assert script_calls(api.url) == before


BAD_SENDS: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"value": None}, fencing.InvalidArgumentType),
    ({"value": 12}, fencing.InvalidArgumentType),
    ({"value": b"x", "key": 1}, fencing.InvalidArgumentType),
    ({"value": b"x", "headers": {1: b"x"}}, fencing.InvalidArgumentType),
    ({"value": b"x", "headers": {"h": 1}}, fencing.InvalidArgumentType),
    ({"value": b"x", "headers": [("h", b"x")]}, fencing.InvalidArgumentType),
    ({"value": b"x" * 101}, fencing.RecordTooLarge),
    ({"value": b"x", "partition": 2}, fencing.InvalidArgument),
    ({"value": b"x", "partition": -1}, fencing.InvalidArgument),
    ({"value": b"x", "partition": True}, fencing.InvalidArgumentType),
    ({"value": b"x", "partition": "0"}, fencing.InvalidArgumentType),
    ({"value": b"x", "expected_offset": 0}, fencing.InvalidArgument),  # no partition
    ({"value": b"x", "partition": 0, "expected_offset": -1}, fencing.InvalidArgument),
    ({"value": b"x", "partition": 0, "expected_offset": 1.0}, fencing.InvalidArgumentType),
    ({"value": b"x", "partition": 0, "expected_offset": True}, fencing.InvalidArgumentType),
]


BAD_BATCHES: list[tuple[Any, dict[str, Any], type[Exception]]] = [
    ([], {"partition": 0}, fencing.InvalidArgument),
    ([b"a", 1], {"partition": 0}, fencing.InvalidArgumentType),
    (b"ab", {"partition": 0}, fencing.InvalidArgumentType),
    ([b"a"] * 6, {"partition": 0}, fencing.RecordTooLarge),  # max_batch_records=5
    ([b"a", b"b"], {}, fencing.InvalidArgument),  # no key, two partitions
    ([b"a"], {"partition": 0, "expected_offset": -3}, fencing.InvalidArgument),
]

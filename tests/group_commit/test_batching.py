"""Which sends go together: while a call is in flight on a partition, the sends queued
behind it go in the next call, merged into one batch (within the topic's limits; a send
with ``expected_offset`` always alone), and ``send_async()`` records linger for more
(``linger_ms``, ``batch_size``). The merging itself is checked without I/O too."""

from __future__ import annotations

import asyncio
import time
from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fencing
import fencing._group_commit
from fencing import AccessMode
from fencing._group_commit import Entry, encode_one, merge_batches, take_group
from fencing._protocol.topic import encode_batch
from fencing._record import Limits, Record

from ..support.flavours import Api
from ..support.group_commit import (
    Held,
    Ledger,
    bounded,
    check_ledger,
    result_of,
    script_calls,
)
from ..support.logs import records_of_async, verified
from ..support.polling import wait_until, wait_until_async

records = st.builds(
    Record,
    st.binary(max_size=40),
    st.none() | st.binary(max_size=10),
    st.none() | st.dictionaries(st.text(min_size=1, max_size=5), st.binary(max_size=5), max_size=2),
)


@given(st.lists(st.lists(records, min_size=1, max_size=4), min_size=1, max_size=6))
def test_a_merged_batch_is_the_batch_of_all_its_records(groups: list[list[Record]]) -> None:
    limits = Limits()
    parts = [encode_batch(g, limits, checksum=False) for g in groups]
    whole = encode_batch([r for g in groups for r in g], limits)
    assert merge_batches(parts) == whole


@given(records)
def test_encode_one_is_encode_batch_of_one_record(record: Record) -> None:
    limits = Limits()
    headers = dict(record.headers) or None
    one = encode_one(record.value, record.key, headers, limits)
    assert merge_batches([one]) == encode_batch([record], limits)
    assert one.size == record.size and one.count == 1


@given(st.lists(records, min_size=1, max_size=8))
def test_merged_entries_are_encode_batch_of_all_their_records(batch: list[Record]) -> None:
    limits = Limits()
    entries = [encode_one(r.value, r.key, dict(r.headers) or None, limits) for r in batch]
    assert merge_batches(entries) == encode_batch(batch, limits)


def test_take_group_respects_limits_order_and_solo_entries() -> None:
    limits = Limits(max_record_bytes=100, max_batch_records=3, max_batch_bytes=100)

    def entry(size: int, expected: int | None = None) -> Entry:
        return Entry.of(encode_batch([Record(b"x" * size)], limits, checksum=False), expected)

    a, b, c, d, e, f = entry(10), entry(10), entry(10), entry(10), entry(90), entry(1, 7)
    queue = deque([a, b, c, d, e, f])
    b.abandoned = True
    claim = lambda future: True  # noqa: E731
    assert take_group(queue, limits, claim) == [a, c, d]  # b dropped; 3 records at most
    assert take_group(queue, limits, claim) == [e]  # 90 bytes: f is solo anyway
    assert take_group(queue, limits, claim) == [f]  # expected_offset: alone
    assert take_group(queue, limits, claim) == []


async def test_sends_queued_behind_a_call_in_flight_go_in_one_call(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer() as producer:
        await producer.send(b"first")
        before = script_calls(api.url)
        async with Held(producer) as held:
            sends = [asyncio.ensure_future(producer.send(b"v%d" % i)) for i in range(12)]
            await wait_until_async(lambda: held.queued() == 12)
        metadata = await asyncio.gather(*sends)
        calls = script_calls(api.url) - before
    # One call carried the twelve sends, and each caller got its own record's offset.
    assert calls == 1
    assert sorted(md.offset for md in metadata) == list(range(1, 13))
    records = await records_of_async(topic)
    by_offset = {r.offset: r.value for r in records}
    for i, md in enumerate(metadata):
        assert by_offset[md.offset] == b"v%d" % i
    assert len(records) == 13


async def test_a_merged_call_is_split_by_the_topic_limits_never_refused(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1, max_batch_records=5, max_batch_bytes=1000)
    async with await topic.producer() as producer:
        before = script_calls(api.url)
        async with Held(producer) as held:
            small = [asyncio.ensure_future(producer.send(b"s%d" % i)) for i in range(12)]
            await wait_until_async(lambda: held.queued() == 12)
            big = [asyncio.ensure_future(producer.send(b"b" * 400)) for _ in range(3)]
            await wait_until_async(lambda: held.queued() == 15)
        answers = await asyncio.gather(*small, *big)
        calls = script_calls(api.url) - before
    # 12 small records: 5 + 5, then 2 more with two 400-byte ones (4 records, 806 bytes),
    # then the last 400-byte one alone: 4 calls, every caller answered, none refused.
    assert calls == 4
    assert sorted(md.offset for md in answers[:12]) == list(range(12))
    assert sorted(md.offset for md in answers[12:]) == [12, 13, 14]


async def test_a_send_with_expected_offset_is_never_merged(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer(AccessMode.EXCLUSIVE) as producer:
        before = script_calls(api.url)
        async with Held(producer) as held:
            a = asyncio.ensure_future(producer.send(b"a"))
            await wait_until_async(lambda: held.queued() == 1)
            b = asyncio.ensure_future(producer.send(b"b", partition=0, expected_offset=1))
            await wait_until_async(lambda: held.queued() == 2)
            c = asyncio.ensure_future(producer.send(b"c"))
            await wait_until_async(lambda: held.queued() == 3)
            d = asyncio.ensure_future(producer.send(b"d", partition=0, expected_offset=7))
            await wait_until_async(lambda: held.queued() == 4)
        mda, mdb, mdc = await asyncio.gather(a, b, c)
        with pytest.raises(fencing.OffsetMismatch) as mismatch:
            await d
        calls = script_calls(api.url) - before
    assert (mda.offset, mdb.offset, mdc.offset) == (0, 1, 2)
    assert (mismatch.value.expected, mismatch.value.actual) == (7, 3)
    assert calls == 4  # a | b alone | c | d alone
    assert [r.value for r in await records_of_async(topic)] == [b"a", b"b", b"c"]


async def test_linger_sends_on_its_own_after_linger_ms(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer(linger_ms=20) as producer:
        futures = [await producer.send_async(b"v%d" % i) for i in range(50)]
        for f in futures:  # no flush(): the sender sends after 20 ms
            await asyncio.wait_for(result_of(f), 10)
    assert [r.value for r in await records_of_async(topic)] == [b"v%d" % i for i in range(50)]


def test_send_async_lingers_until_batch_size_is_queued(client: fencing.Client) -> None:
    topic = client.topic("t", partitions=1)
    with topic.producer(linger_ms=60_000, batch_size=1000) as producer:
        small = [producer.send_async(b"x" * 100, partition=0) for _ in range(5)]
        time.sleep(0.05)  # (not a synchronisation: nothing may be sent in this time)
        assert not any(f.done() for f in small)  # lingering: 500 bytes < batch_size
        rest = [producer.send_async(b"y" * 100, partition=0) for _ in range(5)]  # 1000
        wait_until(lambda: all(f.done() for f in small + rest), 10, interval=0.002)
        assert [f.result().offset for f in small + rest] == list(range(10))


async def test_linger_and_batch_size_edges(api: Api) -> None:
    """linger_ms=60000 with batch_size=1: the first record already fills a batch, so it is
    sent at once. linger_ms=0: at once. linger_ms=60000 with a huge batch_size: nothing is
    sent until flush(). Out-of-range values are refused when the producer is made."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    async with await topic.producer(linger_ms=60_000, batch_size=1) as eager:
        md = await bounded(result_of(await eager.send_async(b"a")), 5)
        assert md.offset == 0
    async with await topic.producer(linger_ms=0) as plain:
        md = await bounded(result_of(await plain.send_async(b"b")), 5)
        assert md.offset == 1
    async with await topic.producer(linger_ms=60_000, batch_size=10**9) as lazy:
        futures = [await lazy.send_async(b"c%d" % i) for i in range(20)]
        await asyncio.sleep(0.2)
        assert not any(f.done() for f in futures)
        await bounded(lazy.flush())
        assert [(await result_of(f)).offset for f in futures] == list(range(2, 22))
    for bad, error in [
        ({"linger_ms": 60_000.5}, fencing.InvalidArgument),
        ({"linger_ms": float("nan")}, fencing.InvalidArgument),
        ({"linger_ms": float("inf")}, fencing.InvalidArgument),
        ({"linger_ms": True}, fencing.InvalidArgumentType),
        ({"linger_ms": "5"}, fencing.InvalidArgumentType),
        ({"batch_size": 0}, fencing.InvalidArgument),
        ({"batch_size": True}, fencing.InvalidArgumentType),
    ]:
        with pytest.raises(error):
            await topic.producer(**bad)


async def test_conditional_appends_interleaved_with_merged_sends(api: Api) -> None:
    """Six plain senders and two conditional senders (each guessing the next offset from
    the last one it saw) on one partition: a conditional send lands exactly at its
    expected offset or not at all (OffsetMismatch naming another offset); plain sends
    around it keep their acked offsets; the log verifies."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    ledger = Ledger()
    sent: list[bytes] = []
    seen = [0]
    landed = mismatched = 0
    async with await topic.producer(AccessMode.EXCLUSIVE) as producer:

        async def plain(w: int) -> None:
            for i in range(40):
                value = b"p%d-%d" % (w, i)
                sent.append(value)
                md = await producer.send(value)
                ledger.acked(value, md)
                seen[0] = max(seen[0], md.offset + 1)

        async def conditional(w: int) -> None:
            nonlocal landed, mismatched
            for i in range(25):
                value, expected = b"c%d-%d" % (w, i), seen[0]
                sent.append(value)
                try:
                    md = await producer.send(value, partition=0, expected_offset=expected)
                except fencing.OffsetMismatch as exc:
                    assert exc.expected == expected and exc.actual != expected
                    ledger.failed(value, exc)
                    seen[0] = max(seen[0], exc.actual)
                    mismatched += 1
                else:
                    assert md.offset == expected
                    ledger.acked(value, md)
                    seen[0] = max(seen[0], md.offset + 1)
                    landed += 1

        await bounded(
            asyncio.gather(*(plain(w) for w in range(6)), *(conditional(w) for w in range(2)))
        )
        assert landed + mismatched == 50
        # Then for sure: a conditional send at the head, three plain ones behind it, and a
        # conditional one behind those expecting the offset after them: both land.
        base = seen[0]
        async with Held(producer) as held:
            head = asyncio.ensure_future(
                producer.send(b"c-head", partition=0, expected_offset=base)
            )
            await wait_until_async(lambda: held.queued() == 1)
            middle = []
            for i in range(3):
                middle.append(asyncio.ensure_future(producer.send(b"m%d" % i)))
                await wait_until_async(lambda n=2 + i: held.queued() == n)
            tail = asyncio.ensure_future(
                producer.send(b"c-tail", partition=0, expected_offset=base + 4)
            )
            await wait_until_async(lambda: held.queued() == 5)
        mds = await bounded(asyncio.gather(head, *middle, tail))
        assert [md.offset for md in mds] == list(range(base, base + 5))
        for value, md in zip([b"c-head", b"m0", b"m1", b"m2", b"c-tail"], mds, strict=True):
            sent.append(value)
            ledger.acked(value, md)
    ledger.check_one_answer_each(sent)
    records = await check_ledger(topic, ledger)
    assert len(records) == 240 + landed + 5
    verified(api.url, api.namespace, "t", ledger.attempts, exclusive=True)

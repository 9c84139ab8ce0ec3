"""A resumed job's resend whose outcome was unknown, then resolved (G5).

A copy job saved its producer state before writing rows 0-14 in three batches, and
resumes from it: it resends the batches it wrote. The first resend loses its reply, so its
outcome is unknown; the resolution finds it in the window (it landed, long before) or
refuses it as older than the window. Either way the producer goes on after *that* batch,
not after the partition's last sequence: its next resends are answered as duplicates with
their original offsets (or refused as older than the window), never written again, and
its first new batch lands right after the job's last row. Every path that resolves is
covered: an explicit ``resolve()``, the resolution before the next send, a resolution
whose own reply is lost, an interrupted send, and a call carrying several callers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import fencing
from fencing.faults import Proxy

from ..support.flavours import Api, unwrap
from ..support.group_commit import Held, bounded
from ..support.logs import records_of_async, values_of
from ..support.polling import wait_until_async
from ..support.wire import APPEND, RESOLVE

#: The job's rows, and the batches it sends them in (the resumed job resends the first
#: three, then sends the fourth as new).
ROWS = [b"row-%02d" % i for i in range(20)]
BATCHES = [ROWS[i : i + 5] for i in range(0, 20, 5)]
LEASE_TTL = 1.0


async def _job_written(topic: Any) -> Any:
    """Rows 0-14 written in three batches by a producer whose state was saved before its
    first send (then it crashed): that saved state."""
    async with await topic.producer(lease_ttl=LEASE_TTL) as p:
        saved = p.state
        for batch in BATCHES[:3]:
            await p.send_batch(batch, partition=0)
    return saved


async def _answer(send: Any) -> list[int] | str:
    """The offsets a send was answered with, or the DuplicateSequence reason it raised."""
    try:
        return [md.offset for md in await send]
    except fencing.DuplicateSequence as exc:
        return exc.reason


async def _resent_after(p: Any, first: int) -> list[list[int] | str]:
    """The resumed producer sends the job's batches from ``first`` on: what each got."""
    return [await _answer(p.send_batch(batch, partition=0)) for batch in BATCHES[first:]]


def _expected(window: int) -> list[list[int] | str]:
    """What batches 1..3 are answered with: the original offsets while in the window (the
    last ``window`` of the three written), older-than-window before that; then new rows."""
    return [
        list(range(5 * b, 5 * b + 5)) if b >= 3 - window or b == 3 else "older-than-window"
        for b in (1, 2, 3)
    ]


async def _resend_lost(p: Any, proxy: Proxy) -> None:
    """The resumed producer resends batch 0 and loses every reply: its outcome is unknown."""
    with proxy.drop_replies(APPEND, count=None) as lost, pytest.raises(fencing.OutcomeUnknown):
        await p.send_batch(BATCHES[0], partition=0)
    assert lost.hits >= 2
    assert unwrap(p)._queues[0].standing.pending is not None


@pytest.mark.parametrize("how", ["explicit", "next-send"])
async def test_a_resend_resolved_as_landed_leaves_the_next_resends_duplicates(
    api: Api, proxy: Proxy, how: str
) -> None:
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1)
    saved = await _job_written(topic)
    async with await topic.producer(resume=saved, lease_ttl=LEASE_TTL) as p:
        await _resend_lost(p, proxy)
        if how == "explicit":
            assert [md.offset for md in await p.resolve(0)] == [0, 1, 2, 3, 4]
            assert await p.resolve(0) is None  # settled
        answers = await _resent_after(p, 1)
        assert [md.offset for md in p.last_resolution[1]] == [0, 1, 2, 3, 4]
    assert answers == _expected(5)
    assert [r.value for r in await records_of_async(topic)] == ROWS


@pytest.mark.parametrize("how", ["explicit", "next-send"])
@pytest.mark.parametrize("window", [1, 2])
async def test_a_resend_resolved_after_it_left_the_window_goes_on_after_it(
    api: Api, proxy: Proxy, window: int, how: str
) -> None:
    """The resolution refuses it as older than the window (it was written, its offsets
    forgotten): the producer goes on with the batch after it. Resolved before the next
    send, ``last_resolution`` carries that refusal, never "did not land"."""
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1, dedup_window=window)
    saved = await _job_written(topic)
    async with await topic.producer(resume=saved, lease_ttl=LEASE_TTL) as p:
        await _resend_lost(p, proxy)
        if how == "explicit":
            with pytest.raises(fencing.DuplicateSequence) as refused:
                await p.resolve(0)
            assert p.last_resolution == (0, refused.value)
        answers = await _resent_after(p, 1)
        partition, refusal = p.last_resolution
        assert partition == 0 and isinstance(refusal, fencing.DuplicateSequence)
        assert (refusal.reason, refusal.first_sequence) == ("older-than-window", 0)
    assert answers == _expected(window)
    assert [r.value for r in await records_of_async(topic)] == ROWS


@pytest.mark.parametrize("window", [2, 5])
async def test_a_resend_resolved_in_the_window_of_its_size_goes_on_after_it(
    api: Api, proxy: Proxy, window: int
) -> None:
    """Batch 1 resent with its reply lost and resolved from the window (batch 0 refused
    as older than the window first, when the window holds two): the next resends are
    still duplicates."""
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1, dedup_window=window)
    saved = await _job_written(topic)
    async with await topic.producer(resume=saved, lease_ttl=LEASE_TTL) as p:
        first = await _answer(p.send_batch(BATCHES[0], partition=0))
        assert first == ("older-than-window" if window < 3 else [0, 1, 2, 3, 4])
        with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            await p.send_batch(BATCHES[1], partition=0)
        assert [md.offset for md in await p.resolve(0)] == [5, 6, 7, 8, 9]
        answers = await _resent_after(p, 2)
    assert answers == _expected(window)[1:]
    assert [r.value for r in await records_of_async(topic)] == ROWS


@pytest.mark.parametrize("how", ["explicit", "next-send"])
async def test_a_lost_reply_to_the_resolution_of_a_resend_answers_as_the_first(
    api: Api, proxy: Proxy, how: str
) -> None:
    """Resolving is idempotent: its retry after a lost reply finds the same batch, and
    the producer goes on after it just the same."""
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1)
    saved = await _job_written(topic)
    async with await topic.producer(resume=saved, lease_ttl=LEASE_TTL) as p:
        await _resend_lost(p, proxy)
        with proxy.observe(RESOLVE) as seen, proxy.drop_replies(RESOLVE) as lost:
            if how == "explicit":
                assert [md.offset for md in await p.resolve(0)] == [0, 1, 2, 3, 4]
                answers = []
            else:
                answers = [await _answer(p.send_batch(BATCHES[1], partition=0))]
        assert (lost.hits, seen.hits) == (1, 2)
        answers += await _resent_after(p, 1 + len(answers))
        assert not p.fenced
    assert answers == _expected(5)
    assert [r.value for r in await records_of_async(topic)] == ROWS


async def test_a_resend_straddling_the_last_sequence_after_a_resolution_is_refused_whole(
    api: Api, proxy: Proxy
) -> None:
    """After the resolution the producer stands after batch 0: rows 5-19 in one batch
    hold sequences written before and new ones, and are refused whole."""
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1)
    saved = await _job_written(topic)
    async with await topic.producer(resume=saved, lease_ttl=LEASE_TTL) as p:
        await _resend_lost(p, proxy)
        assert await _answer(p.send_batch(ROWS[5:], partition=0)) == "straddles"
        answers = await _resent_after(p, 1)  # with the boundaries used before
    assert answers == _expected(5)
    assert [r.value for r in await records_of_async(topic)] == ROWS


async def test_a_resend_carrying_several_callers_resolved_leaves_the_next_resends_duplicates(
    api: Api, proxy: Proxy
) -> None:
    """Group commit: the job's batches were calls carrying five callers each, and so are
    its resends; the resend whose reply was lost is resolved by the next call, which
    carries the next five callers."""
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1)

    async def group(p: Any, rows: list[bytes]) -> list[Any]:
        async with Held(p) as held:
            sends = [api_send(p, row) for row in rows]
            await wait_until_async(lambda: held.queued() == len(rows))
        return list(await bounded(_gather(sends)))

    async with await topic.producer(lease_ttl=LEASE_TTL) as first:
        saved = first.state
        written = [await group(first, batch) for batch in BATCHES[:3]]
    assert [[md.offset for md in g] for g in written] == [list(range(i, i + 5)) for i in (0, 5, 10)]
    async with await topic.producer(resume=saved, lease_ttl=LEASE_TTL) as p:
        with proxy.drop_replies(APPEND, count=None):
            lost = await group(p, BATCHES[0])
        assert all(isinstance(a, fencing.OutcomeUnknown) for a in lost), lost
        answers = [await group(p, batch) for batch in BATCHES[1:]]
        assert [md.offset for md in p.last_resolution[1]] == [0, 1, 2, 3, 4]
    assert [[getattr(a, "offset", a) for a in g] for g in answers] == [
        list(range(i, i + 5)) for i in (5, 10, 15)
    ]
    assert [r.value for r in await records_of_async(topic)] == ROWS


def api_send(p: Any, row: bytes) -> Any:
    """A send of one row on partition 0, started now (a task, or a thread's call)."""
    return asyncio.ensure_future(p.send(row, partition=0))


async def _gather(sends: list[Any]) -> list[Any]:
    return list(await asyncio.gather(*sends, return_exceptions=True))


def test_an_interrupted_resend_resolved_before_the_next_send_leaves_resends_duplicates(
    client: fencing.Client,
) -> None:
    """Sync: the caller is interrupted (KeyboardInterrupt) after its resend reached Redis;
    the next send resolves it (it landed) and is answered as the duplicate it is."""
    topic = client.topic("t", partitions=1)
    with topic.producer() as first:
        saved = first.state
        for batch in BATCHES[:3]:
            first.send_batch(batch, partition=0)
    with topic.producer(resume=saved) as p:
        real = p._calls.execute

        def interrupted(call: object, *more: object, **options: object) -> object:
            real(call, *more, **options)  # type: ignore[arg-type]  # it is answered...
            raise KeyboardInterrupt  # ...and the caller is interrupted before the reply

        p._calls.execute = interrupted  # type: ignore[method-assign,assignment]
        with pytest.raises(KeyboardInterrupt):
            p.send_batch(BATCHES[0], partition=0)
        p._calls.execute = real  # type: ignore[method-assign]
        answers = []
        for batch in BATCHES[1:]:
            try:
                answers.append([md.offset for md in p.send_batch(batch, partition=0)])
            except fencing.DuplicateSequence as exc:
                answers.append(exc.reason)  # type: ignore[arg-type]
        assert p.last_resolution is not None
        assert [md.offset for md in p.last_resolution[1] or []] == [0, 1, 2, 3, 4]
    assert answers == _expected(5)
    assert values_of(topic) == ROWS

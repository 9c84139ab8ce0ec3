"""``flush()`` and ``close()`` with sends, batches and ``send_async()`` records queued or
still coming: what was queued before them is sent and answered, nothing lands after
``close()``, a cancelled future never holds the others back, and a streamer starves
neither."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any

import pytest

import fencing
import fencing._group_commit
import fencing.aio
from fencing import AccessMode
from fencing import _group_commit as group_commit

from ..support.flavours import Api, unwrap
from ..support.group_commit import Held, Ledger, bounded, check_ledger, result_of
from ..support.logs import records_of_async, verified
from ..support.polling import wait_until_async


async def test_send_async_and_flush(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=2)
    async with await topic.producer() as producer:
        futures = [await producer.send_async(b"v%d" % i, partition=i % 2) for i in range(500)]
        await producer.flush()
        assert all(f.done() for f in futures)
        metadata = [await result_of(f) for f in futures]
    for p in (0, 1):
        values = [r.value for r in await records_of_async(topic, p)]
        assert values == [b"v%d" % i for i in range(p, 500, 2)]
        assert [md.offset for md in metadata[p::2]] == list(range(250))


async def test_close_sends_what_send_async_queued(api: Api) -> None:
    client = api.client()
    topic = client.topic("t", partitions=1)
    producer = await topic.producer(linger_ms=60_000)  # the sender would wait a minute
    futures = [await producer.send_async(b"v%d" % i) for i in range(300)]
    await producer.close()
    offsets = [(await result_of(f)).offset for f in futures]
    assert offsets == list(range(300))
    assert [r.value for r in await records_of_async(topic)] == [b"v%d" % i for i in range(300)]


async def test_close_with_send_callers_and_futures_queued(api: Api) -> None:
    """close() while send() callers and send_async() futures wait behind a call in flight:
    close flushes, so every one of them lands and is answered with its metadata; sends
    after close are refused without I/O."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    producer = await topic.producer(linger_ms=60_000)
    async with Held(producer) as held:
        sends = [asyncio.ensure_future(producer.send(b"s%d" % i)) for i in range(10)]
        await wait_until_async(lambda: held.queued() == 10)
        futures = [await producer.send_async(b"f%d" % i) for i in range(10)]
        closing = asyncio.ensure_future(producer.close())
        await asyncio.sleep(0.05)
        assert not closing.done()  # close waits for the call in flight
    await bounded(closing)
    mds = await bounded(asyncio.gather(*sends))
    fmds = [await bounded(result_of(f), 5) for f in futures]
    assert sorted(md.offset for md in mds + fmds) == list(range(20))
    with pytest.raises(fencing.InvalidArgument):
        await producer.send_async(b"late")
    with pytest.raises(fencing.InvalidArgument):
        await producer.send(b"late")
    await producer.flush()  # nothing queued: returns
    records = await records_of_async(topic)
    assert len(records) == 20
    assert {r.value for r in records} == {b"s%d" % i for i in range(10)} | {
        b"f%d" % i for i in range(10)
    }


async def test_close_while_senders_hammer_nothing_lands_after_close(api: Api) -> None:
    """Eight senders and a send_async streamer keep going while close() runs: every call
    gets exactly one answer (metadata, or the closed producer's refusal), every acked record
    is in the log, and nothing lands after close() returned."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    producer = await topic.producer(AccessMode.EXCLUSIVE, lease_ttl=5.0)
    ledger = Ledger()
    sent: list[bytes] = []
    futures: list[tuple[bytes, Any]] = []
    closed = asyncio.Event()

    async def single(w: int) -> None:
        for i in range(1000):
            value = b"s%d-%d" % (w, i)
            sent.append(value)
            try:
                md = await producer.send(value)
            except fencing.FencingError as exc:
                ledger.failed(value, exc)
                assert isinstance(exc, (fencing.InvalidArgument, fencing.ProducerFenced)), exc
                return
            ledger.acked(value, md)

    async def streamer() -> None:
        for i in range(100_000):
            value = b"f%d" % i
            try:
                futures.append((value, await producer.send_async(value)))
            except fencing.InvalidArgument:
                return
            # Not flat out (test_flush_and_close_are_not_starved_by_a_streamer covers that).
            await asyncio.sleep(0.001)

    async def closer() -> int:
        await wait_until_async(lambda: len(ledger.answers) >= 100)
        await producer.close()
        closed.set()
        return len(await records_of_async(topic))

    *_, at_close = await bounded(
        asyncio.gather(*(single(w) for w in range(8)), streamer(), closer())
    )
    for value, future in futures:
        try:
            md = await bounded(result_of(future), 10)
        except fencing.FencingError as exc:
            ledger.failed(value, exc)
        else:
            ledger.acked(value, md)
    ledger.check_one_answer_each(sent + [v for v, _ in futures])
    records = await check_ledger(topic, ledger)
    assert len(records) == at_close, "records landed after close() returned"
    assert len(ledger.acked_offsets()) == len(records)
    verified(api.url, api.namespace, "t", ledger.attempts, exclusive=True)


async def test_flush_and_close_are_not_starved_by_a_streamer(api: Api) -> None:
    """One thread (task) streams send_async() flat out for up to 20 s; another calls flush() and
    then close().

    As in Kafka: flush() returns once the records queued *before* it began are
    answered, and close() stops taking records at once, sends what was queued, and returns;
    the streamer then gets InvalidArgument."""
    client = api.client()
    topic = client.topic("t", partitions=1)
    producer = await topic.producer(linger_ms=5)
    raw = unwrap(producer)
    stop_at = time.monotonic() + 20.0  # far beyond what flush() and close() may take
    count = 0

    def stream_sync() -> str:
        nonlocal count
        while time.monotonic() < stop_at:
            try:
                raw.send_async(b"x")
            except fencing.InvalidArgument:
                return "closed"
            count += 1
        return "deadline"

    async def stream_async() -> str:
        nonlocal count
        while time.monotonic() < stop_at:
            try:
                await raw.send_async(b"x")
            except fencing.InvalidArgument:
                return "closed"
            count += 1
            if count % 50 == 0:
                await asyncio.sleep(0)
        return "deadline"

    streaming = asyncio.ensure_future(
        stream_async() if api.is_async else asyncio.to_thread(stream_sync)
    )
    await wait_until_async(lambda: count > 500)
    started = time.monotonic()
    await bounded(producer.flush())
    flushed_in = time.monotonic() - started
    await bounded(producer.close())
    closed_in = time.monotonic() - started
    how = await bounded(streaming)
    # Not a timing threshold: both returned while the streamer was still going (it stops
    # on its own only after 20 s), and close() is what stopped it.
    assert how == "closed" and time.monotonic() < stop_at, (how, flushed_in, closed_in)


async def test_flush_from_several_callers_while_others_stream(api: Api) -> None:
    """Four callers flush() at once, repeatedly, while two stream send_async() to two
    partitions: when a flush returns, every future made before it began is done; at the
    end every record is in its partition once, in send order, at its future's offset."""
    client = api.client()
    topic = client.topic("t", partitions=2)
    made: list[tuple[bytes, int, Any]] = []
    async with await topic.producer(linger_ms=60_000, batch_size=10**9) as producer:

        async def streamer(w: int) -> None:
            for i in range(150):
                value = b"w%d-%d" % (w, i)
                made.append((value, i % 2, await producer.send_async(value, partition=i % 2)))
                if i % 10 == 0:
                    await asyncio.sleep(0.001)

        async def flusher() -> None:
            for _ in range(15):
                before = list(made)
                await producer.flush()
                assert all(f.done() for _, _, f in before)
                await asyncio.sleep(0.002)

        await bounded(asyncio.gather(streamer(0), streamer(1), *(flusher() for _ in range(4))))
        await bounded(producer.flush())
        answers = [(v, p, await result_of(f)) for v, p, f in made]
    for p in (0, 1):
        values = [r.value for r in await records_of_async(topic, p)]
        mine = sorted((md.offset, v) for v, q, md in answers if q == p)
        assert [v for _, v in mine] == values
        assert [o for o, _ in mine] == list(range(len(values)))
        for w in (0, 1):  # one streamer's records keep their order
            assert [v for v in values if v.startswith(b"w%d-" % w)] == [
                b"w%d-%d" % (w, i) for i in range(p, 150, 2)
            ]


@pytest.mark.usefixtures("restore_sigint")
def test_a_send_async_racing_close_gets_an_answer(
    client: fencing.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread T calls send_async() while the main thread closes the producer; T passed
    send_async()'s closed check just before close() began (here: held in encode_one, as a
    preempted thread would be).

    T's future gets an answer (an error: the producer is closed)."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    first = producer.send_async(b"first", partition=0)  # the sender thread exists now
    assert first.result(timeout=5).offset == 0
    inside = threading.Event()
    resume = threading.Event()
    real = group_commit.encode_one

    def preempted(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            inside.set()
            assert resume.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(group_commit, "encode_one", preempted)
    got: list[Any] = []

    def racer() -> None:
        try:
            got.append(producer.send_async(b"late", partition=0))
        except BaseException as exc:
            got.append(exc)

    thread = threading.Thread(target=racer, daemon=True)
    thread.start()
    assert inside.wait(5)
    producer.close()
    sender = producer._sender.running
    if isinstance(sender, threading.Thread):
        sender.join(5)
    resume.set()
    thread.join(5)
    assert len(got) == 1
    if isinstance(got[0], BaseException):
        return  # refused at once: an answer
    future = got[0]
    done, _ = concurrent.futures.wait([future], timeout=3)
    assert done, "a send_async() racing close() was never answered"


@pytest.mark.usefixtures("restore_sigint")
def test_flush_sends_records_queued_before_a_cancelled_last_one(client: fencing.Client) -> None:
    """A user queues two records with send_async() (the producer lingers), cancels the second
    future, and calls flush().

    Flush() sends every record queued before it (the first lands; the cancelled one never does)
    and returns once each is answered."""
    topic = client.topic("t", partitions=1)
    with topic.producer(linger_ms=60_000, batch_size=10**9) as producer:
        first = producer.send_async(b"first", partition=0)
        second = producer.send_async(b"second", partition=0)
        assert second.cancel()
        producer.flush()
        assert first.done(), "flush() returned with a record queued before it unsent"
        assert first.result().offset == 0


@pytest.mark.usefixtures("restore_sigint")
def test_close_sends_records_queued_before_a_cancelled_last_one(client: fencing.Client) -> None:
    """As above with close() (which flushes first): the user queues two records, cancels the
    second, and closes the producer.

    The first record is sent (close() flushes what was queued before it)."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer(linger_ms=60_000, batch_size=10**9)
    first = producer.send_async(b"first", partition=0)
    second = producer.send_async(b"second", partition=0)
    assert second.cancel()
    producer.close()
    assert first.result(timeout=5).offset == 0
    _, end = topic.offsets(0)
    assert end == 1

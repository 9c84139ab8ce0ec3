"""Group commit when replies are lost: the merged call is resent as the same batch, every
caller gets its metadata or OutcomeUnknown (once), the next send settles what is pending,
and every record lands once at the offset it was acked with."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import fencing
import fencing._group_commit
from fencing.faults import Proxy
from fencing.verify import Attempt, verify_log

from ..support.flavours import Api, unwrap
from ..support.group_commit import (
    Answers,
    Held,
    Ledger,
    bounded,
    check_ledger,
    result_of,
    run_threads,
)
from ..support.logs import records_of_async, verified
from ..support.polling import wait_until_async
from ..support.wire import APPEND


async def test_lost_replies_of_merged_calls_are_resent_and_land_once(
    api: Api, proxy: Proxy
) -> None:
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1)
    attempts: list[Attempt] = []
    async with await topic.producer(lease_ttl=3.0) as producer:
        await producer.send(b"first")
        rule = proxy.drop_replies(APPEND, count=4)

        async def sender(w: int) -> None:
            for i in range(30):
                value = b"w%d-%d" % (w, i)
                try:
                    md = await producer.send(value)
                except fencing.OutcomeUnknown:
                    attempts.append(Attempt(value, 0, "unknown"))
                else:
                    attempts.append(Attempt(value, 0, "acked", md.offset, md.epoch))

        await asyncio.wait_for(asyncio.gather(*(sender(w) for w in range(8))), 60)
        assert rule.hits == 4
    assert len(attempts) == 240
    acked = {a.value: a.offset for a in attempts if a.outcome == "acked"}
    assert len(acked) >= 200
    records = await records_of_async(topic)
    values = [r.value for r in records]
    assert len(values) == len(set(values))  # nothing landed twice
    assert {r.value: r.offset for r in records if r.value in acked} == acked
    verified(api.url, api.namespace, "t", attempts, exclusive=False)


async def test_replies_lost_for_good_then_restored_settle_the_pending_batch(
    api: Api, proxy: Proxy
) -> None:
    """Every append reply is lost (count=None) while eight senders queue: each caller of
    the lost call gets OutcomeUnknown (once); the rule is removed, and the next send
    settles the pending batch (it landed: the request ran, only the reply was lost), at
    the offsets the resolution reports."""
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1)
    ledger = Ledger()
    async with await topic.producer(lease_ttl=1.0) as producer:
        await producer.send(b"first")
        async with Held(producer) as held:
            rule = proxy.drop_replies(APPEND, count=None)
            sends = [asyncio.ensure_future(producer.send(b"v%d" % i)) for i in range(8)]
            await wait_until_async(lambda: held.queued() == 8)
        done = await bounded(asyncio.gather(*sends, return_exceptions=True))
        assert all(isinstance(d, fencing.OutcomeUnknown) for d in done), done
        for i, d in enumerate(done):
            ledger.failed(b"v%d" % i, d)
        assert unwrap(producer)._queues[0].standing.pending is not None
        rule.remove()
        md = await bounded(producer.send(b"after"))
        ledger.acked(b"after", md)
        partition, resolved = producer.last_resolution
        assert partition == 0 and resolved is not None
        assert [m.offset for m in resolved] == list(range(1, 9))
        assert md.offset == 9
    records = await check_ledger(topic, ledger)
    assert [r.value for r in records] == [b"first"] + [b"v%d" % i for i in range(8)] + [b"after"]
    verified(api.url, api.namespace, "t", ledger.attempts, exclusive=False)


async def test_some_replies_lost_under_send_async_and_threads(api: Api, proxy: Proxy) -> None:
    """send_async futures and send() callers share calls while 5 replies are lost: the
    resends carry the same merged batches; everything lands once at the acked offset."""
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=2)
    ledger = Ledger()
    sent: list[bytes] = []
    futures: list[tuple[bytes, int, Any]] = []
    async with await topic.producer(lease_ttl=3.0) as producer:
        await producer.send(b"first", partition=0)
        rule = proxy.drop_replies(APPEND, count=5)

        async def sender(w: int) -> None:
            for i in range(25):
                value, p = b"w%d-%d" % (w, i), (w + i) % 2
                sent.append(value)
                try:
                    md = await producer.send(value, partition=p)
                except fencing.FencingError as exc:
                    ledger.failed(value, exc, p)
                else:
                    ledger.acked(value, md, p)

        async def streamer() -> None:
            for i in range(100):
                value, p = b"f%d" % i, i % 2
                futures.append((value, p, await producer.send_async(value, partition=p)))
                if i % 10 == 0:
                    await asyncio.sleep(0.001)

        await bounded(asyncio.gather(*(sender(w) for w in range(6)), streamer()))
        await bounded(producer.flush())
        rule.remove()
        for value, p, future in futures:
            try:
                md = await bounded(result_of(future), 10)
            except fencing.FencingError as exc:
                ledger.failed(value, exc, p)
            else:
                ledger.acked(value, md, p)
        for p in (0, 1):  # settle whatever is still pending
            md = await producer.send(b"last%d" % p, partition=p)
            ledger.acked(b"last%d" % p, md, p)
        assert rule.hits == 5
    ledger.check_one_answer_each(sent + [v for v, _, _ in futures])
    assert {o for a in ledger.answers.values() for o in a} <= {"acked", "unknown"}
    await check_ledger(topic, ledger, partitions=2)
    verified(api.url, api.namespace, "t", ledger.attempts, exclusive=False)


@pytest.mark.usefixtures("no_recheck")
def test_lost_replies_under_chained_callers_answer_each_once_and_never_duplicate(
    pclient: fencing.Client, proxy: Proxy, client: fencing.Client
) -> None:
    """Replies of appends are lost (the connection closes) while threads group-commit:
    each caller gets its metadata or OutcomeUnknown, once; nobody hangs; after resolve()
    the log holds every acked value at its offset and no value twice."""
    topic = pclient.topic("t", partitions=1)
    ledger = Answers()
    with topic.producer(lease_ttl=4.0) as producer:
        producer.send(b"warm", partition=0)

        def sender(i: int) -> Callable[[], None]:
            def run() -> None:
                for n in range(30):
                    value = b"s%d-%d" % (i, n)
                    try:
                        ledger.put(value, 0, producer.send(value, partition=0))
                    except fencing.FencingError as exc:
                        ledger.put(value, 0, exc)

            return run

        with proxy.drop_replies(APPEND, count=4) as lost, proxy.observe(APPEND) as seen:
            run_threads([sender(i) for i in range(6)], timeout=40)
        assert lost.hits == 4
        assert seen.hits < 6 * 30  # (groups were formed)
        producer.resolve(0)
        producer.send(b"after", partition=0)
    # (a resend after a lost reply is answered from the dedup window: most are acked)
    unknown = [a for _, a in ledger.answers.values() if not isinstance(a, fencing.RecordMetadata)]
    assert all(isinstance(a, fencing.OutcomeUnknown) for a in unknown)
    assert len(ledger.answers) == 6 * 30
    ledger.check_against(client.topic("t"), 1)
    report = verify_log(client, "t", attempts=ledger.attempts(), exclusive=False)
    assert report.ok, report.summary()

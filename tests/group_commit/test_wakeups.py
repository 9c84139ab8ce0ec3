"""Callers queued on a partition are woken, never left asleep: the sender wakes the first
answered caller and each wakes the next (a chain), and a lingering ``send_async()`` record
at the queue's head never keeps a ``send()`` behind it waiting. The queued callers' own
re-check is a minute here (``no_recheck``), so a lost wake-up shows as a caller that does
not return by its deadline."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

import fencing
import fencing.aio
from fencing._async import partition_queue as aio_queue
from fencing._sync import partition_queue as sync_queue
from fencing.verify import Attempt, verify_log

from ..conftest import ServerInfo
from ..support.group_commit import Answers, Gate, run_threads, sender, threads_sending
from ..support.polling import wait_until


@pytest.mark.usefixtures("no_recheck")
def test_every_chained_caller_is_woken_and_the_log_holds_each_send_once(
    client: fencing.Client,
) -> None:
    topic = client.topic("t", partitions=1)
    with topic.producer() as producer:
        results, errors = threads_sending(producer, threads=8, each=150)
    assert not errors
    offsets = sorted(md.offset for r in results for md in r)
    assert offsets == list(range(8 * 150))
    records = topic.reader(0, start_offset="earliest").read(max_records=2000)
    by_offset = {r.offset: r.value for r in records}
    for i, mine in enumerate(results):
        assert [by_offset[md.offset] for md in mine] == [b"t%d-%d" % (i, n) for n in range(150)]
    attempts = [
        Attempt(by_offset[md.offset], 0, "acked", md.offset, md.epoch)
        for mine in results
        for md in mine
    ]
    report = verify_log(client, "t", attempts=attempts, exclusive=False)
    assert report.ok, report.summary()


def test_a_lone_caller_does_not_wait_for_a_chain(client: fencing.Client) -> None:
    # One thread: nobody else is answered, no chain, no wait: the sends are one call each.
    topic = client.topic("t", partitions=1)
    with topic.producer() as producer:
        for i in range(20):
            assert producer.send(b"%d" % i, partition=0).offset == i
        assert producer._queues[0].sending.to_wake is None


@pytest.mark.usefixtures("no_recheck")
def test_mixed_send_send_batch_and_send_async_threads_each_get_their_own_offsets(
    client: fencing.Client,
) -> None:
    """Threads on two partitions, some with send(), some send_batch() of 1-4 records, some
    send_async() with a linger: every wake-up comes, each caller its own metadata, the
    log holds each value once at the offset its caller was told."""
    topic = client.topic("t", partitions=2)
    ledger = Answers()
    with topic.producer(linger_ms=1, batch_size=256) as producer:

        def sender(i: int) -> Callable[[], None]:
            def run() -> None:
                rng = random.Random(i)
                for n in range(40):
                    p = rng.randrange(2)
                    if i % 3 == 0:
                        value = b"s%d-%d" % (i, n)
                        ledger.put(value, p, producer.send(value, partition=p))
                    elif i % 3 == 1:
                        values = [b"b%d-%d-%d" % (i, n, k) for k in range(rng.randint(1, 4))]
                        mds = producer.send_batch(values, partition=p)
                        assert [md.offset for md in mds] == list(
                            range(mds[0].offset, mds[0].offset + len(values))
                        )
                        for value, md in zip(values, mds, strict=True):
                            ledger.put(value, p, md)
                    else:
                        value = b"a%d-%d" % (i, n)
                        future = producer.send_async(value, partition=p)

                        def record(f: Any, v: bytes = value, p: int = p) -> None:
                            ledger.put(v, p, f.result())

                        future.add_done_callback(record)

            return run

        run_threads([sender(i) for i in range(9)])
        producer.flush()
    singles = {v for v in ledger.answers if not v.startswith(b"b")}
    assert singles == {
        b"%s%d-%d" % (b"s" if i % 3 == 0 else b"a", i, n)
        for i in range(9)
        if i % 3 != 1
        for n in range(40)
    }
    batches = {v.rsplit(b"-", 1)[0] for v in ledger.answers if v.startswith(b"b")}
    assert batches == {b"b%d-%d" % (i, n) for i in range(9) if i % 3 == 1 for n in range(40)}
    ledger.check_against(topic, 2)
    assert all(isinstance(a, fencing.RecordMetadata) for _, a in ledger.answers.values())
    report = verify_log(client, "t", attempts=ledger.attempts(), exclusive=False)
    assert report.ok, report.summary()


@pytest.mark.usefixtures("restore_sigint")
@pytest.mark.usefixtures("no_recheck")
def test_a_send_queued_behind_a_lingering_send_async_record_is_woken(
    client: fencing.Client,
) -> None:
    """A producer with linger_ms (records of send_async() wait for more) is also used by threads
    calling send(). A leader serves its own call and then 8 more for the callers queued
    meanwhile (_SERVE_AFTER_OWN), and lets the lock go with more queued: at its head a
    send_async() record, behind it a send() caller.

    The send() caller takes the queue at once (a send never waits for the linger: it carries the
    lingering records with it)."""
    topic = client.topic("t", partitions=1)
    with topic.producer(linger_ms=60_000, batch_size=10**9) as producer:
        first = producer.send_async(b"0", partition=0)
        producer.flush()
        assert first.result(timeout=5).offset == 0
        standing = producer._queues[0]
        gate = Gate(producer)
        out: dict[bytes, Any] = {}
        threads_ = [sender(producer, b"lead", out)]
        gate.wait_arrival()  # the leader's own call
        for k in range(sync_queue.SERVE_AFTER_OWN):
            value = b"t%d" % k
            threads_.append(sender(producer, value, out))
            wait_until(lambda: len(standing.queue) == 1, interval=0.001)
            gate.let_go()
            gate.wait_arrival()  # extra call k + 1, carrying t<k>
        lingering = producer.send_async(b"x", partition=0)
        wait_until(lambda: producer._wakeup.lingering, interval=0.001)
        late = sender(producer, b"s", out)
        wait_until(lambda: len(standing.queue) == 2, interval=0.001)
        gate.active = False
        gate.let_go()  # the 8th extra call is answered: the leader lets the lock go
        late.join(5)
        assert b"s" in out, "a send() queued behind a lingering record was never woken"
        assert lingering.result(timeout=5).offset == out[b"s"].offset - 1


@pytest.mark.usefixtures("restore_sigint")
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_task_send_queued_behind_a_lingering_record_is_woken(
    server: ServerInfo, namespace: str, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    """asyncio twin of test_a_send_queued_behind_a_lingering_send_async_record_is_woken: a holder
    of the partition's lock (a flush(), resolve(), or a leader past its extra calls; here
    the test) lets it go with a lingering send_async() record at the queue's head and a
    send() task behind it.

    The send() task takes the queue at once."""
    monkeypatch.setattr(aio_queue, "RECHECK_SECONDS", 60.0)
    client = fencing.aio.Client.from_url(server.url, namespace=namespace)
    try:
        topic = client.topic("t", partitions=1)
        producer = await topic.producer(linger_ms=60_000, batch_size=10**9)
        first = await producer.send_async(b"0", partition=0)
        await producer.flush()
        assert first.result().offset == 0
        standing = producer._queues[0]
        await standing.lock.acquire()  # a holder that does not serve the queue
        lingering = await producer.send_async(b"x", partition=0)
        late = asyncio.ensure_future(producer.send(b"s", partition=0))
        while len(standing.queue) < 2:
            await asyncio.sleep(0)
        standing.lock.release()
        standing.wake_head()  # what _holding() does as it lets go
        done, _ = await asyncio.wait([late], timeout=3)
        late.cancel()
        assert done, "a send() task queued behind a lingering record was never woken"
        assert (await late).offset == 2 and lingering.result().offset == 1
        await producer.close()
    finally:
        await client.close()

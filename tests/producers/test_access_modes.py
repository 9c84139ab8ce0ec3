"""Every cell of the access-mode table (README) and the per-partition epoch."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

import fencing
import fencing.aio
from fencing import AccessMode, Client, ProducerBusy, ProducerFenced
from fencing import _protocol as protocol
from fencing._keys import slot_of
from tests.support.internals import context_of, metadata_of

from ..support.clock import server_ms, wait_server_past
from ..support.flavours import Api, unwrap
from ..support.logs import values_of
from ..support.polling import wait_until

SHARED = AccessMode.SHARED
EXCLUSIVE = AccessMode.EXCLUSIVE
WAIT = AccessMode.WAIT_FOR_EXCLUSIVE
FENCE = AccessMode.EXCLUSIVE_WITH_FENCING


def row(raw: redis.Redis, client: Client, topic: str, partition: int = 0) -> dict[str, str]:
    data = raw.hgetall(client.keys.partition(topic, partition).owner)
    return {k.decode(): v.decode() for k, v in data.items()}


def stop_renewing(producer: fencing.Producer) -> None:
    """What a paused (GC, SIGSTOP) process looks like from outside: no more renewals."""
    assert producer._renewal is not None
    producer._renewal.cancel()


def in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # handed to the test thread
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def queued(raw: redis.Redis, client: Client, topic: str, count: int) -> None:
    waiters = client.keys.partition(topic, 0).waiters
    wait_until(lambda: raw.zcard(waiters) >= count, timeout=10)


# -- SHARED ---------------------------------------------------------------------------------


def test_shared_producers_append_together_under_one_epoch(client: Client) -> None:
    topic = client.topic("t", partitions=1)
    a, b = topic.producer(), topic.producer(SHARED)
    assert (a.epoch(0), b.epoch(0)) == (0, 0)  # no exclusive regime ever: no bump
    mds = [a.send(b"a"), b.send(b"b"), a.send(b"a")]
    assert [m.offset for m in mds] == [0, 1, 2]
    records = topic.reader(0, 0).read()
    assert [(r.epoch, r.producer_id) for r in records] == [
        (0, a.producer_id),
        (0, b.producer_id),
        (0, a.producer_id),
    ]


def test_shared_refused_while_an_exclusive_holder_lives(client: Client) -> None:
    topic = client.topic("t", partitions=1)
    holder = topic.producer(EXCLUSIVE, name="boss")
    with pytest.raises(ProducerBusy) as info:
        topic.producer(SHARED)
    assert (info.value.reason, info.value.holder_label) == ("exclusive", "boss")
    assert 0 < info.value.remaining <= 10
    holder.close()
    assert topic.producer(SHARED).epoch(0) == 2  # first shared after exclusive: epoch + 1


def test_shared_refused_while_a_waiter_is_queued(client: Client, raw: redis.Redis) -> None:
    topic = client.topic("t", partitions=1)
    holder = topic.producer(EXCLUSIVE)
    thread, out = in_thread(lambda: topic.producer(WAIT, wait_timeout=20))
    queued(raw, client, "t", 1)
    holder_gone = threading.Event()
    with pytest.raises(ProducerBusy) as info:
        topic.producer(SHARED)
    assert info.value.reason in ("exclusive", "waiting")
    holder.close()
    holder_gone.set()
    thread.join(20)
    (waiter,) = out
    assert isinstance(waiter, fencing.Producer)
    with pytest.raises(ProducerBusy) as info:
        topic.producer(SHARED)
    assert info.value.reason == "exclusive"


def test_shared_send_refused_once_the_epoch_moves(client: Client, raw: redis.Redis) -> None:
    topic = client.topic("t", partitions=1)
    shared = topic.producer(SHARED, lease_ttl=0.3)
    shared.send(b"before")
    stop_renewing(shared)  # paused past its lease
    before = raw.zscore(client.keys.partition("t", 0).shared, shared.session)
    assert before is not None
    wait_server_past(raw, int(before))
    boss = topic.producer(EXCLUSIVE)  # allowed: the shared lease lapsed
    assert boss.epoch(0) == 1
    with pytest.raises(ProducerFenced) as info:
        shared.send(b"after")
    assert (info.value.epoch, info.value.current_epoch) == (0, 1)
    assert [r.value for r in topic.reader(0, 0).read()] == [b"before"]


# -- EXCLUSIVE ------------------------------------------------------------------------------


@pytest.mark.parametrize("other", [EXCLUSIVE, SHARED, WAIT])
def test_exclusive_refused_at_once_while_another_producer_lives(
    client: Client, raw: redis.Redis, other: AccessMode
) -> None:
    topic = client.topic("t", partitions=1)
    thread = None
    if other is WAIT:
        topic.producer(EXCLUSIVE)  # so the waiter has to queue
        thread, _ = in_thread(lambda: topic.producer(WAIT, wait_timeout=1))
        queued(raw, client, "t", 1)
    else:
        topic.producer(other)
    waiters = client.keys.partition("t", 0).waiters
    queue_before = raw.zrange(waiters, 0, -1)
    with pytest.raises(ProducerBusy):
        topic.producer(EXCLUSIVE)
    assert raw.zrange(waiters, 0, -1) == queue_before  # refused at once, never queued
    if thread is not None:
        thread.join(10)


def test_exclusive_takes_epoch_plus_one_and_only_it_appends(client: Client) -> None:
    topic = client.topic("t", partitions=1)
    first = topic.producer(EXCLUSIVE)
    assert first.epoch(0) == 1
    first.send(b"1")
    first.close()
    second = topic.producer(EXCLUSIVE)
    assert second.epoch(0) == 2
    with pytest.raises(fencing.InvalidArgument, match="closed"):
        first.send(b"late")
    shared_view = client.topic("t").producer  # another producer cannot even register
    with pytest.raises(ProducerBusy):
        shared_view(SHARED)
    assert second.send(b"2").epoch == 2


def test_close_releases_at_once(client: Client, raw: redis.Redis) -> None:
    topic = client.topic("t", partitions=1)
    holder = topic.producer(EXCLUSIVE, lease_ttl=30)
    holder.close()
    assert row(raw, client, "t")["session"] == ""
    assert topic.producer(EXCLUSIVE).epoch(0) == 2  # no wait for the 30 s lease


def test_exclusive_on_several_partitions_releases_what_it_took_on_refusal(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("t", partitions=4)
    topic.open()
    # Another exclusive producer holds partition 2 only (registered with the raw script).
    pk = client.keys.partition("t", 2)
    call = protocol.producer.producer_open(
        pk,
        session="other",
        label="other",
        mode="exclusive",
        ttl_ms=30_000,
        new_incarnation="inc",
        seen_incarnation="",
        wgen=None,
        session_channel_prefix=pk.session_prefix,
        partition_incarnation=metadata_of(topic).incarnation_of(2),
    )
    context_of(client).driver(1.0).execute(call, context_of(client).budget_default())
    with pytest.raises(ProducerBusy) as info:
        topic.producer(EXCLUSIVE)
    assert info.value.partition == 2
    for p in (0, 1, 3):  # what it took before the refusal (slot order) was released again
        assert row(raw, client, "t", p).get("session", "") == ""
    assert row(raw, client, "t", 2)["session"] == "other"


# -- WAIT_FOR_EXCLUSIVE ---------------------------------------------------------------------


def test_waiters_are_served_in_fifo_order(client: Client, raw: redis.Redis) -> None:
    topic = client.topic("t", partitions=1)
    holder = topic.producer(EXCLUSIVE)
    threads = []
    outs = []
    for i in range(3):
        thread, out = in_thread(lambda i=i: topic.producer(WAIT, name=f"w{i}", wait_timeout=30))
        threads.append(thread)
        outs.append(out)
        queued(raw, client, "t", i + 1)  # arrival order is known
    epochs = []
    current = holder
    for thread, out in zip(threads, outs, strict=True):
        current.close()
        thread.join(20)
        (current,) = out  # type: ignore[assignment]
        assert isinstance(current, fencing.Producer)
        epochs.append((current.name, current.epoch(0)))
    assert epochs == [("w0", 2), ("w1", 3), ("w2", 4)]


def test_waiter_is_woken_by_close_before_the_lease_would_lapse(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("t", partitions=1)
    holder = topic.producer(EXCLUSIVE, lease_ttl=30)
    lease_end = int(row(raw, client, "t")["expires"])
    thread, out = in_thread(lambda: topic.producer(WAIT, wait_timeout=20))
    queued(raw, client, "t", 1)
    holder.close()
    thread.join(20)
    (waiter,) = out
    assert isinstance(waiter, fencing.Producer)
    assert server_ms(raw) < lease_end  # woken by the release, not by the lease running out


def test_waiter_takes_over_when_the_holder_stops_renewing(client: Client, raw: redis.Redis) -> None:
    topic = client.topic("t", partitions=1)
    holder = topic.producer(EXCLUSIVE, lease_ttl=0.5)
    holder.send(b"h")
    stop_renewing(holder)
    waiter = topic.producer(WAIT, wait_timeout=20)
    assert waiter.epoch(0) == 2
    assert int(row(raw, client, "t")["gen"]) == 2
    with pytest.raises(ProducerFenced):
        holder.send(b"late")


def test_wait_timeout_gives_busy_and_leaves_the_queue(client: Client, raw: redis.Redis) -> None:
    topic = client.topic("t", partitions=1)
    topic.producer(EXCLUSIVE)
    with pytest.raises(ProducerBusy) as info:
        topic.producer(WAIT, wait_timeout=0.3)
    assert info.value.reason == "waiting"
    assert raw.zcard(client.keys.partition("t", 0).waiters) == 0


# -- EXCLUSIVE_WITH_FENCING -----------------------------------------------------------------


def test_fencing_takeover_fences_holder_waiters_and_shared(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("t", partitions=1)
    holder = topic.producer(EXCLUSIVE)
    holder.send(b"h")
    thread, out = in_thread(lambda: topic.producer(WAIT, wait_timeout=30))
    queued(raw, client, "t", 1)
    boss = topic.producer(FENCE, name="boss")
    assert boss.epoch(0) == 2
    with pytest.raises(ProducerFenced):
        holder.send(b"late")
    thread.join(20)
    (waiter_result,) = out
    assert isinstance(waiter_result, ProducerFenced)
    boss.send(b"b")
    assert [(r.value, r.epoch) for r in topic.reader(0, 0).read()] == [(b"h", 1), (b"b", 2)]


def test_fencing_takeover_fences_shared_producers(client: Client) -> None:
    topic = client.topic("t", partitions=1)
    shared = [topic.producer(SHARED) for _ in range(3)]
    for p in shared:
        p.send(b"s")
    boss = topic.producer(FENCE)
    assert boss.epoch(0) == 1
    for p in shared:
        with pytest.raises(ProducerFenced):
            p.send(b"late")


# -- epochs and fencing ---------------------------------------------------------------------


def test_the_same_producer_coming_back_first_keeps_its_epoch(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("t", partitions=1)
    producer = topic.producer(EXCLUSIVE, lease_ttl=0.3)
    producer.send(b"1")
    stop_renewing(producer)
    wait_server_past(raw, int(row(raw, client, "t")["expires"]))
    # Nobody took over: the producer's next send succeeds in the same epoch (PIP-68).
    assert producer.send(b"2").epoch == 1
    assert int(row(raw, client, "t")["expires"]) > server_ms(raw)  # the send renewed it


def test_a_new_producer_never_inherits_an_epoch(client: Client, raw: redis.Redis) -> None:
    topic = client.topic("t", partitions=1)
    old = topic.producer(EXCLUSIVE, name="same", lease_ttl=0.3)
    stop_renewing(old)
    wait_server_past(raw, int(row(raw, client, "t")["expires"]))
    new = topic.producer(EXCLUSIVE, name="same")
    assert new.epoch(0) == 2
    with pytest.raises(ProducerFenced):
        old.send(b"x")


def test_fenced_is_permanent_and_costs_no_round_trip(client: Client, raw: redis.Redis) -> None:
    topic = client.topic("t", partitions=1)
    old = topic.producer(EXCLUSIVE)
    topic.producer(FENCE)
    with pytest.raises(ProducerFenced):
        old.send(b"x")

    def evalsha_calls() -> int:
        stats = raw.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

    before = evalsha_calls()
    for _ in range(5):
        with pytest.raises(ProducerFenced):
            old.send(b"x")
    assert evalsha_calls() == before
    assert old.fenced


def test_every_record_carries_its_epoch_and_producer_id(client: Client) -> None:
    topic = client.topic("t", partitions=1)
    a = topic.producer(EXCLUSIVE)
    a.send_batch([b"a1", b"a2"])
    a.close()
    b = topic.producer(WAIT)
    b.send(b"b1")
    got = [(r.value, r.epoch, r.producer_id) for r in topic.reader(0, 0).read()]
    assert got == [
        (b"a1", 1, a.producer_id),
        (b"a2", 1, a.producer_id),
        (b"b1", 2, b.producer_id),
    ]


def test_one_producer_is_safe_to_share_between_threads(client: Client) -> None:
    topic = client.topic("t", partitions=2)
    producer = topic.producer(EXCLUSIVE)
    errors: list[BaseException] = []

    def send(worker: int) -> None:
        try:
            for i in range(40):
                producer.send(f"{worker}:{i}".encode(), partition=i % 2)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    for p in (0, 1):
        records = topic.reader(p, 0).read(max_records=1000)
        assert [r.offset for r in records] == list(range(160))  # contiguous, no duplicates
        assert len({r.value for r in records}) == 160
        per_worker: dict[str, list[int]] = {}
        for r in records:
            worker, i = r.value.decode().split(":")
            per_worker.setdefault(worker, []).append(int(i))
        assert all(seq == sorted(seq) for seq in per_worker.values())  # each thread in order
    assert producer.state.sequences == {0: 160, 1: 160}


def test_only_a_producer_of_the_same_name_takes_over_a_live_holder(client: Client) -> None:
    topic = client.topic("t", partitions=1)
    holder = topic.producer(AccessMode.EXCLUSIVE)
    with pytest.raises(ProducerBusy):
        topic.producer(AccessMode.EXCLUSIVE, name=f"producer-{holder.producer_id}")
    holder.send(b"still mine")


def test_a_renewal_racing_close_never_registers_a_closed_shared_producer(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("t", partitions=1)
    shared = topic.producer(lease_ttl=30)
    standing = shared._queues[0].standing
    shared.close()
    call = protocol.producer.producer_renew(
        standing.pk,
        session=shared.session,
        mode="s",
        epoch=standing.writer.epoch,
        ttl_ms=30_000,
        incarnation=standing.writer.row_incarnation,
        pid=standing.pid,
        pid_generation=standing.generation,
        name=None,
        partition_incarnation=metadata_of(topic).incarnation_of(0),
    )
    assert context_of(client).driver(1.0).execute(call, context_of(client).budget_default()) == (
        0,
        0,
    )
    assert raw.zcard(standing.pk.shared) == 0
    assert topic.producer(AccessMode.EXCLUSIVE).epoch(0) == 1  # no 30 s wait


def test_closing_a_producer_that_waits_leaves_the_queue(client: Client, raw: redis.Redis) -> None:
    topic = client.topic("t", partitions=1)
    topic.producer(AccessMode.EXCLUSIVE)
    waiter = fencing.Producer(topic, AccessMode.WAIT_FOR_EXCLUSIVE, lease_ttl=0.6)
    out: list[object] = []

    def open_it() -> None:
        try:
            out.append(waiter.open())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=open_it)
    thread.start()
    waiters = client.keys.partition("t", 0).waiters
    wait_until(lambda: raw.zcard(waiters) == 1)
    waiter.close()
    thread.join(10)
    (result,) = out
    assert isinstance(result, ProducerBusy)
    assert raw.zcard(waiters) == 0


def test_a_closed_producers_state_and_epochs_can_still_be_read(client: Client) -> None:
    topic = client.topic("t", partitions=2)
    with topic.producer(AccessMode.EXCLUSIVE) as p:
        p.send(b"a", partition=1)
    assert p.state.sequences == {0: 0, 1: 1}
    assert p.epoch(1) == 1
    with pytest.raises(fencing.InvalidArgument, match="closed"):
        p.send(b"b", partition=1)


def test_an_incarnation_fenced_by_resume_leaves_so_its_successor_gets_in(
    client: Client,
) -> None:
    topic = client.topic("t", partitions=1)
    old = topic.producer(AccessMode.EXCLUSIVE, lease_ttl=0.9)
    old.send(b"a")
    epoch = old.epoch(0)
    # The successor resumes the old one's state and queues behind its lease. The old one is
    # fenced at once (PID generation); its renewal must notice and let go.
    new = topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, resume=old.state, wait_timeout=5)
    assert new.epoch(0) == epoch + 1
    assert old.fenced
    with pytest.raises(fencing.ProducerFenced):
        old.send(b"zombie")
    new.send(b"b")
    assert values_of(topic) == [b"a", b"b"]


def test_a_shared_incarnation_fenced_by_its_name_stops_renewing(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("t", partitions=1)
    old = topic.producer(name="job", lease_ttl=0.6)
    old.send(b"a")
    new = topic.producer(name="job", lease_ttl=30)
    shared = metadata_of(topic).partition_keys(0).shared
    wait_until(lambda: old.fenced, timeout=5)  # its next renewal (every ttl/3) finds out
    wait_until(lambda: raw.zcard(shared) == 1, timeout=5)  # and it left
    assert raw.zrange(shared, 0, -1) == [new.session.encode()]
    new.send(b"b")


def keeper_tasks(client: Any) -> int:
    keeper = context_of(client).keeper
    if hasattr(keeper, "_tasks"):  # asyncio: one task per schedule
        return sum(1 for t in keeper._tasks if not t.cancelled)
    return sum(1 for _, _, t in keeper._heap if not t.cancelled)  # sync: a heap


async def test_failed_shared_open_leaves_no_renewal_task(api: Api) -> None:
    """A SHARED open that fails (an exclusive holder lives) leaves no renewal task behind: a
    service retrying ``topic.producer()`` never piles up one task (and one round trip per
    partition every ttl/3) per attempt."""
    client = api.client()
    topic = client.topic("t", partitions=2)
    await topic.open()
    holder_client = api.client()
    holder_topic = holder_client.topic("t")
    await holder_topic.open()
    holder = await holder_topic.producer(AccessMode.EXCLUSIVE, lease_ttl=30.0)
    # The partition a producer takes first (ascending slot) is free again; the other one
    # is still held exclusively, so a SHARED open gets the first and is refused the second.
    first = min(
        (metadata_of(holder_topic).partition_keys(p) for p in (0, 1)),
        key=lambda k: slot_of(k.owner),
    )
    lease, epoch = unwrap(holder)._lease, holder.epoch(first.partition)
    if isinstance(unwrap(holder), fencing.aio.Producer):
        await lease.leave(first, "x", epoch)
    else:
        await asyncio.to_thread(lease.leave, first, "x", epoch)
    try:
        before = keeper_tasks(client)
        for _ in range(3):
            with pytest.raises(ProducerBusy):
                await topic.producer(AccessMode.SHARED, lease_ttl=0.3)
        await asyncio.sleep(0.5)  # a few renewal turns
        assert keeper_tasks(client) == before, "failed opens left renewal tasks running"
    finally:
        await holder.close()

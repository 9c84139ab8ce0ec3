"""Lost replies, lost requests and cancelled tasks around the fresh PID an idle producer
takes once its state expired: a partition is never wedged by the first send after the
expiry, a batch is settled as "did not land" only when that is proven (the server reads the
expired state it still stores: a batch in its window landed, one past its last sequence
never did), a lost allocation wastes an id only, and nothing is written twice, whatever
the clocks say.

Faults go through :class:`fencing.faults.Proxy` on a client with short socket timeouts
(``fclient``: a retry budget of about a second); the log is read back without the proxy.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

import fencing
import fencing.aio
from fencing.faults import Proxy
from tests.support.internals import metadata_of

from ..conftest import ServerInfo
from ..support.fresh_pid import (
    LEASE_TTL,
    SHORT_LEASE,
    expire,
    issued,
    log,
    lost_then_settled_as_not_landed,
    offsets,
    outcome,
    pid_state,
    plain_log,
)
from ..support.wire import APPEND, INCR

pytestmark = pytest.mark.one_server


def test_a_lost_reply_on_the_first_send_after_the_expiry_never_wedges_the_partition(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """A producer sends ``a`` on partition 0, is idle past its state's expiry, then sends ``b``:
    the append is refused 'idle' (nothing written) but its reply is lost; the driver's retry is
    refused 'idle' again, and, as an earlier attempt "may have been applied", the driver turns
    that into OutcomeUnknown. The producer keeps ``b`` pending under the old PID at sequence 1.

    The producer goes on. The retry's 'idle' refusal proves no attempt landed (one that had would
    have written the very state the refusal found missing), and the resolve that follows can tell
    it too: the batch was sent milliseconds ago, far less than half the expiry (README: only "a
    batch pending for longer than half the expiry, whose state is gone, resolves as
    UnknownProducerId"). So either ``b`` is sent under a fresh PID, or it is reported unknown and
    then resolved as "did not land", and the next send (``c``) lands, and never twice."""
    topic = fclient.topic("t", partitions=1)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        assert offsets(p.send_batch([b"a"], partition=0)) == [0]
        old = p.producer_id
        expire(raw, topic, old)
        with proxy.drop_replies(APPEND) as lost:
            try:
                b_offsets: list[int] | None = offsets(p.send_batch([b"b"], partition=0))
            except fencing.OutcomeUnknown:
                b_offsets = None
        assert lost.hits == 1
        if b_offsets is None:
            assert p.resolve(0) is None  # it did not land (and now never will)
        c = offsets(p.send_batch([b"c"], partition=0))
        values = [v for _, v, _ in log(client, "t")]
        if b_offsets is None:
            assert (values, c) == ([b"a", b"c"], [1])
        else:
            assert (values, b_offsets, c) == ([b"a", b"b", b"c"], [1], [2])


def test_a_failed_pid_allocation_leaves_nothing_pending(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """The state expired while the producer was idle; its next send is refused 'idle' (nothing
    written, the reply arrives), and the fresh PID's INCR cannot reach Redis within its
    budget (a blip): _allocate_producer_id raises OutcomeUnknown.

    The send fails (the caller may be told Unavailable or OutcomeUnknown), and as nothing was
    written and the refusal said so, nothing is left pending: the next send, once Redis is
    back, takes the fresh PID and lands."""
    topic = fclient.topic("t", partitions=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        assert offsets(p.send_batch([b"a"], partition=0)) == [0]
        old = p.producer_id
        expire(raw, topic, old)
        with proxy.drop_requests(INCR, count=None) as dropped, pytest.raises(fencing.FencingError):
            p.send_batch([b"b"], partition=0)
        assert dropped.hits >= 1
        assert log(client, "t") == [(0, b"a", old)]
        assert offsets(p.send_batch([b"c"], partition=0)) == [1]
        fresh = p.producer_id
        assert fresh != old
        assert log(client, "t") == [(0, b"a", old), (1, b"c", fresh)]


def test_a_lost_reply_on_the_resend_under_the_fresh_pid_is_deduplicated(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """The first attempt is refused 'idle' (its reply arrives); the same group goes again as the
    fresh PID's first batch, and that reply is lost: the driver's retry is found in the
    fresh PID's window and answered with the original offset, written once."""
    topic = fclient.topic("t", partitions=1)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        p.send_batch([b"a"], partition=0)
        old = p.producer_id
        expire(raw, topic, old)
        rules: list[Any] = []
        take = p._ids.take_fresh

        def take_then_lose(standing: Any) -> None:
            take(standing)
            rules.append(proxy.drop_replies(APPEND))  # the resend's reply is lost

        p._ids.take_fresh = take_then_lose  # type: ignore[method-assign]
        with proxy.observe(APPEND) as seen:
            assert offsets(p.send_batch([b"b", b"c"], partition=0)) == [1, 2]
        (lost,) = rules
        proxy.clear()
        assert (lost.hits, seen.hits) == (1, 3)  # refused, resent (lost), retried
        fresh = p.producer_id
        assert fresh == old + 1
        assert offsets(p.send_batch([b"d"], partition=0)) == [3]
    assert log(client, "t") == [
        (0, b"a", old),
        (1, b"b", fresh),
        (2, b"c", fresh),
        (3, b"d", fresh),
    ]
    state = pid_state(raw, topic, fresh)
    assert (state.generation, state.last_sequence) == (0, 2)
    assert [list(w[:2]) for w in state.window] == [[0, 1], [2, 2]]
    assert pid_state(raw, topic, old) is None
    assert issued(raw, client) == fresh


def test_every_reply_of_the_resend_lost_resolves_as_landed_under_the_fresh_pid(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """As above, but every reply of the resend is lost: OutcomeUnknown, pending under the fresh PID
    at sequence 0; the next send resolves it under that PID (landed, once, its original
    offset) and goes on at sequence 1."""
    topic = fclient.topic("t", partitions=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        p.send_batch([b"a"], partition=0)
        old = p.producer_id
        expire(raw, topic, old)
        rules: list[Any] = []
        take = p._ids.take_fresh

        def take_then_lose(standing: Any) -> None:
            take(standing)
            rules.append(proxy.drop_replies(APPEND, count=None))

        p._ids.take_fresh = take_then_lose  # type: ignore[method-assign]
        with pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"b"], partition=0)
        proxy.clear()
        fresh = p.producer_id
        assert p._queues[0].standing.pending is not None and p._queues[0].standing.pid == fresh
        assert offsets(p.send_batch([b"c"], partition=0)) == [2]
        assert p.last_resolution == (0, [fencing.RecordMetadata("t", 0, 1, p.epoch(0))])
    assert log(client, "t") == [(0, b"a", old), (1, b"b", fresh), (2, b"c", fresh)]
    state = pid_state(raw, topic, fresh)
    assert (state.generation, state.last_sequence) == (0, 1)


def test_a_lost_reply_of_the_pid_allocation_wastes_an_id_only(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """The fresh PID's INCR is applied but its reply lost: the allocation is retried (a second id
    is drawn, the first never used by anyone); the group lands once under the second, from
    sequence 0."""
    topic = fclient.topic("t", partitions=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        p.send_batch([b"a"], partition=0)
        old = p.producer_id
        expire(raw, topic, old)
        with proxy.drop_replies(INCR) as lost:
            assert offsets(p.send_batch([b"b"], partition=0)) == [1]
        assert lost.hits == 1
        fresh = p.producer_id
        assert fresh == old + 2 == issued(raw, client)
    assert log(client, "t") == [(0, b"a", old), (1, b"b", fresh)]
    assert pid_state(raw, topic, old + 1) is None


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_task_cancelled_while_the_fresh_pid_is_drawn_stops_waiting_and_its_send_completes(
    server: ServerInfo, proxy: Proxy, namespace: str, raw: redis.Redis, anyio_backend: str
) -> None:
    """A task's send on an expired partition is refused 'idle'; the fresh PID's INCR hangs (request
    lost, connection mute) and the task is cancelled there. The task stops waiting; the
    send is the partition's, not the task's, and goes on: the INCR is retried on a fresh
    connection, and the cancelled record lands once under the fresh PID, then the second
    task's record queued behind it. The lost INCR drew nothing, the log has no gap."""
    client = fencing.aio.Client.from_url(proxy.url_for(server.url), namespace=namespace)
    try:
        topic = client.topic("t", partitions=1)
        producer = await topic.producer(lease_ttl=LEASE_TTL)
        await producer.send(b"a", partition=0)
        old = producer.producer_id
        expire(raw, topic, old)
        rule = proxy.drop_requests(INCR, close=False)
        first = asyncio.ensure_future(producer.send(b"x", partition=0))
        await asyncio.wait_for(asyncio.to_thread(rule.fired.wait, 5), 6)
        second = asyncio.ensure_future(producer.send(b"y", partition=0))
        while len(producer._queues[0].queue) < 1:
            await asyncio.sleep(0)
        first.cancel()
        proxy.clear()
        with pytest.raises(asyncio.CancelledError):
            await first
        md = await asyncio.wait_for(second, 10)
        assert md.offset == 2
        fresh = producer.producer_id
        assert fresh == old + 1
        assert offsets([await producer.send(b"z", partition=0)]) == [3]
        await producer.close()
        assert int(raw.get(client.keys.producer_ids()) or 0) == fresh  # the lost INCR drew none
    finally:
        await client.close()
    records = [(r.offset, r.value, r.producer_id) for r in plain_log(server, namespace)]
    assert records == [(0, b"a", old), (1, b"x", fresh), (2, b"y", fresh), (3, b"z", fresh)]


def test_every_reply_lost_on_the_first_send_after_the_expiry_never_wedges_the_partition(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """A producer sends ``a``, is idle past its state's expiry, then sends ``b`` while Redis's
    replies are lost (a blip of about a second): every attempt reaches the script and is refused
    'idle' (nothing written), every reply is lost, and the retry budget runs out: OutcomeUnknown,
    caused by a timeout, not by a refusal, and ``b`` pending under the old PID at sequence 1.

    Only "a batch pending for longer than half the expiry, whose state is gone, resolves as
    UnknownProducerId" (README), and this one was sent milliseconds ago: it is settled as "did
    not land" (had any attempt landed it would have written the state whose absence the script
    sees, and that state could not have expired since), or the producer takes the fresh PID;
    either way ``c`` lands next, at offset 1."""
    topic = fclient.topic("t", partitions=1, producer_state_ttl=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        assert offsets(p.send_batch([b"a"], partition=0)) == [0]
        old = p.producer_id
        # A real expiry (the rule reasons from the producer's own idle time, which the
        # helper's HDEL would not give): idle past the 1 s expiry.
        time.sleep(1.2)
        lost_then_settled_as_not_landed(p, proxy, client, old)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_task_cancelled_on_the_first_send_after_the_expiry_never_wedges_the_partition(
    server: ServerInfo, proxy: Proxy, namespace: str, raw: redis.Redis, anyio_backend: str
) -> None:
    """A task's send on a partition whose state expired reaches the script, which refuses it
    'idle' (nothing written); the reply is held (a mute connection) and the task is cancelled (a
    timeout of the caller's, a shutdown). The task stops waiting at once while its call is
    still out (the call is the partition's); the call's retries find no reply either, and
    the batch is left pending under the old PID at sequence 1: the producer cannot know
    the refusal.

    The next send settles it as "did not land" (sent milliseconds ago, no state: README's
    half-the-expiry rule) and goes on under the fresh PID: ``c`` at offset 1."""
    aclient = fencing.aio.Client.from_url(proxy.url_for(server.url), namespace=namespace)
    try:
        topic = aclient.topic("t", partitions=1, producer_state_ttl=1)
        producer = await topic.producer(lease_ttl=LEASE_TTL)
        await producer.send(b"a", partition=0)
        await asyncio.sleep(1.2)  # a real expiry, as the test above
        rule = proxy.drop_replies(APPEND, close=False)
        task = asyncio.ensure_future(producer.send(b"b", partition=0))
        await asyncio.wait_for(asyncio.to_thread(rule.fired.wait, 5), 6)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        proxy.clear()
        assert producer._queues[0].lock.locked()  # b's call is still out
        try:
            got: Any = (await producer.send(b"c", partition=0)).offset
        except fencing.FencingError as exc:
            got = (type(exc).__name__, getattr(exc, "reason", None))
        await producer.close()
    finally:
        await aclient.close()
    assert got == 1
    with fencing.Client.from_url(server.url, namespace=namespace) as c:
        assert [v for _, v, _ in log(c, "t")] == [b"a", b"c"]


def test_a_lost_reply_whose_attempt_landed_keeps_the_pid(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """The state is live; ``b``'s first attempt lands and its reply is lost; the retry finds it in
    the window (no 'idle' refusal): the original offset, no fresh PID, written once."""
    topic = fclient.topic("t", partitions=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        p.send_batch([b"a"], partition=0)
        old = p.producer_id
        with proxy.drop_replies(APPEND) as lost:
            assert offsets(p.send_batch([b"b"], partition=0)) == [1]
        assert lost.hits == 1
        assert p.producer_id == old == issued(raw, client)
        assert offsets(p.send_batch([b"c"], partition=0)) == [2]
    assert log(client, "t") == [(0, b"a", old), (1, b"b", old), (2, b"c", old)]


def test_resolve_settles_a_batch_that_did_not_land_under_the_retired_pid_then_moves(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """``r``'s request on partition 1 is lost
    (it never reaches Redis, the connection stays mute): OutcomeUnknown, pending under P0,
    whose state there is live. Partition 0 is idle past its expiry and takes P1. ``state``
    refuses; resolve(1) says "did not land" (P0's generation bumped there); state then names
    partition 1 at P1's 0, and ``s`` lands there under P1 from sequence 0, ``r`` nowhere."""
    topic = fclient.topic("t", partitions=2)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        p.send_batch([b"a"], partition=0)
        p.send_batch([b"b"], partition=1)
        old = p.producer_id
        drop = proxy.drop_requests(APPEND, count=None, close=False)
        with drop as dropped, pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"r"], partition=1)
        assert dropped.hits >= 1
        expire(raw, topic, old, 0)
        assert offsets(p.send_batch([b"c"], partition=0)) == [1]
        fresh = p.producer_id
        with pytest.raises(fencing.InvalidArgument, match=r"resolve\(1\)"):
            p.state  # noqa: B018
        assert p.resolve(1) is None
        state = p.state
        assert (state.producer_id, dict(state.sequences)) == (fresh, {0: 1, 1: 0})
        assert offsets(p.send_batch([b"s"], partition=1)) == [1]
    assert fresh == old + 1 == issued(raw, client)
    assert log(client, "t", 1) == [(0, b"b", old), (1, b"s", fresh)]
    stored = pid_state(raw, topic, old, 1)
    assert (stored.generation, stored.last_sequence) == (1, 0)


def sleep_until(deadline: float) -> None:
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


def server_clock_lags(raw: redis.Redis, topic: Any, pid: int, ms: int, partition: int = 0) -> None:
    """The server's clock, by which the PID's state expires, now runs ``ms`` behind the one
    it wrote the state by (a failover to a replica whose clock lags, an NTP step back): the
    same as the state's last write ``t`` being ``ms`` later (the field a script compares
    with TIME; the state string is "<g> <s> <t> <x> <o>|<window>")."""
    key = metadata_of(topic).partition_keys(partition).pids
    stored = raw.hget(key, str(pid)).decode()
    g, s, t, rest = stored.split(" ", 3)
    raw.hset(key, str(pid), f"{g} {s} {int(t) + ms} {rest}")


def test_a_server_clock_behind_the_producers_makes_a_landed_batch_settle_as_not_landed(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """A producer sends ``a`` on a topic that keeps state 1 s. Between that write and the next
    send, the server's clock falls 400 ms behind the elapsed time the client measures (a
    failover to a replica whose clock lags by 400 ms, or an NTP step back on the Redis host:
    Redis TIME is a wall clock). The producer is idle 1.15 s by its own monotonic clock, but
    only ~0.75 s by the server's: the state is live, so ``b`` (sequence 1) LANDS at offset
    1; every reply is lost (OutcomeUnknown, ``b`` pending). The state then really expires
    (1.2 s more) and the producer resolves.

    Resolve says ``b`` landed (offset 1: its PID's state is still stored, expired, with ``b`` in
    its window), or raises UnknownProducerId (the outcome cannot be known); never "did not
    land" for a batch that is in the log."""
    topic = fclient.topic("t", partitions=1, producer_state_ttl=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        assert offsets(p.send_batch([b"a"], partition=0)) == [0]
        old = p.producer_id
        last = time.monotonic()
        server_clock_lags(raw, topic, old, 400)
        sleep_until(last + 1.15)
        with proxy.drop_replies(APPEND, count=None) as lost, pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"b"], partition=0)
        assert lost.hits >= 1
        assert [v for _, v, _ in log(client, "t")] == [b"a", b"b"]  # b landed, at offset 1
        time.sleep(1.3)  # the state really expires (server clock)
        resolved = outcome(lambda: p.resolve(0))
        if resolved is None:  # told it did not land: the caller sends it again
            outcome(lambda: p.send_batch([b"b"], partition=0))
    values = [v for _, v, _ in log(client, "t")]
    landed = [fencing.RecordMetadata("t", 0, 1, 0)]
    # (Never None with values [a, b, b]: b written twice.)
    assert (resolved in (landed, ("UnknownProducerId", "pending-expired")), values) == (
        True,
        [b"a", b"b"],
    )


def test_a_duplicate_answer_does_not_count_as_a_write_for_the_idle_rule(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """A producer sends ``a``: the append lands at once, but its reply is lost on a mute
    connection; after the socket timeout (0.5 s) the driver's retry is answered from the window
    (a duplicate: nothing written) and the send returns offset 0. The producer is then idle until
    1.15 s after it sent ``a`` (after the write: state kept 1 s) and sends ``b``: the script
    refuses it 'idle' (nothing written) and every reply is lost (OutcomeUnknown, ``b`` pending at
    sequence 1).

    A batch sent longer than the expiry after the producer's last write there was refused, so it
    settles as "did not land" and the producer takes the fresh PID: ``b`` was sent 1.15 s after
    the producer's last write (the duplicate answer wrote nothing), so resolve says None and
    ``c`` lands at offset 1."""
    topic = fclient.topic("t", partitions=1, producer_state_ttl=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        sent_a = time.monotonic()
        with proxy.drop_replies(APPEND, close=False) as lost:
            assert offsets(p.send_batch([b"a"], partition=0)) == [0]
        assert lost.hits == 1
        answered_a = time.monotonic()
        old = p.producer_id
        sleep_until(sent_a + 1.15)  # idle 1.15 s after a's write by the server's clock
        # ... but less than ttl*1.02 + 0.05 after the duplicate answer (a socket timeout late)
        assert time.monotonic() - answered_a < 1.07
        lost_then_settled_as_not_landed(p, proxy, client, old)


def test_a_batch_sent_just_before_the_expiry_whose_requests_are_lost_never_wedges(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """A topic keeps state 4 s. A producer sends ``a``, is idle 3.4 s (its state still live),
    then sends ``b`` while the network loses its requests (a blip of a second): no attempt
    reaches Redis, OutcomeUnknown, ``b`` pending at sequence 1. The state expires during the
    blip; right after it the producer resolves, ~1 s after sending ``b``.

    Only "a batch pending for longer than half the expiry, whose state is gone, resolves as
    UnknownProducerId" (README); this one is pending ~1 s of a 4 s expiry, so it settles as "did
    not land" (had any attempt landed, at or after ``b`` was sent, its state would be live until
    4 s after that: its absence proves it did not; and no copy can land later: the expired
    generation-0 PID is refused 'idle'), and ``c`` lands at offset 1."""
    topic = fclient.topic("t", partitions=1, producer_state_ttl=4)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        assert offsets(p.send_batch([b"a"], partition=0)) == [0]
        last = time.monotonic()
        old = p.producer_id
        sleep_until(last + 3.4)
        sent_b = time.monotonic()
        drop = proxy.drop_requests(APPEND, count=None, close=False)
        with drop as dropped, pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"b"], partition=0)
        assert dropped.hits >= 1
        sleep_until(last + 4.15)  # the state expired (if the blip ended before)
        assert time.monotonic() - sent_b < 1.9  # pending less than half the expiry
        assert log(client, "t") == [(0, b"a", old)]  # nothing landed, provably
        resolved = outcome(lambda: p.resolve(0))
        sent = outcome(lambda: offsets(p.send_batch([b"c"], partition=0)))
    assert (resolved, sent) == (None, [1])
    assert [v for _, v, _ in log(client, "t")] == [b"a", b"c"]


def test_a_batch_that_landed_and_expired_since_is_never_settled_as_not_landed(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """``b`` is sent 0.5 s after ``a`` (state live): it lands, every reply is lost; the producer
    waits past the expiry before it resolves. The rule must not fire (sent 0.5 s after the
    last write): UnknownProducerId, never None, and nothing is written twice."""
    topic = fclient.topic("t", partitions=1, producer_state_ttl=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        p.send_batch([b"a"], partition=0)
        time.sleep(0.5)
        with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"b"], partition=0)
        time.sleep(1.3)
        resolved = outcome(lambda: p.resolve(0))
    # Since the server decides (resolve reads the expired state still stored): it landed,
    # at offset 1 - better than the client-clock rule's UnknownProducerId.
    assert resolved == [fencing.RecordMetadata("t", 0, 1, 0)]
    assert [v for _, v, _ in log(client, "t")] == [b"a", b"b"]


def test_a_resolution_that_found_the_batch_counts_as_the_last_write(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """``b`` lands with every reply lost; resolve(0) finds it (landed, offset 1) and stamps
    last_write. Idle past the expiry, ``c`` is refused 'idle' with every reply lost; resolve
    settles it as not landed and ``d`` lands under one fresh PID at sequence 0."""
    topic = fclient.topic("t", partitions=1, producer_state_ttl=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        p.send_batch([b"a"], partition=0)
        old = p.producer_id
        with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"b"], partition=0)
        assert offsets(p.resolve(0) or []) == [1]
        time.sleep(1.2)
        with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"c"], partition=0)
        assert p.resolve(0) is None
        assert offsets(p.send_batch([b"d"], partition=0)) == [2]
        same = p.producer_id
        state = p.state
    # Since the server decides: ``c`` is past the expired state's last sequence, so it
    # never landed; the resolution bumps the PID's generation there (a copy of ``c`` is
    # fenced) and the producer goes on under it at c's sequence, no fresh PID needed.
    assert same == old
    assert (state.producer_id, state.generations[0], dict(state.sequences)) == (old, 1, {0: 3})
    assert log(client, "t") == [(0, b"a", old), (1, b"b", old), (2, b"d", old)]


def test_lease_renewals_of_an_exclusive_producer_keep_no_state_alive(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """An exclusive producer renews its lease every 0.3 s while idle 1.2 s past a 1 s expiry:
    renewals (producer_renew-5.lua) never write the PID's state, so ``b`` is refused 'idle'
    (its replies lost) and the rule settling it as not landed is right: ``c`` lands at 1
    under the fresh PID, ``b`` nowhere."""
    topic = fclient.topic("t", partitions=1, producer_state_ttl=1)
    mode = fencing.AccessMode.EXCLUSIVE
    with topic.producer(access_mode=mode, lease_ttl=0.9) as p:
        p.send_batch([b"a"], partition=0)
        old = p.producer_id
        time.sleep(1.2)
        assert pid_state(raw, topic, old) is not None  # stored (renewals ran), but expired
        with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"b"], partition=0)
        resolved = outcome(lambda: p.resolve(0))
        sent = outcome(lambda: offsets(p.send_batch([b"c"], partition=0)))
        fresh = p.producer_id
    assert (resolved, sent) == (None, [1])
    assert log(client, "t") == [(0, b"a", old), (1, b"c", fresh)]


def test_the_rule_on_a_partition_still_under_the_retired_pid_adopts_the_fresh_one(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """Both partitions idle past a 1 s expiry. Partition 1's send (under P0) is refused 'idle' with
    every reply lost: pending there under P0. Partition 0's next send takes the fresh PID P1
    (P0 retired). resolve(1) settles the pending batch as not landed and moves partition 1
    to P1 without drawing another PID; its next send lands there under P1 at sequence 0,
    written once."""
    topic = fclient.topic("t", partitions=2, producer_state_ttl=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        p.send_batch([b"a0"], partition=0)
        p.send_batch([b"a1"], partition=1)
        old = p.producer_id
        time.sleep(1.2)
        with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"b1"], partition=1)
        assert offsets(p.send_batch([b"b0"], partition=0)) == [1]
        fresh = p.producer_id
        with pytest.raises(fencing.InvalidArgument, match=r"resolve\(1\)"):
            p.state  # noqa: B018
        assert p.resolve(1) is None
        assert offsets(p.send_batch([b"c1"], partition=1)) == [1]
        state = p.state
    assert fresh == old + 1 == p.producer_id
    assert (state.producer_id, dict(state.sequences)) == (fresh, {0: 1, 1: 1})
    assert log(client, "t", 1) == [(0, b"a1", old), (1, b"c1", fresh)]

"""Review s9c of b8c6921 (the fixes of review s9b to G5's fresh PID after an idle expiry,
Kafka KIP-360): holes and probes.

Tests marked HOLE failed on b8c6921 (fixed since) and say what a user does, what is
expected and what happened; the two wedge tests now let a real one-second expiry run out,
since the fix reads the expired state still stored (resolve-4.lua: a batch past its last
sequence never landed). Tests marked PROBE
attacked something that held and are kept as regressions.
Fixtures and helpers are those of tests/test_review_s9b.py: the expiry is made at once by
removing the PID's entry from the partition's ``pids`` hash and ``pid_expiry`` index
(``expire``), except in the probes that let a real one-second expiry run out; faults go
through :class:`fencing.faults.Proxy` on a client of the test's own, and the log is read
back with a client that does not go through the proxy.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis

import fencing
import fencing.aio
from fencing._sync import producer as sync_producer
from fencing.faults import Proxy
from fencing.testing import memory_client, memory_redis, memory_server

from .conftest import ServerInfo
from .support.fresh_pid import (
    APPEND,
    LEASE_TTL,
    SHORT_LEASE,
    expire,
    issued,
    log,
    lost_then_settled_as_not_landed,
    offsets,
    outcome,
    pid_state,
    wait_for,
)

# -- holes -----------------------------------------------------------------------------------


def test_every_reply_lost_on_the_first_send_after_the_expiry_never_wedges_the_partition(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """HOLE (a wedge). A producer sends ``a``, is idle past its state's expiry, then sends
    ``b`` while Redis's replies are lost (a blip of about a second): every attempt reaches
    the script and is refused 'idle' (nothing written), every reply is lost, and the retry
    budget runs out: OutcomeUnknown, caused by a timeout, not by a refusal. b8c6921 only
    looks behind an OutcomeUnknown whose ``__cause__`` is the 'idle' refusal
    (fencing/_async/producer.py:856-866 ``_idle_expired``), so ``b`` is left pending under
    the old PID at sequence 1 (``_refused`` -> ``_set_pending``, producer.py:825-827).

    Expected (README "A batch pending for longer than half the expiry, whose state is
    gone, resolves as UnknownProducerId": this one was sent milliseconds ago): it is
    settled as "did not land" (had any attempt landed it would have written the state
    whose absence the script sees, and that state could not have expired since), or the
    producer takes the fresh PID; either way ``c`` lands next, at offset 1.
    Got: resolve-4.lua:59 (``if first_s ~= 0 or pending_ms * 2 >= expiry_ms``) refuses any
    stateless pending batch past sequence 0: UnknownProducerId 'pending-expired'. The
    pending batch is never cleared (producer.py:731-737 keeps it on a FencingError), so
    resolve(0), and every later send on the partition, raise UnknownProducerId for good,
    though nothing is uncertain. (s9b's first hole, with all replies lost instead of one.)
    Fix: resolve-4.lua: a batch with no state sent less than half the expiry ago did not
    land whatever its first sequence (drop ``first_s ~= 0``; for an unnamed PID at
    generation 0 the producer should then take the fresh PID, as on an 'idle' refusal);
    or have the producer, on 'pending-expired' for such a batch at generation 0 sent less
    than half the expiry ago, drop it as not landed and take the fresh PID."""
    topic = fclient.topic("t", partitions=1, producer_state_ttl=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        assert offsets(p.send_batch([b"a"], partition=0)) == [0]
        old = p.producer_id
        # A real expiry (the fix reasons from the producer's own idle time, which the
        # helper's HDEL would not give): idle past the 1 s expiry.
        time.sleep(1.2)
        lost_then_settled_as_not_landed(p, proxy, client, old)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_task_cancelled_on_the_first_send_after_the_expiry_never_wedges_the_partition(
    server: ServerInfo, proxy: Proxy, namespace: str, raw: redis.Redis, anyio_backend: str
) -> None:
    """HOLE (a wedge, fencing.aio). A task's send on a partition whose state expired
    reaches the script, which refuses it 'idle' (nothing written); the reply is held (a
    mute connection) and the task is cancelled (a timeout of the caller's, a shutdown).
    The producer keeps the batch pending under the old PID at sequence 1 (producer.py
    ``_interrupted`` -> ``_set_pending``, :904-922): it cannot know the refusal.

    Expected: the next send settles it as "did not land" (sent milliseconds ago, no state:
    README's half-the-expiry rule) and goes on under the fresh PID: ``c`` at offset 1.
    Got: resolve-4.lua:59 refuses it 'pending-expired' (first sequence 1), the batch stays
    pending, and every later send on the partition raises UnknownProducerId.
    Fix: as the test above (one cause: resolve-4.lua's ``first_s ~= 0``)."""
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
        assert producer._standing[0].pending is not None  # b: sequence 1 under the old PID
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


class _OnSet:
    """A slot of ``_Standing`` as a data descriptor: ``then`` runs once, right after the
    slot is assigned on a partition the test names (another thread reading there)."""

    def __init__(self, slot: Any, partition: int, then: Any) -> None:
        self.slot, self.partition, self.then = slot, partition, then
        self.armed = False
        self.fired = False

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else self.slot.__get__(obj, owner)

    def __set__(self, obj: Any, value: Any) -> None:
        self.slot.__set__(obj, value)
        if self.armed and not self.fired and obj.pk.partition == self.partition:
            self.fired = True
            self.then()


def test_state_read_while_a_partition_moves_to_the_fresh_pid_never_pairs_it_with_old_sequences(
    client: fencing.Client, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HOLE (a thread interleaving, a record written twice). A copy job: P0 sent ``b`` on
    partition 1 (its sequence 1 next there); partition 0 was idle past its expiry and took
    the fresh PID P1. The job sends ``r`` on partition 1, which first moves it to P1
    (producer.py:738-739 -> ``_adopt_pid``, :896-902): ``standing.pid, standing.generation,
    standing.next_sequence = pid, 0, 0`` is three stores, and the interpreter may switch
    threads between them. Another thread checkpoints ``producer.state`` there (forced
    here by reading it from the store of ``generation``); ``r`` lands as P1's sequence 0
    at offset 1; the job crashes, and a new incarnation resumes the checkpoint and sends
    ``r`` again (its position is before ``r``).

    Expected: the checkpoint names partition 1 either with P0's real sequence, or at the
    fresh PID's 0, so the resent ``r`` is found in P1's window: offset 1, written once.
    Got: ``state`` (producer.py:1208-1230, ``moved`` at :1216) sees ``standing.pid``
    already P1, so the partition does not count as moved (``_moves``), and reports
    ``next_sequence``, still P0's 1, as P1's: the resumed incarnation sends ``r`` as
    P1's sequence 1, the next one after the ``r`` P1 wrote, and it lands a second time
    (offset 2).
    Fix: in ``_adopt_pid`` assign ``generation`` and ``next_sequence`` before ``pid`` (a
    read in between still sees the partition on a retired PID: moved, 0/0), or keep
    (pid, generation, next_sequence) in one tuple that ``state`` reads at once."""
    topic = client.topic("t", partitions=2)
    seen: list[fencing.ProducerState] = []
    x = topic.producer(lease_ttl=LEASE_TTL)
    try:
        assert offsets(x.send_batch([b"a"], partition=0)) == [0]
        assert offsets(x.send_batch([b"b"], partition=1)) == [0]
        old = x.producer_id
        expire(raw, topic, old, 0)
        assert offsets(x.send_batch([b"c"], partition=0)) == [1]
        fresh = x.producer_id
        assert fresh != old and x._standing[1].pid == old
        slot = sync_producer._Standing.__dict__["generation"]
        hook = _OnSet(slot, 1, lambda: seen.append(x.state))  # the checkpoint
        monkeypatch.setattr(sync_producer._Standing, "generation", hook)
        hook.armed = True
        assert offsets(x.send_batch([b"r"], partition=1)) == [1]
        monkeypatch.undo()
    finally:
        x.close()  # the crash
    (saved,) = seen
    named = (saved.producer_id, saved.next_sequence(1))
    with topic.producer(resume=saved, lease_ttl=LEASE_TTL) as y:
        resent = outcome(lambda: offsets(y.send_batch([b"r"], partition=1)))
    values = [v for _, v, _ in log(client, "t", 1)]
    # (named is (fresh, 1): P1 with P0's sequence; the resend lands again at offset 2.)
    assert (named in ((old, 1), (fresh, 0)), resent, values) == (True, [1], [b"b", b"r"])


# -- probes ----------------------------------------------------------------------------------


def test_two_threads_finding_the_expiry_on_two_partitions_draw_one_fresh_pid(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """PROBE. P0's state expired on partitions 0 and 1. Thread A's send on 0 is refused
    'idle' and draws the fresh PID; while that draw is out, thread B's send on 1 (still
    under P0) is refused 'idle' too and waits for the draw. One PID is drawn, both records
    land once under it from sequence 0, and state names it with 1/1."""
    topic = client.topic("t", partitions=2)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        p.send_batch([b"a0"], partition=0)
        p.send_batch([b"a1"], partition=1)
        old = p.producer_id
        expire(raw, topic, old, 0)
        expire(raw, topic, old, 1)
        entered: list[int] = []
        take = p._take_fresh_pid

        def record(standing: Any) -> None:
            entered.append(standing.pk.partition)
            take(standing)

        p._take_fresh_pid = record  # type: ignore[method-assign]
        allocate = client._allocate_producer_id
        draws: list[int] = []
        results: dict[str, Any] = {}

        def send_b() -> None:
            results["b"] = offsets(p.send_batch([b"b1"], partition=1))

        b = threading.Thread(target=send_b)

        def slow_allocate() -> int:
            if not draws:
                b.start()
                wait_for(lambda: 1 in entered)  # B was refused 'idle' under P0
                time.sleep(0.05)  # ... and waits for this draw
            draws.append(allocate())
            return draws[-1]

        client._allocate_producer_id = slow_allocate  # type: ignore[method-assign]
        try:
            results["a"] = offsets(p.send_batch([b"b0"], partition=0))
            b.join(5)
        finally:
            del client._allocate_producer_id
        fresh = p.producer_id
        state = p.state
    assert (results, sorted(entered), draws) == ({"a": [1], "b": [1]}, [0, 1], [fresh])
    assert fresh == old + 1 == issued(raw, client)
    assert (state.producer_id, dict(state.sequences)) == (fresh, {0: 1, 1: 1})
    for i in range(2):
        assert log(client, "t", i) == [(0, b"a%d" % i, old), (1, b"b%d" % i, fresh)]


def test_a_real_one_second_expiry_moves_every_partition_to_one_fresh_pid(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """PROBE. No helper: the topic keeps state 1 s, the producer is idle 1.2 s, so its
    state is still stored but past its expiry (read_pid treats it as none). The next sends
    on both partitions take one fresh PID from sequence 0, and the old one's state saved
    before the expiry is not resumable."""
    topic = client.topic("t", partitions=2, producer_state_ttl=1)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        p.send_batch([b"a0"], partition=0)
        p.send_batch([b"a1"], partition=1)
        old, saved = p.producer_id, p.state
        time.sleep(1.2)
        assert pid_state(raw, topic, old, 0) is not None  # stored, but expired
        assert offsets(p.send_batch([b"b0"], partition=0)) == [1]
        assert offsets(p.send_batch([b"b1"], partition=1)) == [1]
        fresh = p.producer_id
        state = p.state
        with pytest.raises(fencing.UnknownProducerId):
            topic.producer(resume=saved, lease_ttl=LEASE_TTL)
    assert fresh == old + 1 == issued(raw, client)
    assert (state.producer_id, dict(state.sequences)) == (fresh, {0: 1, 1: 1})
    for i in range(2):
        assert log(client, "t", i) == [(0, b"a%d" % i, old), (1, b"b%d" % i, fresh)]


def test_the_in_memory_client_takes_a_fresh_pid_on_a_real_expiry() -> None:
    """PROBE. fencing.testing's in-memory client with a topic keeping state 1 s: idle past
    it, the producer goes on under one fresh PID on both partitions, nothing written twice."""
    mem = memory_server()
    client, raw = memory_client(server=mem), memory_redis(server=mem)
    try:
        topic = client.topic("t", partitions=2, producer_state_ttl=1)
        with topic.producer(lease_ttl=LEASE_TTL) as p:
            p.send_batch([b"a0"], partition=0)
            p.send_batch([b"a1"], partition=1)
            old = p.producer_id
            time.sleep(1.2)
            assert offsets(p.send_batch([b"b1"], partition=1)) == [1]
            assert offsets(p.send_batch([b"b0", b"c0"], partition=0)) == [1, 2]
            fresh = p.producer_id
            state = p.state
        assert fresh == old + 1 == issued(raw, client)
        assert (state.producer_id, dict(state.sequences)) == (fresh, {0: 2, 1: 1})
        assert log(client, "t", 0) == [(0, b"a0", old), (1, b"b0", fresh), (2, b"c0", fresh)]
        assert log(client, "t", 1) == [(0, b"a1", old), (1, b"b1", fresh)]
    finally:
        client.close()


def test_a_lost_reply_whose_attempt_landed_keeps_the_pid(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """PROBE (the 'idle' time rule's other side). The state is live; ``b``'s first attempt
    lands and its reply is lost; the retry finds it in the window (no 'idle' refusal):
    the original offset, no fresh PID, written once."""
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
    """PROBE (resolve(p) and state around a move). ``r``'s request on partition 1 is lost
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

"""G5 (Kafka KIP-360): an idle producer whose state expired goes on under one fresh PID.

Every partition moves to the fresh PID before its next send, from sequence 0; one PID is
drawn however many partitions and threads find out at once; a batch pending under the old
PID is settled there first; ``state`` saved around the move never lets a resumed job write
a record twice or go back over sequences the old PID used; fencing (by epoch, name or
resume=) is never escaped through a fresh PID; the in-memory client does the same.

The expiry is made at once (:func:`tests.support.fresh_pid.expire`) unless a test lets a
real one run out; faults go through :class:`fencing.faults.Proxy` on a client with short
socket timeouts (``fclient``), and the log is read back without the proxy.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest
import redis

import fencing
import fencing.aio
from fencing._sync import producer_ids as sync_ids
from fencing._sync import standing as sync_standing
from fencing.faults import Proxy
from fencing.testing import memory_client, memory_redis, memory_server
from fencing.verify import Attempt, verify_log
from tests.support.internals import context_of, metadata_of

from ..support.fresh_pid import (
    LEASE_TTL,
    SHORT_LEASE,
    expire,
    issued,
    log,
    offsets,
    outcome,
    pid_state,
)
from ..support.polling import wait_until
from ..support.wire import APPEND


def test_state_saved_while_a_batch_is_pending_under_the_retired_pid_keeps_it_deduplicable(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """A copy job (README "Copy jobs": save ``producer.state`` with the input position, resume=
    after a crash and re-send from that position) sends ``r`` on partition 1; every reply is
    lost: OutcomeUnknown, ``r`` pending under PID P0 (it did land, at offset 1). Partition 0
    was idle past its expiry: its next send takes a fresh PID P1. The job saves its state
    (its position is before ``r``: ``r`` is not known to have landed), then crashes; a new
    process resumes that state and re-sends ``r``.

    The re-sent ``r`` is answered with its original offset (1), written once, as it would be
    without the expiry (the state then names P0 at sequence 1 on partition 1, and the resend
    is found in P0's window)."""
    topic = fclient.topic("t", partitions=2)
    x = topic.producer(lease_ttl=SHORT_LEASE)
    try:
        x.send_batch([b"a"], partition=0)
        x.send_batch([b"b"], partition=1)
        old = x.producer_id
        with proxy.drop_replies(APPEND, count=None) as lost, pytest.raises(fencing.OutcomeUnknown):
            x.send_batch([b"r"], partition=1)
        assert lost.hits >= 1
        assert log(client, "t", 1) == [(0, b"b", old), (1, b"r", old)]  # it landed once
        expire(raw, topic, old, 0)
        assert offsets(x.send_batch([b"c"], partition=0)) == [1]
        assert x.producer_id != old
        # No state is given while the batch is pending under the retired PID (no
        # state could say how to resend it): the job settles it first, and learns it landed.
        with pytest.raises(fencing.InvalidArgument, match=r"resolve\(1\)"):
            x.state  # noqa: B018
        assert x.resolve(1) == [fencing.RecordMetadata("t", 1, 1, 0)]
        saved = x.state  # its position now past ``r``
    finally:
        x.close()  # the crash (close() resolves nothing)
    with topic.producer(resume=saved, lease_ttl=SHORT_LEASE) as y:
        assert offsets(y.send_batch([b"s"], partition=1)) == [2]
    assert [v for _, v, _ in log(client, "t", 1)] == [b"b", b"r", b"s"]


class OnRetire:
    """``Producer._retired`` as a data descriptor: ``then`` runs right after the first
    assignment that retires a PID (an interrupt, or another thread, arriving between that
    statement and the next)."""

    def __init__(self, then: Any) -> None:
        self.then = then
        self.fired = False

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self if obj is None else obj.__dict__.get("_retired_seen", frozenset())

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["_retired_seen"] = value
        if value and not self.fired:
            self.fired = True
            self.then(obj)


def test_an_interrupt_between_retiring_the_pid_and_taking_the_fresh_one_loses_nothing(
    client: fencing.Client, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state of PID P0 expired on partition 0 (still live on partition 1, where P0 sent ``x``
    at sequence 0). A send on partition 0 is refused 'idle'; in _take_fresh_pid the fresh
    PID is drawn, then Ctrl-C arrives right after ``self._retired.add(standing.pid)`` and
    before ``self._producer_id = fresh``. The caller gets KeyboardInterrupt; the program
    goes on and sends ``x`` again (a new record with the same value) on partition 1, then
    ``y`` on partition 0.

    Either the old PID is not retired, or the fresh one is in use: every new record lands once
    (``x`` at offset 1 of partition 1), never under a sequence P0 used."""
    topic = client.topic("t", partitions=2)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        assert offsets(p.send_batch([b"w"], partition=0)) == [0]
        assert offsets(p.send_batch([b"x"], partition=1)) == [0]
        old = p.producer_id
        expire(raw, topic, old, 0)

        def interrupt(_: Any) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(sync_ids.ProducerIds, "retired", OnRetire(interrupt), raising=False)
        with pytest.raises(KeyboardInterrupt):
            p.send_batch([b"lost-to-ctrl-c"], partition=0)
        x_again = offsets(p.send_batch([b"x"], partition=1))
        y = offsets(p.send_batch([b"y"], partition=0))
    assert x_again == [1]
    assert [v for _, v, _ in log(client, "t", 1)] == [b"x", b"x"]
    assert [v for _, v, _ in log(client, "t", 0)] == [b"w", b"y"]
    assert y == [1]


class InterruptedReplace:
    """``dataclasses`` as fencing._sync.producer sees it, whose first replace() is
    interrupted (Ctrl-C arrives while dataclasses.replace runs: many Python-level steps)."""

    def __init__(self) -> None:
        self.fired = False

    def replace(self, obj: Any, **changes: Any) -> Any:
        if not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return dataclasses.replace(obj, **changes)


def test_an_interrupt_while_a_partition_moves_to_the_fresh_pid_loses_nothing(
    client: fencing.Client, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partition 0 took the fresh PID P1; partition 1 still stands on P0 (live there: P0 sent ``x``
    at sequence 0). The next send on partition 1 moves it (_send_next -> _adopt_pid), and
    Ctrl-C arrives while ``dataclasses.replace(standing.writer, producer_id=...)`` runs,
    after ``standing.pid, standing.generation, standing.next_sequence = pid, 0, 0``. The
    caller gets KeyboardInterrupt (nothing was sent); the program goes on and sends ``x``
    again (a new record with the same value) on partition 1.

    The new ``x`` lands at offset 1 (under P1, or under P0 at sequence 1)."""
    topic = client.topic("t", partitions=2)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        assert offsets(p.send_batch([b"w"], partition=0)) == [0]
        assert offsets(p.send_batch([b"x"], partition=1)) == [0]
        old = p.producer_id
        expire(raw, topic, old, 0)
        assert offsets(p.send_batch([b"y"], partition=0)) == [1]
        assert p._queues[1].standing.pid == old
        monkeypatch.setattr(sync_ids, "dataclasses", InterruptedReplace())
        with pytest.raises(KeyboardInterrupt):
            p.send_batch([b"lost-to-ctrl-c"], partition=1)
        x_again = offsets(p.send_batch([b"x"], partition=1))
    assert x_again == [1]
    assert [v for _, v, _ in log(client, "t", 1)] == [b"x", b"x"]


def test_state_read_while_another_thread_takes_the_fresh_pid_never_names_the_old_pid_at_0(
    client: fencing.Client, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread T sends on partition 0, whose state expired; in _take_fresh_pid it retires P0; the
    interpreter switches threads before ``self._producer_id = fresh`` and another thread
    saves ``producer.state`` (a copy job's checkpoint). Here the switch is forced by reading
    ``state`` from inside the add().

    The state names the fresh PID (0/0 where it moved), or P0 with its real sequences: resuming
    it never goes back over sequences P0 used."""
    topic = client.topic("t", partitions=2)
    seen: list[fencing.ProducerState] = []
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        p.send_batch([b"w"], partition=0)
        p.send_batch([b"x"], partition=1)
        old = p.producer_id
        expire(raw, topic, old, 0)

        hook = OnRetire(lambda _ids: seen.append(p.state))  # a checkpoint, then
        monkeypatch.setattr(sync_ids.ProducerIds, "retired", hook, raising=False)
        assert offsets(p.send_batch([b"y"], partition=0)) == [1]
    (saved,) = seen
    # At that instant the state still names P0 with its real sequences (no
    # partition moves before the fresh PID is published); P0's state on partition 0 had
    # expired, so resuming it is UnknownProducerId (G5), and nothing is written.
    assert (saved.producer_id, saved.next_sequence(0), saved.next_sequence(1)) == (old, 1, 1)
    with pytest.raises(fencing.UnknownProducerId):
        topic.producer(resume=saved, lease_ttl=LEASE_TTL)
    assert [v for _, v, _ in log(client, "t", 1)] == [b"x"]


def test_verify_counts_an_exclusive_producer_that_took_a_fresh_pid_as_one_writer(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """One epoch written under two PIDs, the old one never coming back: G1 holds (a PID
    coming back within the epoch would be two writers interleaving)."""
    topic = client.topic("t", partitions=1)
    acked: list[Attempt] = []
    with topic.producer(access_mode=fencing.AccessMode.EXCLUSIVE, lease_ttl=LEASE_TTL) as p:
        for v in (b"a", b"b"):
            md = p.send(v, partition=0)
            acked.append(Attempt(v, 0, "acked", md.offset, md.epoch))
        old = p.producer_id
        expire(raw, topic, old)
        for v in (b"c", b"d"):
            md = p.send(v, partition=0)
            acked.append(Attempt(v, 0, "acked", md.offset, md.epoch))
        assert p.producer_id != old
    assert [(o, v) for o, v, _ in log(client, "t")] == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    report = verify_log(client, "t", attempts=acked, exclusive=True)
    assert report.ok, report.summary()
    assert [(s.epoch, s.first_offset, s.last_offset) for s in report.segments] == [
        (1, 0, 1),
        (1, 2, 3),
    ]
    assert verify_log(client, "t", attempts=acked, exclusive=False).ok


def test_partitions_that_find_out_at_once_draw_one_fresh_pid(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """Six threads send at once on six partitions whose state all expired; the allocation is held
    until all six were refused 'idle' and are inside _take_fresh_pid. Exactly one id is
    drawn; each partition's record lands once under it, sequence 0."""
    n = 6
    topic = client.topic("t", partitions=n)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        for i in range(n):
            p.send_batch([b"before-%d" % i], partition=i)
        old = p.producer_id
        for i in range(n):
            expire(raw, topic, old, i)
        inside = [0]
        guard = threading.Lock()
        take = p._ids.take_fresh
        allocate = context_of(client).allocate_producer_id

        def counted(standing: Any) -> None:
            with guard:
                inside[0] += 1
            take(standing)

        def held() -> int:
            wait_until(lambda: inside[0] == n, timeout=5.0, interval=0.001)
            return allocate()

        p._ids.take_fresh = counted  # type: ignore[method-assign]
        context_of(client).allocate_producer_id = held  # type: ignore[method-assign]
        start = threading.Barrier(n)
        results: dict[int, Any] = {}

        def send(i: int) -> None:
            start.wait(5)
            try:
                results[i] = offsets(p.send_batch([b"after-%d" % i], partition=i))
            except BaseException as exc:  # pragma: no cover - reported below
                results[i] = exc

        threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
            assert not t.is_alive()
        assert results == {i: [1] for i in range(n)}
        fresh = p.producer_id
        assert fresh == old + 1 == issued(raw, client)
        assert p._ids.retired == {old}
        state = p.state
    assert (state.producer_id, dict(state.sequences)) == (fresh, {i: 1 for i in range(n)})
    for i in range(n):
        assert log(client, "t", i) == [(0, b"before-%d" % i, old), (1, b"after-%d" % i, fresh)]
        stored = pid_state(raw, topic, fresh, i)
        assert (stored.generation, stored.last_sequence) == (0, 0)


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "lost-request"])
def test_a_batch_pending_under_the_old_pid_is_resolved_there_before_the_move(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis, landed: bool
) -> None:
    """Partition 1 has a batch pending under P0 (every reply lost: it landed; or every request
    lost: it did not). Partition 0, idle past its expiry, takes P1. The next send on
    partition 1 resolves the batch under P0 (landed once / P0's generation bumped there),
    then moves to P1 at generation 0, sequence 0: the resolution never leaks into P1's
    standing, and nobody is fenced."""
    topic = fclient.topic("t", partitions=2)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        p.send_batch([b"a"], partition=0)
        p.send_batch([b"b"], partition=1)
        old = p.producer_id
        rule = proxy.drop_replies if landed else proxy.drop_requests
        with rule(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"r"], partition=1)
        expire(raw, topic, old, 0)
        assert offsets(p.send_batch([b"c"], partition=0)) == [1]
        fresh = p.producer_id
        assert p._queues[1].standing.pid == old and p._queues[1].standing.pending is not None
        with pytest.raises(fencing.InvalidArgument, match="resolve"):
            p.state  # noqa: B018 - no state can say how to resend P0's pending batch
        s = offsets(p.send_batch([b"s"], partition=1))
        assert p.last_resolution == (1, [fencing.RecordMetadata("t", 1, 1, 0)] if landed else None)
        assert not p.fenced
        assert (p._queues[1].standing.pid, p._queues[1].standing.generation) == (fresh, 0)
        assert offsets(p.send_batch([b"t"], partition=1)) == [s[0] + 1]
        state = p.state
    assert (state.producer_id, state.generations[1], state.next_sequence(1)) == (fresh, 0, 2)
    tail = [(1, b"r", old)] if landed else []
    assert log(client, "t", 1) == [
        (0, b"b", old),
        *tail,
        (s[0], b"s", fresh),
        (s[0] + 1, b"t", fresh),
    ]
    stored = pid_state(raw, topic, old, 1)
    assert (stored.generation, stored.last_sequence) == ((0, 1) if landed else (1, 0))
    stored = pid_state(raw, topic, fresh, 1)
    assert (stored.generation, stored.last_sequence) == (0, 1)


def test_resolve_on_a_partition_not_moved_yet_settles_under_the_old_pid(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """producer.resolve(1) while partition 1 still stands on the retired PID with a pending batch:
    resolved under that PID (landed, its offset), the standing is not corrupted, and the
    next send there moves to the fresh PID at sequence 0."""
    topic = fclient.topic("t", partitions=2)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        p.send_batch([b"a"], partition=0)
        p.send_batch([b"b"], partition=1)
        old = p.producer_id
        with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"r"], partition=1)
        expire(raw, topic, old, 0)
        p.send_batch([b"c"], partition=0)
        fresh = p.producer_id
        assert p.resolve(1) == [fencing.RecordMetadata("t", 1, 1, 0)]
        assert p.resolve(1) is None  # nothing pending any more
        assert (p._queues[1].standing.pid, p._queues[1].standing.next_sequence) == (old, 2)
        assert (p.state.producer_id, p.state.next_sequence(1)) == (fresh, 0)
        assert offsets(p.send_batch([b"s"], partition=1)) == [2]
    assert log(client, "t", 1) == [(0, b"b", old), (1, b"r", old), (2, b"s", fresh)]


def test_an_idle_producer_without_idempotence_keeps_its_pid(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """idempotent=False: no sequence, no state to expire, never refused 'idle': the producer keeps
    its PID and draws nothing."""
    topic = client.topic("t", partitions=1)
    with topic.producer(lease_ttl=LEASE_TTL, idempotent=False) as p:
        p.send_batch([b"a"], partition=0)
        pid = p.producer_id
        assert raw.hlen(metadata_of(topic).partition_keys(0).pids) == 0
        assert offsets(p.send_batch([b"b"], partition=0)) == [1]
        assert p.producer_id == pid == issued(raw, client)
    assert log(client, "t") == [(0, b"a", pid), (1, b"b", pid)]


def test_state_saved_after_the_move_resumes_and_fences_every_partition(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """State saved after partition 0 moved to P1 (partitions 1 and 2 not moved yet, nothing
    pending) names P1 with 0/0 there. The job then sends ``r`` on partition 1 (it moves to
    P1). A new incarnation resumes the saved state while the old one lives: it takes no id
    of its own, fences the old one on a moved and on a not-moved partition (the latter moves
    to P1 and is refused by P1's fence), and re-sending ``r`` returns its original offset."""
    topic = client.topic("t", partitions=3)
    x = topic.producer(lease_ttl=LEASE_TTL)
    try:
        for i in range(3):
            x.send_batch([b"a%d" % i], partition=i)
        old = x.producer_id
        expire(raw, topic, old, 0)
        x.send_batch([b"c"], partition=0)
        fresh = x.producer_id
        saved = x.state
        assert saved.producer_id == fresh
        assert dict(saved.sequences) == {0: 1, 1: 0, 2: 0}
        assert dict(saved.generations) == {0: 0, 1: 0, 2: 0}
        assert offsets(x.send_batch([b"r"], partition=1)) == [1]
        with topic.producer(resume=saved, lease_ttl=LEASE_TTL) as y:
            assert y.producer_id == fresh
            assert issued(raw, client) == fresh
            with pytest.raises(fencing.ProducerFenced):
                x.send_batch([b"late"], partition=2)  # not moved yet: moves, then fenced
            assert x.fenced
            assert offsets(y.send_batch([b"r"], partition=1)) == [1]
            assert offsets(y.send_batch([b"s"], partition=2)) == [1]
            assert offsets(y.send_batch([b"d"], partition=0)) == [2]
    finally:
        x.close()
    assert log(client, "t", 0) == [(0, b"a0", old), (1, b"c", fresh), (2, b"d", fresh)]
    assert log(client, "t", 1) == [(0, b"a1", old), (1, b"r", fresh)]
    assert log(client, "t", 2) == [(0, b"a2", old), (1, b"s", fresh)]
    assert issued(raw, client) == fresh


@pytest.mark.parametrize("how", ["resume", "name"])
def test_a_fenced_incarnation_whose_state_expired_stays_fenced(
    client: fencing.Client, raw: redis.Redis, how: str
) -> None:
    """X is superseded (a resumed copy of its state, or a new producer of its name), then its PID's
    state expires. X's next send is ProducerFenced (the fence does not expire), before any
    'idle' refusal: no fresh PID is drawn, nothing is written, and the successor goes on."""
    topic = client.topic("t", partitions=1)
    name = "n" if how == "name" else None
    x = topic.producer(name=name, lease_ttl=LEASE_TTL)
    try:
        x.send_batch([b"a"], partition=0)
        x.send_batch([b"b"], partition=0)
        pid = x.producer_id
        kwargs: dict[str, Any] = {"resume": x.state} if how == "resume" else {"name": "n"}
        with topic.producer(lease_ttl=LEASE_TTL, **kwargs) as y:
            assert y.producer_id == pid
            expire(raw, topic, pid)
            before = issued(raw, client)
            with pytest.raises(fencing.ProducerFenced):
                x.send_batch([b"late"], partition=0)
            assert x.fenced and x.producer_id == pid and not x._ids.retired
            assert issued(raw, client) == before
            assert offsets(y.send_batch([b"c"], partition=0)) == [2]
    finally:
        x.close()
    assert [v for _, v, _ in log(client, "t")] == [b"a", b"b", b"c"]


def test_a_producer_taken_over_with_fencing_never_escapes_through_a_fresh_pid(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """A shared producer is taken over (EXCLUSIVE_WITH_FENCING), then its state expires: its next
    send is ProducerFenced by the epoch, no fresh PID is drawn."""
    topic = client.topic("t", partitions=1)
    x = topic.producer(lease_ttl=LEASE_TTL)
    try:
        x.send_batch([b"a"], partition=0)
        x.send_batch([b"b"], partition=0)
        pid = x.producer_id
        mode = fencing.AccessMode.EXCLUSIVE_WITH_FENCING
        with topic.producer(access_mode=mode, lease_ttl=LEASE_TTL) as z:
            expire(raw, topic, pid)
            before = issued(raw, client)
            with pytest.raises(fencing.ProducerFenced):
                x.send_batch([b"late"], partition=0)
            assert x.fenced and x.producer_id == pid
            assert issued(raw, client) == before
            assert offsets(z.send_batch([b"c"], partition=0)) == [2]
    finally:
        x.close()
    assert [v for _, v, _ in log(client, "t")] == [b"a", b"b", b"c"]


def test_a_takeover_while_the_fresh_pid_is_drawn_fences_the_resend(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """An EXCLUSIVE producer's send is refused 'idle'; while it draws its fresh PID, an
    EXCLUSIVE_WITH_FENCING producer takes the partition over. The resend under the fresh PID
    is ProducerFenced (the epoch), nothing of it is written, the producer stays fenced, and
    the one that took over appends next."""
    topic = client.topic("t", partitions=1)
    x = topic.producer(access_mode=fencing.AccessMode.EXCLUSIVE, lease_ttl=LEASE_TTL)
    holder: list[Any] = []
    try:
        x.send_batch([b"a"], partition=0)
        old = x.producer_id
        expire(raw, topic, old)
        take = x._ids.take_fresh

        def take_over_meanwhile(standing: Any) -> None:
            take(standing)
            mode = fencing.AccessMode.EXCLUSIVE_WITH_FENCING
            holder.append(topic.producer(access_mode=mode, lease_ttl=LEASE_TTL))

        x._ids.take_fresh = take_over_meanwhile  # type: ignore[method-assign]
        with pytest.raises(fencing.ProducerFenced):
            x.send_batch([b"late"], partition=0)
        assert x.fenced and x.producer_id == old + 1
        (z,) = holder
        assert offsets(z.send_batch([b"b"], partition=0)) == [1]
        with pytest.raises(fencing.ProducerFenced):
            x.send_batch([b"later"], partition=0)
    finally:
        x.close()
        for z in holder:
            z.close()
    assert [v for _, v, _ in log(client, "t")] == [b"a", b"b"]
    assert pid_state(raw, topic, old + 1) is None


def test_an_exclusive_producer_takes_a_fresh_pid_within_its_epoch(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """An EXCLUSIVE producer idle past its expiry goes on under a fresh PID, in the same epoch,
    with expected_offset honoured on the resend (a wrong one is refused after the move,
    writing nothing, and the PID's sequence still starts at 0)."""
    topic = client.topic("t", partitions=1)
    with topic.producer(access_mode=fencing.AccessMode.EXCLUSIVE, lease_ttl=LEASE_TTL) as p:
        p.send_batch([b"a"], partition=0)
        epoch, old = p.epoch(0), p.producer_id
        expire(raw, topic, old)
        with pytest.raises(fencing.OffsetMismatch):
            p.send_batch([b"x"], partition=0, expected_offset=5)
        fresh = p.producer_id
        assert fresh == old + 1 and p.epoch(0) == epoch
        assert pid_state(raw, topic, fresh) is None
        assert offsets(p.send_batch([b"b"], partition=0, expected_offset=1)) == [1]
    assert log(client, "t") == [(0, b"a", old), (1, b"b", fresh)]
    stored = pid_state(raw, topic, fresh)
    assert (stored.generation, stored.last_sequence) == (0, 0)
    assert issued(raw, client) == fresh


def test_send_async_records_on_expired_partitions_land_once_under_one_fresh_pid(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """send_async() records on three partitions, two of them expired, then flush(): every future
    answered, every record once, one fresh PID, sequences from 0. (The sender goes partition
    by partition in slot order: the live partition 2 sent its records under the old PID if
    it came first, and then moves over only before its next send; ``state`` names it at the
    fresh PID's 0 then.)"""
    topic = client.topic("t", partitions=3)
    with topic.producer(lease_ttl=LEASE_TTL, linger_ms=5) as p:
        for i in range(3):
            p.send_batch([b"before-%d" % i], partition=i)
        old = p.producer_id
        expire(raw, topic, old, 0)
        expire(raw, topic, old, 1)
        futures = [
            (i, n, p.send_async(b"v-%d-%d" % (i, n), partition=i))
            for n in range(5)
            for i in range(3)
        ]
        p.flush()
        got = {(i, n): f.result(timeout=5).offset for i, n, f in futures}
        fresh = p.producer_id
        state = p.state
        live = p._queues[2].standing.pid  # the PID partition 2's records went under
    assert got == {(i, n): n + 1 for i in range(3) for n in range(5)}
    assert fresh == old + 1 == issued(raw, client)
    assert live in (old, fresh)
    assert dict(state.sequences) == {0: 5, 1: 5, 2: 5 if live == fresh else 0}
    for i in range(3):
        pid = live if i == 2 else fresh
        assert log(client, "t", i) == [(0, b"before-%d" % i, old)] + [
            (n + 1, b"v-%d-%d" % (i, n), pid) for n in range(5)
        ]
    with topic.producer(resume=state, lease_ttl=LEASE_TTL) as q:  # resumable as it says
        assert offsets(q.send_batch([b"next"], partition=2)) == [6]


def test_the_in_memory_client_takes_a_fresh_pid_the_same_way() -> None:
    """fencing.testing's in-memory client (fakeredis, the same Lua): an idle producer's expired
    state means one fresh PID for all partitions, sequences from 0; state saved before the
    expiry stays unresumable."""
    mem = memory_server()
    client, raw = memory_client(server=mem), memory_redis(server=mem)
    topic = client.topic("t", partitions=2)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        p.send_batch([b"a0"], partition=0)
        p.send_batch([b"a1"], partition=1)
        saved, old = p.state, p.producer_id
        expire(raw, topic, old, 0)
        assert offsets(p.send_batch([b"b0"], partition=0)) == [1]
        fresh = p.producer_id
        assert offsets(p.send_batch([b"b1"], partition=1)) == [1]
        with pytest.raises(fencing.UnknownProducerId):
            topic.producer(resume=saved, lease_ttl=LEASE_TTL)
        state = p.state
    assert fresh == old + 1
    assert (state.producer_id, dict(state.sequences)) == (fresh, {0: 1, 1: 1})
    for i in range(2):
        assert log(client, "t", i) == [(0, b"a%d" % i, old), (1, b"b%d" % i, fresh)]
        stored = pid_state(raw, topic, fresh, i)
        assert (stored.generation, stored.last_sequence) == (0, 0)
    client.close()


class OnSet:
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
    """A copy job: P0 sent ``b`` on partition 1 (its sequence 1 next there); partition 0 was idle
    past its expiry and took the fresh PID P1. The job sends ``r`` on partition 1, which first
    moves it to P1 (``_adopt_pid``: ``standing.pid, standing.generation, standing.next_sequence =
    pid, 0, 0`` is three stores, and the interpreter may switch threads between them). Another
    thread checkpoints ``producer.state`` there (forced here by reading it from the store of
    ``generation``); ``r`` lands as P1's sequence 0 at offset 1; the job crashes, and a new
    incarnation resumes the checkpoint and sends ``r`` again (its position is before ``r``).

    The checkpoint names partition 1 either with P0's real sequence, or at the fresh PID's 0, so
    the resent ``r`` is found in P1's window: offset 1, written once."""
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
        assert fresh != old and x._queues[1].standing.pid == old
        slot = sync_standing.Standing.__dict__["generation"]
        hook = OnSet(slot, 1, lambda: seen.append(x.state))  # the checkpoint
        monkeypatch.setattr(sync_standing.Standing, "generation", hook)
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


def test_two_threads_finding_the_expiry_on_two_partitions_draw_one_fresh_pid(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """P0's state expired on partitions 0 and 1. Thread A's send on 0 is refused 'idle' and draws
    the fresh PID; while that draw is out, thread B's send on 1 (still under P0) is refused
    'idle' too and waits for the draw. One PID is drawn, both records land once under it
    from sequence 0, and state names it with 1/1."""
    topic = client.topic("t", partitions=2)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        p.send_batch([b"a0"], partition=0)
        p.send_batch([b"a1"], partition=1)
        old = p.producer_id
        expire(raw, topic, old, 0)
        expire(raw, topic, old, 1)
        entered: list[int] = []
        take = p._ids.take_fresh

        def record(standing: Any) -> None:
            entered.append(standing.pk.partition)
            take(standing)

        p._ids.take_fresh = record  # type: ignore[method-assign]
        allocate = context_of(client).allocate_producer_id
        draws: list[int] = []
        results: dict[str, Any] = {}

        def send_b() -> None:
            results["b"] = offsets(p.send_batch([b"b1"], partition=1))

        b = threading.Thread(target=send_b)

        def slow_allocate() -> int:
            if not draws:
                b.start()
                # B was refused 'idle' under P0
                wait_until(lambda: 1 in entered, timeout=5.0, interval=0.001)
                time.sleep(0.05)  # ... and waits for this draw
            draws.append(allocate())
            return draws[-1]

        context_of(client).allocate_producer_id = slow_allocate  # type: ignore[method-assign]
        try:
            results["a"] = offsets(p.send_batch([b"b0"], partition=0))
            b.join(5)
        finally:
            del context_of(client).allocate_producer_id
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
    """No helper: the topic keeps state 1 s, the producer is idle 1.2 s, so its state is still
    stored but past its expiry (read_pid treats it as none). The next sends on both
    partitions take one fresh PID from sequence 0, and the old one's state saved before the
    expiry is not resumable."""
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
    """fencing.testing's in-memory client with a topic keeping state 1 s: idle past it, the
    producer goes on under one fresh PID on both partitions, nothing written twice."""
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

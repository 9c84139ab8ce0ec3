"""Review s9d of 87aeb25: the rule ``Producer._sent_while_expired`` (fencing/_async/producer.py)
that settles a pending batch resolved as 'pending-expired' as "did not land" (and takes a
fresh PID) when it was sent longer than ttl*1.02 + 0.05 after the producer's
``last_write`` on the partition: holes and probes.

Tests marked HOLE failed on 87aeb25 and say what a user does, what is expected and what
happened; they pass since the rule was replaced by the server's own answer (resolve-4.lua
reads the expired state still stored: a batch in its window landed, one past its last
sequence never did, and the PID's generation is bumped there). Probes whose expectations
followed from the client-clock rule say where the server's answer differs. Tests marked
PROBE attacked something that held and are kept as regressions.
Fixtures and helpers are those of tests/test_review_s9b.py / s9c.py; every test lets a real
expiry run out (topics with producer_state_ttl of 1 to 4 s), since the rule reasons from
the producer's own idle time. Faults go through :class:`fencing.faults.Proxy` on a client of
the test's own (socket timeout 0.5 s: a retry budget of about a second); the log is read
back with a client that does not go through the proxy.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

import fencing
from fencing.faults import Proxy

from .support.fresh_pid import (
    APPEND,
    SHORT_LEASE,
    log,
    lost_then_settled_as_not_landed,
    offsets,
    outcome,
    pid_state,
)


def _sleep_until(deadline: float) -> None:
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


def _server_clock_lags(raw: redis.Redis, topic: Any, pid: int, ms: int, partition: int = 0) -> None:
    """The server's clock, by which the PID's state expires, now runs ``ms`` behind the one
    it wrote the state by (a failover to a replica whose clock lags, an NTP step back): the
    same as the state's last write ``t`` being ``ms`` later (the field a script compares
    with TIME; the state string is "<g> <s> <t> <x> <o>|<window>")."""
    key = topic.partition_keys(partition).pids
    stored = raw.hget(key, str(pid)).decode()
    g, s, t, rest = stored.split(" ", 3)
    raw.hset(key, str(pid), f"{g} {s} {int(t) + ms} {rest}")


# -- holes -----------------------------------------------------------------------------------


def test_a_server_clock_behind_the_producers_makes_a_landed_batch_settle_as_not_landed(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """HOLE (a record written twice; G5, G7). A producer sends ``a`` on a topic that keeps
    state 1 s. Between that write and the next send, the server's clock falls 400 ms
    behind the elapsed time the client measures (a failover to a replica whose clock lags
    by 400 ms, or an NTP step back on the Redis host: Redis TIME is a wall clock). The
    producer is idle 1.15 s by its own monotonic clock, but only ~0.75 s by the server's:
    the state is live, so ``b`` (sequence 1) LANDS at offset 1; every reply is lost
    (OutcomeUnknown, ``b`` pending). The state then really expires (1.2 s more) and the
    producer resolves.

    Expected: resolve says ``b`` landed (offset 1: its PID's state is still stored, expired,
    with ``b`` in its window), or raises UnknownProducerId (the outcome cannot be known);
    never "did not land" for a batch that is in the log.
    Got: resolve-4.lua answers 'pending-expired' and ``_sent_while_expired``
    (fencing/_async/producer.py:873-889) judges the server's expiry by the CLIENT's clock:
    ``pending.sent_at - standing.last_write`` = 1.15 s >= ttl*1.02 + 0.05 = 1.07 s, so
    ``_resolve`` (:1196-1206) returns None, clears the pending batch and takes a fresh PID;
    the caller, told ``b`` did not land, sends it again and it lands a second time
    (offset 2, under the fresh PID). G7: "every expiry is judged by the Redis server's
    clock, never by a client's"; the 2% + 50 ms spare covers clock rates, not a step, and
    the spare is only 70 ms for a 1 s topic (1.2 s for 60 s).
    Fix: decide on the server: resolve-4.lua can read the PID's state even when it is past
    its expiry (read_pid only hides it): while it is still stored, a batch in its window
    landed (answer it), and a batch past its last sequence never did, nor can any copy now
    (an unnamed generation-0 PID whose state expired is refused 'idle' for good): answer
    "not landed" (the producer then takes the fresh PID). Only a state already removed
    (drop_expired) leaves 'pending-expired'. Then drop the client-clock rule."""
    topic = fclient.topic("t", partitions=1, producer_state_ttl=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        assert offsets(p.send_batch([b"a"], partition=0)) == [0]
        old = p.producer_id
        last = time.monotonic()
        _server_clock_lags(raw, topic, old, 400)
        _sleep_until(last + 1.15)
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
    # (Got: None, and values [a, b, b].)
    assert (resolved in (landed, ("UnknownProducerId", "pending-expired")), values) == (
        True,
        [b"a", b"b"],
    )


def test_a_duplicate_answer_does_not_count_as_a_write_for_the_idle_rule(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """HOLE (a wedge). A producer sends ``a``: the append lands at once, but its reply is
    lost on a mute connection; after the socket timeout (0.5 s) the driver's retry is
    answered from the window (a duplicate: nothing written) and the send returns offset 0.
    The producer is then idle until 1.15 s after it sent ``a`` (after the write: state kept
    1 s) and sends ``b``: the script refuses it 'idle' (nothing written) and every reply is
    lost (OutcomeUnknown, ``b`` pending at sequence 1).

    Expected (README, 87aeb25: "a batch sent longer than the expiry after the producer's
    last write there was refused, so it settles as 'did not land' and the producer takes
    the fresh PID"): ``b`` was sent 1.15 s after the producer's last write, so resolve says
    None and ``c`` lands at offset 1.
    Got: _send_group stamps ``standing.last_write`` when the reply arrives
    (fencing/_async/producer.py:811), also for a duplicate answered from the window, which
    wrote nothing: last_write is ~0.35 s late, ``sent_at - last_write`` ~0.8 s < 1.07 s,
    so the rule does not fire; resolve raises UnknownProducerId 'pending-expired', the
    pending batch is kept, and every later send and resolve on the partition raise it for
    good, though nothing is uncertain (the log holds ``a`` only). The client cannot know
    when a write it learns of only through a later duplicate answer happened; a reply
    delayed on its way (a slow network, a GC pause reading it) shifts last_write the same.
    Fix: the server-side decision of the test above (an expired but still stored state
    shows ``b`` past its last sequence: never landed); or have the append's duplicate
    answer not refresh last_write (keep it at the reply of the attempt that wrote, which
    the producer cannot tell apart: hence the server-side fix)."""
    topic = fclient.topic("t", partitions=1, producer_state_ttl=1)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        sent_a = time.monotonic()
        with proxy.drop_replies(APPEND, close=False) as lost:
            assert offsets(p.send_batch([b"a"], partition=0)) == [0]
        assert lost.hits == 1
        answered_a = time.monotonic()
        old = p.producer_id
        _sleep_until(sent_a + 1.15)  # idle 1.15 s after a's write by the server's clock
        # ... but less than ttl*1.02 + 0.05 after the duplicate answer (a socket timeout late)
        assert time.monotonic() - answered_a < 1.07
        lost_then_settled_as_not_landed(p, proxy, client, old)


def test_a_batch_sent_just_before_the_expiry_whose_requests_are_lost_never_wedges(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """HOLE (a wedge). A topic keeps state 4 s. A producer sends ``a``, is idle 3.4 s (its
    state still live), then sends ``b`` while the network loses its requests (a blip of a
    second): no attempt reaches Redis, OutcomeUnknown, ``b`` pending at sequence 1. The
    state expires during the blip; right after it the producer resolves, ~1 s after
    sending ``b``.

    Expected (README: "A batch pending for longer than half the expiry, whose state is
    gone, resolves as UnknownProducerId"; this one is pending ~1 s of a 4 s expiry): it
    settles as "did not land" (had any attempt landed, at or after ``b`` was sent, its
    state would be live until 4 s after that: its absence proves it did not; and no copy
    can land later: the expired generation-0 PID is refused 'idle'), and ``c`` lands at
    offset 1.
    Got: ``_sent_while_expired`` (fencing/_async/producer.py:873-889) only covers a batch
    sent more than ttl*1.02+0.05 after the last write (3.4 s < 4.13 s), and resolve-4.lua
    refuses any stateless batch past sequence 0 (``if first_s ~= 0 or pending_ms * 2 >=
    expiry_ms``): UnknownProducerId 'pending-expired' from resolve and every later send on
    the partition, for good.
    Fix: as the first test (resolve-4.lua decides from the stored, expired state), or apply
    the half-the-expiry rule of resolve-4.lua to every sequence for an unnamed
    generation-0 PID (a stateless batch pending less than half the expiry did not land)."""
    topic = fclient.topic("t", partitions=1, producer_state_ttl=4)
    with topic.producer(lease_ttl=SHORT_LEASE) as p:
        assert offsets(p.send_batch([b"a"], partition=0)) == [0]
        last = time.monotonic()
        old = p.producer_id
        _sleep_until(last + 3.4)
        sent_b = time.monotonic()
        drop = proxy.drop_requests(APPEND, count=None, close=False)
        with drop as dropped, pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([b"b"], partition=0)
        assert dropped.hits >= 1
        _sleep_until(last + 4.15)  # the state expired (if the blip ended before)
        assert time.monotonic() - sent_b < 1.9  # pending less than half the expiry
        assert log(client, "t") == [(0, b"a", old)]  # nothing landed, provably
        resolved = outcome(lambda: p.resolve(0))
        sent = outcome(lambda: offsets(p.send_batch([b"c"], partition=0)))
    assert (resolved, sent) == (None, [1])
    assert [v for _, v, _ in log(client, "t")] == [b"a", b"c"]


# -- probes ----------------------------------------------------------------------------------


def test_a_batch_that_landed_and_expired_since_is_never_settled_as_not_landed(
    fclient: fencing.Client, client: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """PROBE (the rule's other side, same clocks). ``b`` is sent 0.5 s after ``a`` (state
    live): it lands, every reply is lost; the producer waits past the expiry before it
    resolves. The rule must not fire (sent 0.5 s after the last write): UnknownProducerId,
    never None, and nothing is written twice."""
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
    """PROBE. ``b`` lands with every reply lost; resolve(0) finds it (landed, offset 1) and
    stamps last_write. Idle past the expiry, ``c`` is refused 'idle' with every reply lost;
    resolve settles it as not landed and ``d`` lands under one fresh PID at sequence 0."""
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
    """PROBE. An exclusive producer renews its lease every 0.3 s while idle 1.2 s past a
    1 s expiry: renewals (producer_renew-5.lua) never write the PID's state, so ``b`` is
    refused 'idle' (its replies lost) and the rule settling it as not landed is right:
    ``c`` lands at 1 under the fresh PID, ``b`` nowhere."""
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
    """PROBE. Both partitions idle past a 1 s expiry. Partition 1's send (under P0) is
    refused 'idle' with every reply lost: pending there under P0. Partition 0's next send
    takes the fresh PID P1 (P0 retired). resolve(1) settles the pending batch as not landed
    and moves partition 1 to P1 without drawing another PID; its next send lands there
    under P1 at sequence 0, written once."""
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

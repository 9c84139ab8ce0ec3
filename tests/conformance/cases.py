"""The conformance subset: what a user's own tests rely on, written once.

Every case is a function of a :class:`fencing.Client` (in a namespace of its own) and uses
the public API only. ``test_conformance.py`` runs each one against the suite's real servers
(Redis 7 and Valkey 8) and against :func:`fencing.testing.memory_client` (fakeredis), so
``fencing.testing`` is held to the behaviour of a real server: exact offsets, epochs,
tokens and contents read back, and the typed errors with their fields.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import fencing
from fencing import AccessMode, Record

Case = Callable[[fencing.Client], None]


def _read_all(topic: fencing.Topic, partition: int) -> list[fencing.Record]:
    return topic.reader(partition, "earliest").read(max_records=1000)


def topic_and_offsets(client: fencing.Client) -> None:
    """send and send_batch get contiguous 0-based offsets per partition; every field of
    every record reads back exactly."""
    topic = client.topic("orders", partitions=2)
    assert topic.partitions == 2
    with topic.producer() as p:
        first = p.send(b"a", partition=0)
        assert (first.topic, first.partition, first.offset, first.epoch) == ("orders", 0, 0, 0)
        batch = p.send_batch(
            [Record(b"b"), Record(b"c", key=b"k"), Record(b"d", headers={"h": b"1"})],
            partition=0,
        )
        assert [(m.partition, m.offset, m.epoch) for m in batch] == [
            (0, 1, 0),
            (0, 2, 0),
            (0, 3, 0),
        ]
        other = p.send(b"z", key=b"user-1", headers={"trace": b"t-1"}, partition=1)
        assert (other.partition, other.offset) == (1, 0)
        pid = p.producer_id
    records = _read_all(topic, 0)
    assert [(r.offset, r.value, r.key, dict(r.headers)) for r in records] == [
        (0, b"a", None, {}),
        (1, b"b", None, {}),
        (2, b"c", b"k", {}),
        (3, b"d", None, {"h": b"1"}),
    ]
    assert {(r.topic, r.partition, r.epoch, r.producer_id) for r in records} == {
        ("orders", 0, 0, pid)
    }
    stamps = [r.timestamp_ms for r in records]
    assert all(isinstance(t, int) and t > 0 for t in stamps)
    assert stamps == sorted(t for t in stamps if t is not None)
    [z] = _read_all(topic, 1)
    assert (z.offset, z.value, z.key, dict(z.headers)) == (0, b"z", b"user-1", {"trace": b"t-1"})
    assert topic.offsets(0) == (0, 4)
    assert topic.reader(0, 2).read(max_records=1)[0].value == b"c"
    assert topic.reader(0, "latest").read() == []
    # Reopened by another handle: same partitions, same offsets.
    again = client.topic("orders")
    assert (again.partitions, again.offsets(1)) == (2, (0, 1))


def exclusive_refuses_with_producer_busy(client: fencing.Client) -> None:
    """EXCLUSIVE takes epoch + 1; any other producer is ProducerBusy while it lives."""
    topic = client.topic("ctl", partitions=1)
    holder = topic.producer(AccessMode.EXCLUSIVE, name="boss", lease_ttl=30.0)
    assert holder.epoch(0) == 1
    for mode in (AccessMode.EXCLUSIVE, AccessMode.SHARED):
        with pytest.raises(fencing.ProducerBusy) as info:
            topic.producer(mode)
        busy = info.value
        assert (busy.topic, busy.partition, busy.reason, busy.holder_label) == (
            "ctl",
            0,
            "exclusive",
            "boss",
        )
        assert 0 < busy.remaining <= 30
    assert holder.send(b"x").offset == 0
    holder.close()
    with topic.producer(AccessMode.EXCLUSIVE) as successor:
        assert successor.epoch(0) == 2
        assert (successor.send(b"y").offset, successor.send(b"y").epoch) == (1, 2)
    assert [(r.offset, r.epoch) for r in _read_all(topic, 0)] == [(0, 1), (1, 2), (2, 2)]


def fencing_takeover_fences_the_old_producer(client: fencing.Client) -> None:
    """EXCLUSIVE_WITH_FENCING: epoch + 1, and the old holder's next send is ProducerFenced,
    for good; nothing of it lands after the takeover (G1, G2)."""
    topic = client.topic("decisions", partitions=1)
    old = topic.producer(AccessMode.EXCLUSIVE, name="leader-a", lease_ttl=30.0)
    assert old.send(b"old-1").epoch == 1
    new = topic.producer(AccessMode.EXCLUSIVE_WITH_FENCING, name="leader-b", lease_ttl=30.0)
    try:
        assert new.epoch(0) == 2
        with pytest.raises(fencing.ProducerFenced) as info:
            old.send(b"old-2")
        fenced = info.value
        assert (fenced.topic, fenced.partition, fenced.epoch, fenced.current_epoch) == (
            "decisions",
            0,
            1,
            2,
        )
        assert old.fenced
        with pytest.raises(fencing.ProducerFenced):  # permanent
            old.send_batch([b"old-3"], partition=0)
        md = new.send(b"new-1")
        assert (md.offset, md.epoch) == (1, 2)
    finally:
        old.close()
        new.close()
    assert [(r.offset, r.epoch, r.value) for r in _read_all(topic, 0)] == [
        (0, 1, b"old-1"),
        (1, 2, b"new-1"),
    ]


def idempotent_resend_returns_the_original_offsets(client: fencing.Client) -> None:
    """G5 through resume=: an exact resend after the saved state returns its first offsets;
    the same sequences with other records are DuplicateSequence; nothing is written twice."""
    topic = client.topic("copy", partitions=1)
    first = topic.producer()
    first.send_batch([b"a"], partition=0)
    saved = fencing.ProducerState.from_json(first.state.to_json())
    assert saved.next_sequence(0) == 1
    landed = first.send_batch([b"b", b"c"], partition=0)
    assert [m.offset for m in landed] == [1, 2]

    other = topic.producer(resume=saved)  # a restart that resends other records
    assert other.producer_id == first.producer_id
    with pytest.raises(fencing.DuplicateSequence) as info:
        other.send_batch([b"x", b"y"], partition=0)
    dup = info.value
    assert (dup.pid, dup.first_sequence, dup.last_sequence) == (first.producer_id, 1, 2)
    with pytest.raises(fencing.ProducerFenced):  # the first incarnation was fenced
        first.send_batch([b"late"], partition=0)
    other.close()

    restart = topic.producer(resume=saved)  # the real restart: resends what it had sent
    try:
        assert restart.send_batch([b"b", b"c"], partition=0) == landed
        assert restart.send_batch([b"d"], partition=0)[0].offset == 3
    finally:
        first.close()
        restart.close()
    assert [(r.offset, r.value) for r in _read_all(topic, 0)] == [
        (0, b"a"),
        (1, b"b"),
        (2, b"c"),
        (3, b"d"),
    ]


def message_ids_answer_a_resend_with_the_original(client: fencing.Client) -> None:
    """A record whose message id was appended before is not appended again, from any
    producer; a call whose ids are partly known writes nothing."""
    topic = client.topic("ids", partitions=2)
    with topic.producer() as p:
        first = p.send(b"order 17", message_id="order-17")
        batch = p.send_batch([fencing.Record(b"a", message_id="a")], partition=0)
    with topic.producer() as q:
        again = q.send(b"order 17", message_id="order-17")
        assert (again.partition, again.offset, again.duplicate) == (
            first.partition,
            first.offset,
            True,
        )
        with pytest.raises(fencing.DuplicateMessageId) as info:
            q.send_batch(
                [fencing.Record(b"b", message_id="b"), fencing.Record(b"a", message_id="a")],
                partition=0,
            )
        assert info.value.known == {1: batch[0]}
    assert [r.message_id for r in _read_all(topic, 0)] == ["a"] + (
        ["order-17"] if first.partition == 0 else []
    )


def expected_offset_mismatch(client: fencing.Client) -> None:
    """G3: expected_offset=k lands at k or not at all; OffsetMismatch(expected, actual)."""
    topic = client.topic("log", partitions=1)
    with topic.producer() as p:
        mds = p.send_batch([b"a", b"b"], partition=0, expected_offset=0)
        assert [m.offset for m in mds] == [0, 1]
        for stale in (0, 1, 5):
            with pytest.raises(fencing.OffsetMismatch) as info:
                p.send_batch([b"x", b"y"], partition=0, expected_offset=stale)
            assert (info.value.expected, info.value.actual) == (stale, 2)
        assert p.send(b"c", expected_offset=2).offset == 2  # one partition: no partition=
    assert [r.value for r in _read_all(topic, 0)] == [b"a", b"b", b"c"]
    assert topic.offsets(0) == (0, 3)


def ownership_claim_renew_release(client: fencing.Client) -> None:
    """The ownership table (G8): generations, tokens, conflicts, release, takeover."""
    a = client.ownership("journal", owner_id="host-a", ttl=30.0)
    b = client.ownership("journal", owner_id="host-b", ttl=30.0)
    try:
        grant = a.claim(["orders/0", "orders/1"])
        assert {r: (g.generation, g.token) for r, g in grant.items()} == {
            "orders/0": (1, 1),
            "orders/1": (1, 1),
        }
        with pytest.raises(fencing.OwnershipConflict) as info:
            b.claim("orders/0")
        conflict = info.value
        assert (conflict.group, conflict.resource, conflict.holder_label) == (
            "journal",
            "orders/0",
            "host-a",
        )
        assert conflict.holder_token == 1
        assert 0 < conflict.remaining <= 30
        # Claiming again keeps the grant; renewing keeps generation and token.
        assert a.claim("orders/0")["orders/0"].token == 1
        renewed = a.renew()
        assert {r: (g.generation, g.token) for r, g in renewed.items()} == {
            "orders/0": (1, 1),
            "orders/1": (1, 1),
        }
        assert a.check("orders/0").token == 1
        # Release: the next claim is a new grant, generation and token + 1.
        assert a.release(["orders/1"]) == {"orders/1": True}
        taken = b.claim("orders/1")["orders/1"]
        assert (taken.generation, taken.token) == (2, 2)
        assert a.release(["orders/1"]) == {"orders/1": False}  # not ours any more
        # A claim at a higher generation severs the live holder: Fenced, for good.
        severed = b.claim("orders/0", generation=5)["orders/0"]
        assert (severed.generation, severed.token) == (5, 2)
        with pytest.raises(fencing.Fenced) as fenced:
            a.check("orders/0")
        assert (fenced.value.group, fenced.value.resource) == ("journal", "orders/0")
        assert (fenced.value.token, fenced.value.holder_token) == (1, 2)
        with pytest.raises(fencing.StaleGeneration) as stale:
            a.claim("orders/0", generation=3)
        assert (stale.value.current, stale.value.requested) == (5, 3)
        forced = a.claim("orders/1", generation=0)["orders/1"]  # an operator's takeover
        assert (forced.generation, forced.token) == (0, 3)
        with pytest.raises(fencing.Fenced):
            b.check("orders/1")
    finally:
        a.close()
        b.close()


def consumer_poll_commit_resume(client: fencing.Client) -> None:
    """A single reader: poll, commit, resume at the commit, fenced after a takeover."""
    topic = client.topic("events", partitions=1)
    with topic.producer() as p:
        p.send_batch([Record(b"e%d" % i) for i in range(5)], partition=0)
    with topic.consumer("billing", "host-a", partitions=[0], ttl=30.0) as c:
        assert c.committed(0) is None
        assert [(r.offset, r.value) for r in c.poll(max_records=3)] == [
            (0, b"e0"),
            (1, b"e1"),
            (2, b"e2"),
        ]
        assert c.commit() == {0: 3}
        assert c.committed(0) == 3
    member = topic.consumer("billing", "host-b", partitions=[0], ttl=30.0)
    try:
        assert member.position(0) == 3
        assert [r.offset for r in member.poll(max_records=10)] == [3, 4]
        assert member.poll(max_records=10) == []
        operator = client.ownership("billing", owner_id="operator", ttl=30.0)
        operator.claim(["events/0"], generation=0)  # take the partition over
        with pytest.raises(fencing.Fenced):
            member.commit()
        operator.close()
    finally:
        member.close()
    with topic.consumer("billing", "host-c", partitions=[0]) as c:
        assert c.committed(0) == 3  # the fenced commit wrote nothing


def election_campaign_leads_in_turn(client: fencing.Client) -> None:
    """Leader election: a token per term, leader() tells who leads, a busy campaign with a
    timeout is OwnershipConflict, resigning hands over with token + 1."""
    a = client.election("scheduler", candidate_id="host-a", ttl=30.0)
    b = client.election("scheduler", candidate_id="host-b", ttl=30.0)
    try:
        assert a.leader() is None
        with a.campaign(timeout=5) as term:
            assert term.token == 1
            assert term.check().token == 1
            info = a.leader()
            assert info is not None
            assert (info.name, info.label, info.token) == ("scheduler", "host-a", 1)
            assert 25 < info.lease_left <= 30
            with pytest.raises(fencing.OwnershipConflict), b.campaign(timeout=0.2):
                pass
        assert term.lost.is_set()
        with pytest.raises(fencing.Fenced):
            term.check()
        with b.campaign(timeout=5) as second:
            assert second.token == 2
            leader = b.leader()
            assert leader is not None
            assert (leader.label, leader.token) == ("host-b", 2)
    finally:
        a.close()
        b.close()


def bad_input_is_refused_before_any_write(client: fencing.Client) -> None:
    """Bad input raises the typed errors and leaves the partition as it was."""
    with pytest.raises(fencing.InvalidName):
        client.topic("no spaces allowed", partitions=1)
    with pytest.raises(fencing.InvalidName):
        client.topic("__reserved", partitions=1)
    with pytest.raises(fencing.InvalidArgument):
        client.topic("t", partitions=0).open()
    topic = client.topic("t", partitions=1, max_record_bytes=16)
    with topic.producer() as p:
        p.send(b"kept")
        with pytest.raises(fencing.InvalidArgumentType):
            p.send(42)  # type: ignore[arg-type]
        with pytest.raises(fencing.RecordTooLarge):
            p.send(b"x" * 17)
        with pytest.raises(fencing.InvalidArgument):
            p.send(b"v", partition=1)
        with pytest.raises(fencing.InvalidArgument):
            p.send(b"v", expected_offset=-1)
    with pytest.raises(fencing.OffsetOutOfRange):
        topic.reader(0, 5).read()
    with pytest.raises(fencing.InvalidName):
        client.ownership("bad group", owner_id="x")
    with pytest.raises(fencing.InvalidArgument):
        client.ownership("g", owner_id="x", ttl=-1)
    assert topic.offsets(0) == (0, 1)
    assert [r.value for r in _read_all(topic, 0)] == [b"kept"]


CASES: list[Case] = [
    topic_and_offsets,
    exclusive_refuses_with_producer_busy,
    fencing_takeover_fences_the_old_producer,
    idempotent_resend_returns_the_original_offsets,
    message_ids_answer_a_resend_with_the_original,
    expected_offset_mismatch,
    ownership_claim_renew_release,
    consumer_poll_commit_resume,
    election_campaign_leads_in_turn,
    bad_input_is_refused_before_any_write,
]

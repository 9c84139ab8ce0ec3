"""G5's error cases, each checked to write nothing, and the bounded duplicate window.

Calls are built with :func:`fencing.protocol.topic.append` from a real opened producer's
standing on the partition (its writer, PID, generation and next sequence), so each case
differs from a legal send in exactly one field. "Nothing written" is checked by comparing
``DUMP`` of every key the append script writes (partition metadata, stream, PID state,
PID expiry, names) before and after. The exclusive-producer row is left out: the producer's
background lease renewal may legitimately write it at any time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
import redis

import fencing
from fencing import protocol
from fencing._sync.producer import Producer
from fencing.keys import PartitionKeys
from fencing.protocol.producer import decode_pid_state
from fencing.protocol.topic import Appended, Sequenced

TOPIC = "out"
#: Long enough that no renewal falls inside a test; renewals do not touch compared keys.
LEASE_TTL = 60.0


@dataclass
class Harness:
    """A topic with one open producer, and raw access to its partition 0."""

    client: fencing.Client
    raw: redis.Redis
    topic: fencing.Topic
    p: Producer

    @property
    def pk(self) -> PartitionKeys:
        return self.topic.partition_keys(0)

    def snapshot(self) -> list[bytes | None]:
        pk = self.pk
        return [self.raw.dump(k) for k in (pk.meta, pk.stream, pk.pids, pk.pid_expiry, pk.names)]

    def call(
        self,
        values: Sequence[bytes],
        first_sequence: int,
        *,
        generation: int | None = None,
        producer: Producer | None = None,
    ) -> protocol.ScriptCall[Appended]:
        p = producer or self.p
        standing = p._standing[0]
        records = [fencing.Record(v) for v in values]
        return protocol.topic.append(
            self.pk,
            records,
            incarnation=self.topic.incarnation_of(0),
            seen_next=self.topic.seen_next(0),
            expected_offset=None,
            writer=standing.writer,
            sequenced=Sequenced(
                pid_generation=standing.generation if generation is None else generation,
                first_sequence=first_sequence,
                checksum=protocol.topic.checksum(records),
                name=p.name or "",
            ),
            errors=protocol.producer.producer_errors(self.pk),
        )

    def execute(self, call: protocol.ScriptCall[Appended]) -> Appended:
        return self.client._driver(1.0).execute(call, self.client._budget_default())

    def refused(
        self, call: protocol.ScriptCall[Appended], error: type[fencing.FencingError]
    ) -> fencing.FencingError:
        """Run ``call``, expect ``error``, and check that nothing was written."""
        before = self.snapshot()
        with pytest.raises(error) as info:
            self.execute(call)
        assert self.snapshot() == before
        return info.value

    def state(self, pid: int) -> dict[str, object] | None:
        """A PID's generation, last sequence and window (bookkeeping fields left out)."""
        raw = self.raw.hget(self.pk.pids, str(pid))
        if raw is None:
            return None
        state = decode_pid_state(raw)
        window = [list(batch) for batch in state.window]
        return {"g": state.generation, "s": state.last_sequence, "w": window}

    def expire(self, pid: int) -> None:
        """Remove a PID's state as its expiry would (hash entry and expiry index entry)."""
        assert self.raw.hdel(self.pk.pids, str(pid)) == 1
        self.raw.zrem(self.pk.pid_expiry, str(pid))

    def values(self) -> list[bytes]:
        records = self.topic.reader(0, 0).read(max_records=10_000)
        assert [r.offset for r in records] == list(range(len(records)))
        return [r.value for r in records]


@pytest.fixture
def h(client: fencing.Client, raw: redis.Redis) -> Harness:
    topic = client.topic(TOPIC, partitions=1)
    return Harness(client, raw, topic, topic.producer(lease_ttl=LEASE_TTL))


def offsets(mds: list[fencing.RecordMetadata]) -> list[int]:
    return [m.offset for m in mds]


def test_a_gap_is_out_of_order(h: Harness) -> None:
    h.p.send_batch([b"a"], partition=0)
    h.p.send_batch([b"b", b"c"], partition=0)
    assert h.p._standing[0].next_sequence == 3
    for first in (4, 10):
        error = h.refused(h.call([b"x"], first), fencing.OutOfOrderSequence)
        assert isinstance(error, fencing.OutOfOrderSequence)
        assert (error.pid, error.expected_sequence, error.sequence) == (h.p.producer_id, 3, first)
        assert (error.topic, error.partition) == (TOPIC, 0)
    assert offsets(h.p.send_batch([b"d"], partition=0)) == [3]
    assert h.values() == [b"a", b"b", b"c", b"d"]


def test_same_sequences_with_other_records_are_refused(h: Harness) -> None:
    h.p.send_batch([b"a"], partition=0)  # sequences 0..0
    h.p.send_batch([b"b", b"c", b"d"], partition=0)  # sequences 1..3
    pid = h.p.producer_id
    cases = [
        ([b"X"], 0),  # the range of an earlier batch in the window
        ([b"b", b"c", b"X"], 1),  # the last batch's range, one record differs
        ([b"c", b"b", b"d"], 1),  # same records, other order
        ([b"b", b"c"], 1),  # overlaps the last batch's range
        ([b"c", b"d"], 2),  # overlaps it from inside
    ]
    for values, first in cases:
        error = h.refused(h.call(values, first), fencing.DuplicateSequence)
        assert isinstance(error, fencing.DuplicateSequence)
        last = first + len(values) - 1
        assert (error.pid, error.first_sequence, error.last_sequence) == (pid, first, last)
        # Every one is "other records" (overlapping ranges too: none is older than the
        # window), and the error says where.
        assert (error.reason, error.topic, error.partition) == ("other-records", TOPIC, 0)
        assert "was used by other records" in str(error)
    assert offsets(h.p.send_batch([b"e"], partition=0)) == [4]
    assert h.values() == [b"a", b"b", b"c", b"d", b"e"]


def test_exact_duplicates_in_the_window_return_the_original_offsets(h: Harness) -> None:
    batches = [[b"%d-%d" % (i, j) for j in range(i % 3 + 1)] for i in range(8)]
    sent: list[tuple[int, list[int]]] = []  # (first sequence, offsets) per batch
    for batch in batches:
        first = h.p._standing[0].next_sequence
        sent.append((first, offsets(h.p.send_batch(batch, partition=0))))
    log = h.values()
    assert log == [v for batch in batches for v in batch]
    for batch, (first, original) in list(zip(batches, sent, strict=True))[-5:]:
        before = h.snapshot()
        appended = h.execute(h.call(batch, first))
        assert appended.duplicate is True
        assert appended.first_offset == original[0]
        assert h.snapshot() == before
    # Older than the window: the same exact batches are refused, not written again.
    for batch, (first, _) in list(zip(batches, sent, strict=True))[:3]:
        error = h.refused(h.call(batch, first), fencing.DuplicateSequence)
        assert "older than" in str(error)
        assert isinstance(error, fencing.DuplicateSequence)
        assert error.reason == "older-than-window"
    assert h.values() == log


def test_expired_state_above_generation_0_is_an_unknown_producer(h: Harness) -> None:
    """An incarnation above generation 0 may have been fenced by a newer one whose state
    expired too: with no state it never starts afresh (that would be below the fence)."""
    h.p.send_batch([b"a"], partition=0)
    h.p.send_batch([b"b"], partition=0)
    pid, standing = h.p.producer_id, h.p._standing[0]
    h.expire(pid)
    error = h.refused(
        h.call([b"c"], standing.next_sequence, generation=1), fencing.UnknownProducerId
    )
    assert isinstance(error, fencing.UnknownProducerId)
    assert (error.pid, error.reason) == (pid, "expired")
    # Generation 0, past the first batch: the script refuses too ("idle"), so that the
    # producer takes a fresh PID; its sequences restart at 0 there, and a PID's never skip.
    error = h.refused(h.call([b"c"], standing.next_sequence), fencing.UnknownProducerId)
    assert isinstance(error, fencing.UnknownProducerId)
    assert (error.pid, error.reason) == (pid, "idle")
    assert "fresh PID" in str(error)
    # A first batch (sequence 0) of a PID without state is a new producer: it is taken.
    appended = h.execute(h.call([b"c"], 0))
    assert (appended.first_offset, appended.duplicate) == (2, False)
    checksum = protocol.topic.checksum([fencing.Record(b"c")])
    assert h.state(pid) == {"g": 0, "s": 0, "w": [[0, 0, checksum, 2]]}
    assert h.values() == [b"a", b"b", b"c"]


def test_an_idle_producer_whose_state_expired_takes_a_fresh_pid(h: Harness) -> None:
    """DESIGN G5 (Kafka KIP-360): it goes on silently, as a fresh PID from sequence 0."""
    h.p.send_batch([b"a", b"b"], partition=0)
    old = h.p.producer_id
    h.expire(old)
    assert offsets(h.p.send_batch([b"c"], partition=0)) == [2]
    fresh = h.p.producer_id
    assert fresh != old
    assert offsets(h.p.send_batch([b"d"], partition=0)) == [3]
    assert h.state(old) is None  # nothing more was written under the old PID
    state = h.state(fresh)
    assert state is not None
    assert (state["g"], state["s"]) == (0, 1)
    assert [w[:2] for w in state["w"]] == [[0, 0], [1, 1]]  # type: ignore[attr-defined]
    assert h.p.last_resolution is None
    assert h.p.state.producer_id == fresh
    assert (h.p.state.next_sequence(0), h.p.state.generations[0]) == (2, 0)
    records = h.topic.reader(0, 0).read(max_records=10)
    assert [(r.value, r.producer_id) for r in records] == [
        (b"a", old),
        (b"b", old),
        (b"c", fresh),
        (b"d", fresh),
    ]


def test_state_saved_before_an_idle_expiry_stays_unresumable(h: Harness) -> None:
    """The producer went on after its state expired: what was saved before still names
    the expired state (UnknownProducerId, nothing written), not the records sent since."""
    h.p.send_batch([b"a"], partition=0)
    saved = h.p.state
    h.expire(h.p.producer_id)
    h.p.send_batch([b"b"], partition=0)
    before = h.snapshot()
    with pytest.raises(fencing.UnknownProducerId) as info:
        h.topic.producer(resume=saved, lease_ttl=LEASE_TTL)
    assert info.value.pid == saved.producer_id
    assert h.snapshot() == before
    assert h.values() == [b"a", b"b"]
    # The producer that went on is not fenced by the attempt.
    assert offsets(h.p.send_batch([b"c"], partition=0)) == [2]


def test_a_named_producer_whose_state_expired_keeps_its_pid(h: Harness) -> None:
    """A name is bound to its PID: it starts afresh there instead (as before)."""
    named = h.topic.producer(name="keeper", lease_ttl=LEASE_TTL)
    try:
        named.send_batch([b"a"], partition=0)
        pid = named.producer_id
        h.expire(pid)
        assert offsets(named.send_batch([b"b"], partition=0)) == [1]
        assert named.producer_id == pid
    finally:
        named.close()


def test_a_resumed_incarnation_fences_the_one_it_replaced(h: Harness) -> None:
    old = h.p
    old.send_batch([b"a"], partition=0)
    saved = old.state  # saved before the next batch, like a copy job between send and save
    last = old.send_batch([b"b", b"c"], partition=0)
    new = h.topic.producer(resume=fencing.ProducerState.from_json(saved.to_json()))
    try:
        assert new.producer_id == old.producer_id
        assert new._standing[0].generation == old._standing[0].generation + 1
        assert new._standing[0].next_sequence == 1
        before = h.snapshot()
        with pytest.raises(fencing.ProducerFenced):
            old.send_batch([b"d"], partition=0)
        assert old.fenced
        with pytest.raises(fencing.ProducerFenced):  # permanent, and no round trip
            old.send_batch([b"d"], partition=0)
        # A raw copy of the old incarnation's next batch is refused too.
        h.refused(h.call([b"d"], 3, producer=old), fencing.ProducerFenced)
        assert h.snapshot() == before
        # The new incarnation resends what followed the saved state: original offsets.
        assert new.send_batch([b"b", b"c"], partition=0) == last
        assert h.snapshot() == before
        assert offsets(new.send_batch([b"d"], partition=0)) == [3]
    finally:
        new.close()
    assert h.values() == [b"a", b"b", b"c", b"d"]


def test_resuming_expired_state_is_an_unknown_producer(h: Harness) -> None:
    h.p.send_batch([b"a"], partition=0)
    saved = h.p.state
    assert saved.next_sequence(0) == 1
    h.expire(h.p.producer_id)
    before = h.snapshot()
    with pytest.raises(fencing.UnknownProducerId) as info:
        h.topic.producer(resume=saved, lease_ttl=LEASE_TTL)
    assert info.value.pid == h.p.producer_id
    assert h.snapshot() == before
    assert h.values() == [b"a"]


def test_state_is_five_batches_per_producer(h: Harness) -> None:
    producers = [h.p] + [h.topic.producer(lease_ttl=LEASE_TTL) for _ in range(2)]
    expected: dict[int, list[list[object]]] = {p.producer_id: [] for p in producers}
    try:
        for i in range(50):
            for k, p in enumerate(producers):
                batch = [fencing.Record(b"%d-%d-%d" % (k, i, j)) for j in range(1 + (i + k) % 3)]
                first = p._standing[0].next_sequence
                mds = p.send_batch(batch, partition=0)
                entry = [
                    first,
                    first + len(batch) - 1,
                    protocol.topic.checksum(batch),
                    mds[0].offset,
                ]
                expected[p.producer_id].append(entry)
    finally:
        for p in producers[1:]:
            p.close()
    assert h.raw.hlen(h.pk.pids) == 3
    indexed: list[bytes] = h.raw.zrange(h.pk.pid_expiry, 0, -1)  # type: ignore[assignment]
    assert sorted(int(m) for m in indexed) == sorted(expected)
    for pid, entries in expected.items():
        state = h.state(pid)
        assert state == {"g": 0, "s": entries[-1][1], "w": entries[-5:]}


@pytest.mark.parametrize(
    "unreadable",
    [b'{"g":5,"s":0,"t":1,"w":[]}', b"garbage"],
    ids=["another-versions-json", "damaged"],
)
def test_a_state_the_scripts_cannot_read_is_state_lost_never_a_fresh_start(
    h: Harness, unreadable: bytes
) -> None:
    # Taking it for "no state" would start the PID afresh at the sender's generation: the
    # generation fence (5 here) and the duplicate window would be gone without a word.
    h.p.send_batch([b"a"], partition=0)
    pid = h.p.producer_id
    h.raw.hset(h.pk.pids, str(pid), unreadable)
    error = h.refused(h.call([b"b"], 1), fencing.StateLost)
    assert isinstance(error, fencing.StateLost)
    assert error.reason == "pid-state"
    assert f"field {pid} of {h.pk.pids}" in str(error)
    saved = h.p.state
    before = h.snapshot()
    with pytest.raises(fencing.StateLost):
        h.topic.producer(resume=saved, lease_ttl=LEASE_TTL)
    with pytest.raises(fencing.StateLost):
        h.p.send_batch([b"b"], partition=0)
    assert h.snapshot() == before
    # Expiry cleanup (run when a new PID registers) leaves it where it is.
    h.raw.zadd(h.pk.pid_expiry, {str(pid): 0})
    other = h.topic.producer(lease_ttl=LEASE_TTL)
    try:
        other.send_batch([b"c"], partition=0)
    finally:
        other.close()
    assert h.raw.hget(h.pk.pids, str(pid)) == unreadable
    assert h.values() == [b"a", b"c"]

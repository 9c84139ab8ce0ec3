"""G5's error cases, each checked to write nothing, and the bounded duplicate window.

Calls are built with :func:`fencing._protocol.topic.append` from a real opened producer's
standing on the partition (its writer, PID, generation and next sequence), so each case
differs from a legal send in exactly one field. "Nothing written" is checked by comparing
``DUMP`` of every key the append script writes (partition metadata, stream, PID state,
PID expiry, names) before and after. The exclusive-producer row is left out: the producer's
background lease renewal may legitimately write it at any time.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
import redis

import fencing
from fencing import AccessMode, Client, ProducerFenced
from fencing import _protocol as protocol
from fencing._keys import PartitionKeys
from fencing._protocol.producer import decode_pid_state
from fencing._protocol.topic import Appended, Sequenced
from fencing._sync.producer import Producer
from fencing.faults import Proxy
from tests.support.internals import context_of, metadata_of

from ..support.clock import server_ms, wait_server_past
from ..support.keys import snapshot
from ..support.logs import values_of
from ..support.wire import APPEND

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
        return metadata_of(self.topic).partition_keys(0)

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
        standing = p._queues[0].standing
        records = [fencing.Record(v) for v in values]
        return protocol.topic.append(
            self.pk,
            records,
            incarnation=metadata_of(self.topic).incarnation_of(0),
            seen_next=metadata_of(self.topic).seen_next(0),
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
        return (
            context_of(self.client)
            .driver(1.0)
            .execute(call, context_of(self.client).budget_default())
        )

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
        slots = self.raw.hgetall(self.pk.window)
        state = decode_pid_state(raw, slots, pid=pid, size=self.topic.dedup_window)
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
    assert h.p._queues[0].standing.next_sequence == 3
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
        first = h.p._queues[0].standing.next_sequence
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
    pid, standing = h.p.producer_id, h.p._queues[0].standing
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
    """G5 (Kafka KIP-360): it goes on silently, as a fresh PID from sequence 0."""
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
        assert new._queues[0].standing.generation == old._queues[0].standing.generation + 1
        assert new._queues[0].standing.next_sequence == 1
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
                first = p._queues[0].standing.next_sequence
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


# -- resends of saved state: the window's reasons, and what the producer does next ----------


def _resumed(h: Harness, saved: fencing.ProducerState) -> Producer:
    return h.topic.producer(resume=saved, lease_ttl=LEASE_TTL)


def _send_or_refusal(
    h: Harness, p: Producer, values: list[bytes]
) -> list[int] | tuple[str, int, int]:
    """The offsets a send got, or the reason and sequence range of its DuplicateSequence
    (checked to have written nothing)."""
    before = h.snapshot()
    try:
        return offsets(p.send_batch(values, partition=0))
    except fencing.DuplicateSequence as exc:
        assert h.snapshot() == before
        assert (exc.pid, exc.topic, exc.partition) == (p.producer_id, TOPIC, 0)
        return (exc.reason, exc.first_sequence, exc.last_sequence)


def test_a_resend_older_than_the_window_is_refused_and_the_producer_goes_on(h: Harness) -> None:
    """A copy job resumed from state saved 8 batches back skips what each error names and
    finishes exactly once: the batches older than the window (5) are refused, the ones in it
    are answered with their original offsets, and the next new batch lands after them."""
    batches = [[b"%d-%d" % (i, j) for j in range(i % 3 + 1)] for i in range(8)]
    h.p.open()
    saved = h.p.state
    for batch in batches:
        h.p.send_batch(batch, partition=0)
    log = h.values()
    firsts = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    q = _resumed(h, saved)
    try:
        answers = [_send_or_refusal(h, q, batch) for batch in [*batches, [b"new"]]]
    finally:
        q.close()
    expected: list[list[int] | tuple[str, int, int]] = [
        ("older-than-window", firsts[i], firsts[i] + len(batches[i]) - 1) for i in range(3)
    ]
    expected += [[firsts[i] + j for j in range(len(batches[i]))] for i in range(3, 8)]
    expected.append([len(log)])
    assert answers == expected
    assert h.values() == [*log, b"new"]


def test_other_records_under_a_sequence_range_in_the_window_are_refused_and_skipped(
    h: Harness,
) -> None:
    h.p.open()
    saved = h.p.state
    for value in (b"a", b"b", b"c"):
        h.p.send_batch([value], partition=0)
    q = _resumed(h, saved)
    try:
        answers = [_send_or_refusal(h, q, [v]) for v in (b"X", b"b", b"c", b"d")]
    finally:
        q.close()
    assert answers == [("other-records", 0, 0), [1], [2], [3]]
    assert h.values() == [b"a", b"b", b"c", b"d"]


def test_a_resend_straddling_the_last_sequence_is_refused_and_the_producer_stays(
    h: Harness,
) -> None:
    """Resent with other batch boundaries across the last written sequence: refused in full,
    nothing written, and the producer does not move on (the old boundaries still work)."""
    h.p.send_batch([b"a"], partition=0)  # sequence 0
    saved = h.p.state
    h.p.send_batch([b"b", b"c"], partition=0)  # sequences 1..2
    q = _resumed(h, saved)
    try:
        answers = [
            _send_or_refusal(h, q, values)
            for values in ([b"b", b"c", b"d"], [b"b", b"c", b"d", b"e"], [b"b", b"c"], [b"d"])
        ]
    finally:
        q.close()
    assert answers == [("straddles", 1, 3), ("straddles", 1, 4), [1, 2], [3]]
    assert h.values() == [b"a", b"b", b"c", b"d"]


def test_the_duplicate_window_is_the_topics_own(client: fencing.Client) -> None:
    """A window of 1: the batch before the last one is already older than the window."""
    topic = client.topic("narrow", partitions=1, dedup_window=1)
    assert topic.open().dedup_window == 1
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        saved = p.open().state
        p.send_batch([b"a"], partition=0)
        p.send_batch([b"b"], partition=0)
    with topic.producer(resume=saved, lease_ttl=LEASE_TTL) as q:
        with pytest.raises(fencing.DuplicateSequence) as info:
            q.send_batch([b"a"], partition=0)
        assert (info.value.reason, info.value.first_sequence) == ("older-than-window", 0)
        assert offsets(q.send_batch([b"b"], partition=0)) == [1]
        assert offsets(q.send_batch([b"c"], partition=0)) == [2]
    assert [r.value for r in topic.reader(0, 0).read(max_records=10)] == [b"a", b"b", b"c"]
    assert client.topic("wide", partitions=1).open().dedup_window == 5  # the default


def test_a_window_of_a_thousand_answers_a_resend_900_batches_back(
    client: fencing.Client, raw: redis.Redis
) -> None:
    topic = client.topic("deep", partitions=1, dedup_window=1000)
    values = [b"v%d" % i for i in range(1000)]
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        for i, value in enumerate(values[:99]):
            assert offsets(p.send_batch([value], partition=0)) == [i]
        saved = p.state
        for i, value in enumerate(values[99:], start=99):
            assert offsets(p.send_batch([value], partition=0)) == [i]
    pk = metadata_of(topic).partition_keys(0)
    with topic.producer(resume=saved, lease_ttl=LEASE_TTL) as q:
        before = [raw.dump(k) for k in (pk.meta, pk.stream, pk.pids, pk.pid_expiry, pk.names)]
        assert offsets(q.send_batch([values[99]], partition=0)) == [99]  # 900 batches back
        assert offsets(q.send_batch([values[100]], partition=0)) == [100]
        after = [raw.dump(k) for k in (pk.meta, pk.stream, pk.pids, pk.pid_expiry, pk.names)]
        assert after == before
    records = topic.reader(0, 0).read(max_records=2000)
    assert [r.value for r in records] == values


# -- the batch's identity is more than a 32-bit checksum -------------------------------------


def _crc32_table() -> list[int]:
    table = []
    for byte in range(256):
        c = byte
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32_TABLE = _crc32_table()
#: Each table entry's top byte is unique: it names the entry (the CRC run backwards).
_CRC32_BY_TOP = {entry >> 24: index for index, entry in enumerate(_CRC32_TABLE)}


def forge_crc32(prefix: bytes, target: int) -> bytes:
    """``prefix`` followed by the 4 bytes that make its ``zlib.crc32`` equal ``target``."""
    register = zlib.crc32(prefix) ^ 0xFFFFFFFF
    wanted = target ^ 0xFFFFFFFF
    indexes = []
    for _ in range(4):  # backwards: which table entry each of the 4 steps must use
        index = _CRC32_BY_TOP[wanted >> 24]
        indexes.append(index)
        wanted = ((wanted ^ _CRC32_TABLE[index]) << 8) & 0xFFFFFFFF
    suffix = bytearray()
    for index in reversed(indexes):  # forwards: the byte that selects that entry
        suffix.append((register ^ index) & 0xFF)
        register = (register >> 8) ^ _CRC32_TABLE[index]
    return prefix + bytes(suffix)


def test_other_records_with_the_same_crc32_are_refused_not_taken_for_a_duplicate(
    h: Harness,
) -> None:
    original = b"transfer 100 EUR to account 42.."
    forged = forge_crc32(b"transfer 999 EUR to acct 666", zlib.crc32(original))
    # The forged record really collides: same length (so the same layout and part lengths
    # around it) and the same CRC-32, from any starting value.
    assert len(forged) == len(original) and forged != original
    assert zlib.crc32(forged) == zlib.crc32(original)
    assert zlib.crc32(forged, 0x1234ABCD) == zlib.crc32(original, 0x1234ABCD)
    h.p.open()
    saved = h.p.state
    assert offsets(h.p.send_batch([original], partition=0)) == [0]
    q = _resumed(h, saved)
    try:
        answer = _send_or_refusal(h, q, [forged])
    finally:
        q.close()
    assert answer == ("other-records", 0, 0)
    assert h.values() == [original]


def test_a_state_saved_before_the_first_send_cannot_resume_once_its_state_is_gone(
    client: fencing.Client, raw: redis.Redis
) -> None:
    """A job saves its state before its first send (sequence 0), writes, crashes, and comes
    back after its state expired and a cleanup dropped it: the PID's fence shows it wrote
    there, so resume= is UnknownProducerId before anything is written, never a fresh start
    that writes the same records again."""
    topic = client.topic("gone", partitions=1, producer_state_ttl=1.0)
    pk = metadata_of(topic).partition_keys(0)
    p = topic.producer(lease_ttl=LEASE_TTL)
    saved = p.state  # before the first send
    p.send_batch([b"a", b"b"], partition=0)
    p.send_batch([b"c"], partition=0)
    p.close()
    wait_server_past(raw, server_ms(raw) + 1000)
    with topic.producer(lease_ttl=LEASE_TTL) as other:  # a registration drops expired states
        other.send_batch([b"x"], partition=0)
    assert raw.hget(pk.pids, str(saved.producer_id)) is None
    with pytest.raises(fencing.UnknownProducerId, match="resume") as info:
        topic.producer(resume=saved, lease_ttl=LEASE_TTL)
    assert info.value.reason == "resume-expired"
    records = topic.reader(0, 0).read(max_records=100)
    assert [r.value for r in records] == [b"a", b"b", b"c", b"x"]


def test_a_named_producer_that_is_not_idempotent_is_fenced_by_its_successor(
    client: Client,
) -> None:
    topic = client.topic("t", partitions=1)
    old = topic.producer(name="job", idempotent=False)
    old.send(b"old")
    new = topic.producer(name="job", idempotent=False)
    with pytest.raises(ProducerFenced):
        old.send(b"zombie")
    new.send(b"new")
    assert [r.value for r in topic.reader(0, 0).read()] == [b"old", b"new"]


def test_a_resend_answered_from_the_window_reports_the_epoch_it_was_written_in(
    pclient: Client, proxy: Proxy, client: Client
) -> None:
    """A resend answered from the duplicate window carries the epoch the record was written in
    (the one in the log), not the resender's (G2)."""
    p1 = pclient.topic("t", partitions=1).producer(AccessMode.EXCLUSIVE_WITH_FENCING)
    p1.send(b"warm-up")
    saved = p1.state
    with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
        p1.send(b"input-0")
    topic = client.topic("t")
    p2 = topic.producer(AccessMode.EXCLUSIVE_WITH_FENCING, resume=saved)
    assert p2.epoch(0) == p1.epoch(0) + 1
    md = p2.send(b"input-0")  # the copy job resends from its saved state
    (record,) = topic.reader(0, 1).read()
    assert (md.offset, md.epoch) == (1, p1.epoch(0)) == (record.offset, record.epoch)
    assert p2.send(b"input-1").epoch == p2.epoch(0)


def test_a_state_written_before_owners_were_kept_is_adopted(
    client: Client, raw: redis.Redis
) -> None:
    """A PID state of the previous format ("g s t x|window", no owner) is read, not lost."""
    topic = client.topic("t", partitions=1)
    p = topic.producer()
    p.send(b"a")
    pk = metadata_of(topic).partition_keys(0)
    stored = raw.hget(pk.pids, str(p.producer_id))
    assert stored is not None
    head, bar, window = stored.decode().partition("|")
    legacy = " ".join(head.split(" ")[:4]) + bar + window
    raw.hset(pk.pids, str(p.producer_id), legacy)
    assert decode_pid_state(legacy).owner == ""
    assert p.send(b"b").offset == 1
    state = decode_pid_state(raw.hget(pk.pids, str(p.producer_id)))  # type: ignore[arg-type]
    assert (state.owner, state.last_sequence) == (p.session, 1)
    assert values_of(topic) == [b"a", b"b"]


@pytest.mark.parametrize(
    "change",
    [
        {"generations": {0: 10**30}},
        {"generations": {0: -1}},
        {"sequences": {0: -5}},
        {"sequences": {0: 2**53}},
        {"producer_id": 0},
        {"producer_id": 2**60},
        {"producer_id": True},
        {"generations": {-1: 0}},
        {"generations": {0: 1.5}},
        {"name": "bad name"},
        {"topic": "__reserved"},
    ],
    ids=repr,
)
def test_a_damaged_producer_state_is_refused_before_any_write(
    client: Client, raw: redis.Redis, namespace: str, change: dict[str, object]
) -> None:
    topic = client.topic("t", partitions=1)
    live = topic.producer()
    live.send(b"a")
    saved = live.state.to_dict()
    saved.update(change)
    before = snapshot(raw, namespace)
    with pytest.raises((fencing.InvalidArgument, fencing.InvalidArgumentType)):
        state = fencing.ProducerState(
            topic=saved["topic"],  # type: ignore[arg-type]
            producer_id=saved["producer_id"],  # type: ignore[arg-type]
            generations=saved["generations"],  # type: ignore[arg-type]
            sequences=saved["sequences"],  # type: ignore[arg-type]
            name=saved["name"],  # type: ignore[arg-type]
        )
        topic.producer(resume=state)
    assert snapshot(raw, namespace) == before
    live.send(b"b")  # the live incarnation was not fenced
    assert values_of(topic) == [b"a", b"b"]


@pytest.mark.parametrize(
    "text",
    [
        '{"topic": "t", "producer_id": "1e3", "name": null, "generations": {}, "sequences": {}}',
        '{"topic": "t", "producer_id": 1, "name": null, "generations": {"0": true}, '
        '"sequences": {}}',
        '{"topic": "t", "producer_id": 1, "name": null, "generations": {"0x1": 0}, '
        '"sequences": {}}',
        '{"topic": "t", "producer_id": 1, "name": null, "generations": [], "sequences": {}}',
        '{"topic": "t", "name": null, "generations": {}, "sequences": {}}',
        "[1, 2]",
    ],
)
def test_damaged_saved_json_is_refused(text: str) -> None:
    with pytest.raises((fencing.InvalidArgument, fencing.InvalidArgumentType)):
        fencing.ProducerState.from_json(text)


def test_a_saved_producer_id_the_counter_never_handed_out_is_state_lost(
    client: Client, raw: redis.Redis, namespace: str
) -> None:
    topic = client.topic("t", partitions=1)
    live = topic.producer()
    live.send(b"a")
    saved = live.state
    forged = fencing.ProducerState("t", saved.producer_id + 5, {0: 0}, {0: 1})
    before = snapshot(raw, namespace)
    with pytest.raises(fencing.StateLost, match="handed out ids up to"):
        topic.producer(resume=forged)
    assert snapshot(raw, namespace) == before


@pytest.mark.parametrize("value", ["1e30", "100000000000000000000", "0x10", "1.5", " 1", "-"])
def test_the_scripts_refuse_integers_they_cannot_hold_exactly(
    client: Client, raw: redis.Redis, namespace: str, value: str
) -> None:
    topic = client.topic("t", partitions=1)
    live = topic.producer()
    live.send(b"a")
    pk = metadata_of(topic).partition_keys(0)
    call = protocol.producer.pid_open(
        pk,
        pid=live.producer_id,
        name=None,
        resume_generation=value,  # type: ignore[arg-type]
        resume_next_sequence=1,
        session=uuid.uuid4().hex,
        incarnation=metadata_of(topic).incarnation_of(0),
    )
    before = snapshot(raw, namespace)
    with pytest.raises(fencing.FencingError, match=r"unexpected reply.*BAD_ARGUMENT"):
        context_of(client).driver(1.0).execute(call, context_of(client).budget_default())
    assert snapshot(raw, namespace) == before
    live.send(b"b")

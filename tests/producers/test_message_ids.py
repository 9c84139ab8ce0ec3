"""Application message ids: a record whose id was appended to its partition within the
topic's id window is not appended again, whoever sends it; its send returns the original's
offset and epoch with ``duplicate`` set. The unit is the caller's call: every id known, it is
answered; some known, it is refused whole (DuplicateMessageId) and nothing is written."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest
import redis

import fencing
import fencing.aio
from fencing import AccessMode, DuplicateMessageId, InvalidArgument, ProducerFenced, Record
from fencing._partitioner import partition_for_key
from fencing.faults import Proxy
from tests.support.internals import metadata_of

from ..support.clock import wait_server_past
from ..support.logs import records_of, records_of_async, values_of
from ..support.processes import fork, wait_child
from ..support.wire import APPEND


def ids_of(topic: fencing.Topic, partition: int = 0) -> list[str | None]:
    return [r.message_id for r in records_of(topic, partition)]


def test_a_resend_with_a_known_id_is_answered_with_the_original(client: fencing.Client) -> None:
    topic = client.topic("orders", partitions=1)
    with topic.producer() as p:
        first = p.send(b"order 17", message_id="order-17")
        p.send(b"other")
        again = p.send(b"order 17", message_id="order-17")
    assert (first.offset, first.duplicate) == (0, False)
    assert (again.offset, again.epoch, again.duplicate) == (0, first.epoch, True)
    assert values_of(topic) == [b"order 17", b"other"]
    assert ids_of(topic) == ["order-17", None]


def test_the_id_is_known_to_any_producer_and_any_process(client: fencing.Client) -> None:
    """A copy job's restart with nothing saved: a new producer object, a new process."""
    topic = client.topic("copy", partitions=1)
    with topic.producer(name="copier") as p:
        originals = p.send_batch([Record(b"row %d" % i, message_id=f"in/{i}") for i in range(3)])

    def child() -> int:
        with topic.producer(access_mode=AccessMode.EXCLUSIVE) as q:
            resent = q.send_batch([Record(b"row %d" % i, message_id=f"in/{i}") for i in range(3)])
            fresh = q.send(b"row 3", message_id="in/3")
        ok = [m.offset for m in resent] == [0, 1, 2] and all(m.duplicate for m in resent)
        return 0 if ok and (fresh.offset, fresh.duplicate) == (3, False) else 3

    assert wait_child(fork(child)) == 0
    with topic.producer(idempotent=False) as plain:
        assert plain.send(b"row 1", message_id="in/1") == originals[1]
    assert values_of(topic) == [b"row 0", b"row 1", b"row 2", b"row 3"]


def test_the_same_id_from_two_processes_at_once_lands_once(client: fencing.Client) -> None:
    topic = client.topic("race", partitions=2)
    topic.open()
    pids = []
    for who in range(2):

        def child(who: int = who) -> int:
            with topic.producer() as p:
                for i in range(200):
                    md = p.send(b"event %d" % i, message_id=f"event-{i}")
                    if md.partition != partition_for_key(f"event-{i}".encode(), 2):
                        return 4
            return 0

        pids.append(fork(child))
    assert [wait_child(pid, 60) for pid in pids] == [0, 0]
    for partition in range(2):
        ids = ids_of(topic, partition)
        assert len(ids) == len(set(ids))
    assert sorted(v for p in range(2) for v in values_of(topic, p)) == sorted(
        b"event %d" % i for i in range(200)
    )


def test_a_batch_whose_ids_are_partly_known_writes_nothing(client: fencing.Client) -> None:
    topic = client.topic("partly", partitions=1)
    with topic.producer() as p:
        p.send_batch([Record(b"a", message_id="a"), Record(b"b", message_id="b")])
        with pytest.raises(DuplicateMessageId) as info:
            p.send_batch([Record(b"c", message_id="c"), Record(b"b", message_id="b"), Record(b"d")])
        assert {i: (m.offset, m.duplicate) for i, m in info.value.known.items()} == {1: (1, True)}
        assert (info.value.topic, info.value.partition) == ("partly", 0)
        # The producer goes on: its sequences were not used.
        assert p.send(b"e", message_id="e").offset == 2
    assert values_of(topic) == [b"a", b"b", b"e"]


def test_an_id_twice_in_one_call_is_refused_before_any_io(client: fencing.Client) -> None:
    topic = client.topic("twice", partitions=1)
    with topic.producer() as p:
        with pytest.raises(InvalidArgument, match="appears twice"):
            p.send_batch([Record(b"a", message_id="x"), Record(b"b", message_id="x")])
        for bad in ("", 17, b"x"):
            with pytest.raises(InvalidArgument):
                p.send(b"v", message_id=bad)  # type: ignore[arg-type]
        with pytest.raises(fencing.RecordTooLarge):
            p.send(b"v", message_id="x" * 1025)
    assert values_of(topic) == []


def test_a_known_id_is_answered_whatever_the_expected_offset(client: fencing.Client) -> None:
    """Ids are checked before the conditional offset: the original answers."""
    topic = client.topic("conditional", partitions=1)
    with topic.producer() as p:
        p.send(b"a", message_id="a", expected_offset=0)
        p.send(b"b")
        again = p.send(b"a", message_id="a", expected_offset=0)
        assert (again.offset, again.duplicate) == (0, True)
        with pytest.raises(fencing.OffsetMismatch):
            p.send(b"c", message_id="c", expected_offset=0)
    assert values_of(topic) == [b"a", b"b"]


def test_a_fenced_producer_resending_a_known_id_is_fenced(client: fencing.Client) -> None:
    """Ids are checked after fencing: a zombie learns it is fenced, not a duplicate."""
    topic = client.topic("zombie", partitions=1)
    old = topic.producer(access_mode=AccessMode.EXCLUSIVE).open()
    old.send(b"a", message_id="a")
    with topic.producer(access_mode=AccessMode.EXCLUSIVE_WITH_FENCING) as new:
        with pytest.raises(ProducerFenced):
            old.send(b"a", message_id="a")
        assert new.send(b"a", message_id="a").duplicate
    old.close()
    assert values_of(topic) == [b"a"]


def test_a_call_answered_by_ids_whose_reply_is_lost_resolves_as_landed(
    proxied: tuple[Proxy, fencing.Client], client: fencing.Client
) -> None:
    """A call answered by its ids uses its sequences and enters the duplicate window,
    pointing at the originals: its resend after a lost reply is answered the same."""
    proxy, pclient = proxied
    topic = pclient.topic("answered", partitions=1)
    with topic.producer() as p:
        first = p.send_batch([Record(b"a", message_id="a"), Record(b"b", message_id="b")])
        p.send(b"c")
        with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send_batch([Record(b"a", message_id="a"), Record(b"b", message_id="b")])
        resolved = p.resolve(0)
        assert resolved == first and all(m.duplicate for m in resolved or [])
        state = p.state
        assert state.next_sequence(0) == 5  # both calls' sequences were used (2 + 1 + 2)
        assert p.send(b"d").offset == 3
    assert values_of(client.topic("answered")) == [b"a", b"b", b"c", b"d"]


def test_one_callers_known_id_never_fails_anothers_records(client: fencing.Client) -> None:
    """Group commit carries several callers in one call: each caller's call is judged on
    its own, and an id twice in one call is answered by its first record."""
    topic = client.topic("group", partitions=1)
    with topic.producer(linger_ms=50) as p:
        p.send(b"k", message_id="known")
        futures = [
            p.send_async(b"new 0", message_id="new-0"),
            p.send_async(b"k", message_id="known"),
            p.send_async(b"new 1", message_id="new-1"),
            p.send_async(b"plain"),
            p.send_async(b"new 0", message_id="new-0"),
        ]
        partly: list[BaseException] = []

        def refused() -> None:
            try:
                p.send_batch([Record(b"k", message_id="known"), Record(b"z", message_id="z")])
            except DuplicateMessageId as exc:
                partly.append(exc)

        t = threading.Thread(target=refused)
        t.start()
        t.join(30)
        p.flush()
        answers = [(f.result().offset, f.result().duplicate) for f in futures]
    assert answers == [(1, False), (0, True), (2, False), (3, False), (1, True)]
    assert len(partly) == 1 and set(partly[0].known) == {0}  # type: ignore[attr-defined]
    assert values_of(topic) == [b"k", b"new 0", b"new 1", b"plain"]


def test_the_window_forgets_the_oldest_ids_by_count(
    client: fencing.Client, raw: redis.Redis
) -> None:
    topic = client.topic("count", partitions=1, message_id_window=3)
    with topic.producer() as p:
        for i in range(4):
            p.send(b"%d" % i, message_id=f"id-{i}")
        assert p.send(b"3", message_id="id-3").duplicate
        assert p.send(b"1", message_id="id-1").duplicate
        assert not p.send(b"0", message_id="id-0").duplicate  # pushed out: written again
    assert values_of(topic) == [b"0", b"1", b"2", b"3", b"0"]
    pk = metadata_of(topic).partition_keys(0)
    assert raw.hlen(pk.message_ids) == 3 and raw.llen(pk.message_id_queue) == 3


def test_an_id_past_its_age_is_never_known(client: fencing.Client, raw: redis.Redis) -> None:
    topic = client.topic("age", partitions=1, message_id_ttl=1)
    with topic.producer() as p:
        p.send(b"a", message_id="a")
        wait_server_past(raw, _ms_of(topic, 0) + 1000)  # the fault: the id ages out
        again = p.send(b"a", message_id="a")
        assert (again.offset, again.duplicate) == (1, False)
        assert p.send(b"a", message_id="a").offset == 1  # known again, from its new record
    assert topic.message_id_window == (10_000, 1.0)
    pk = metadata_of(topic).partition_keys(0)
    assert raw.lrange(pk.message_id_queue, 0, -1)[0].endswith(b" 1 a")  # the aged entry went


def _ms_of(topic: fencing.Topic, offset: int) -> int:
    record = records_of(topic)[offset]
    assert record.timestamp_ms is not None
    return record.timestamp_ms


def test_the_window_is_fixed_when_the_topic_is_created(client: fencing.Client) -> None:
    client.topic("fixed", partitions=1, message_id_window=100, message_id_ttl=60).open()
    with pytest.raises(InvalidArgument, match="remembers 100 message ids"):
        client.topic("fixed", message_id_window=200).open()
    with pytest.raises(InvalidArgument, match="for 60s"):
        client.topic("fixed", message_id_ttl=61).open()
    assert client.topic("fixed").open().message_id_window == (100, 60.0)
    bad_values = (
        {"message_id_window": 0},
        {"message_id_window": 1_000_001},
        {"message_id_ttl": 0.5},
    )
    for bad in bad_values:
        with pytest.raises(InvalidArgument):
            client.topic("other", partitions=1, **bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("which", ["message_ids", "message_id_queue"])
def test_a_wrong_type_at_the_id_keys_writes_nothing(
    client: fencing.Client, raw: redis.Redis, which: str
) -> None:
    topic = client.topic("typed", partitions=1)
    topic.open()
    key = getattr(metadata_of(topic).partition_keys(0), which)
    raw.set(key, "not ours")
    with topic.producer() as p:
        with pytest.raises(fencing.WrongKeyType, match=key):
            p.send(b"a", message_id="a")
        assert p.send(b"b").offset == 0  # sends without ids do not read those keys
    assert values_of(topic) == [b"b"]


def test_a_record_with_an_id_and_no_key_is_placed_by_its_id(client: fencing.Client) -> None:
    topic = client.topic("placed", partitions=8)
    with topic.producer() as p:
        for i in range(20):
            md = p.send(b"v", message_id=f"order-{i}")
            assert md.partition == partition_for_key(f"order-{i}".encode(), 8)
            one = p.send_batch([Record(b"v", message_id=f"order-{i}")])[0]
            assert one == md and one.duplicate


@pytest.mark.anyio
async def test_a_send_resent_after_a_timeout_lands_once(aclient: fencing.aio.Client) -> None:
    """The asyncio idiom: ``wait_for(send(..., message_id=i), t)``; on TimeoutError send it
    again with the same id. About a third of the sends time out, at random points of
    their call (before it leaves, on the wire, as it is answered)."""
    rng = random.Random(7)
    topic = aclient.topic("timeouts", partitions=1)
    answers: list[Any] = []
    timed_out = duplicates = 0
    async with topic.producer() as p:
        # On until 60 sends timed out, some on the wire (their resend is then answered by
        # the id) and some before they left (their resend writes them).
        while (timed_out < 60 or duplicates < 5) and len(answers) < 5000:
            i = len(answers)
            value, mid = b"value %d" % i, f"id-{i}"
            try:
                if rng.random() < 0.3:
                    limit = rng.choice([0.0, rng.uniform(0, 0.001)])
                    answers.append(await asyncio.wait_for(p.send(value, message_id=mid), limit))
                else:
                    answers.append(await p.send(value, message_id=mid))
            except TimeoutError:
                timed_out += 1
                answers.append(await p.send(value, message_id=mid))
                duplicates += answers[-1].duplicate
    n = len(answers)
    records = await records_of_async(topic)
    assert [r.value for r in records] == [b"value %d" % i for i in range(n)]
    assert [r.message_id for r in records] == [f"id-{i}" for i in range(n)]
    assert [md.offset for md in answers] == list(range(n))
    assert timed_out >= 60 and duplicates >= 5


def test_a_producer_without_sequences_resends_a_call_whose_records_all_carry_ids(
    proxied: tuple[Proxy, fencing.Client], client: fencing.Client
) -> None:
    """``idempotent=False`` never resends a call that may have landed, unless every record
    carries an id: then the resend is answered by the ids, and lands nothing twice."""
    proxy, pclient = proxied
    topic = pclient.topic("plain", partitions=1)
    with topic.producer(idempotent=False) as p:
        p.send(b"w")
        with proxy.drop_replies(APPEND):  # the first attempt lands, its reply is lost
            md = p.send(b"a", message_id="a")
        assert md.offset == 1
        with proxy.drop_replies(APPEND), pytest.raises(fencing.OutcomeUnknown):
            p.send(b"b")  # no id: never sent twice
    assert values_of(client.topic("plain")) == [b"w", b"a", b"b"]


def test_a_deleted_topic_takes_its_ids_with_it(client: fencing.Client, raw: redis.Redis) -> None:
    topic = client.topic("gone", partitions=1)
    with topic.producer() as p:
        p.send(b"a", message_id="a")
    pk = metadata_of(topic).partition_keys(0)
    assert raw.exists(pk.message_ids, pk.message_id_queue) == 2
    client.delete_topic("gone")
    assert raw.exists(pk.message_ids, pk.message_id_queue) == 0
    again = client.topic("gone", partitions=1)
    with again.producer() as p:
        assert not p.send(b"a", message_id="a").duplicate  # a new topic knows no id

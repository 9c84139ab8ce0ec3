"""Regressions for faults found in review: each test failed before its fix."""

from __future__ import annotations

import threading
import time

import pytest
import redis

import fencing
from fencing import AccessMode, Client, ProducerBusy, ProducerFenced, StateLost
from fencing import _protocol as protocol
from fencing._modes import Pending
from fencing._retry import RetryBudget
from fencing._sync.driver import Driver as SyncDriver

from .conftest import ServerInfo
from .support.clock import server_ms
from .support.polling import wait_until


def test_a_lost_first_batch_resolves_as_not_landed_and_can_never_land(client: Client) -> None:
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    standing = producer._standing[0]
    batch = [fencing.Record(b"late")]
    # The first send's outcome is unknown (it never reached the server).
    standing.pending = Pending(1, 0, 0, protocol.topic.checksum(batch))
    assert producer.resolve(0) is None
    assert standing.generation == 1
    # A copy of it still in flight (generation 0, sequence 0) is refused for good.
    call = protocol.topic.append(
        standing.pk,
        batch,
        incarnation=topic.incarnation_of(0),
        seen_next=0,
        expected_offset=None,
        writer=standing.writer,
        sequenced=protocol.topic.Sequenced(0, 0, protocol.topic.checksum(batch), ""),
        errors=standing.errors,
    )
    with pytest.raises(ProducerFenced):
        client._driver(1.0).execute_once(call)
    assert producer.send(b"next").offset == 0
    assert [r.value for r in topic.reader(0, 0).read()] == [b"next"]


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


def test_a_fence_after_a_lost_reply_is_an_unknown_outcome_not_a_lie(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = client.topic("t", partitions=1)
    producer = topic.producer(AccessMode.EXCLUSIVE)
    producer.send(b"a0")
    real = SyncDriver.execute_once
    state = {"lost": False}

    def lose_first_reply_then_take_over(
        self: SyncDriver, call: object, *more: object, **options: object
    ) -> object:
        result = real(self, call, *more, **options)  # type: ignore[arg-type]
        if not state["lost"] and getattr(call, "ambiguous_after_retry", False):
            state["lost"] = True
            client.topic("t").producer(AccessMode.EXCLUSIVE_WITH_FENCING)  # takes over
            raise redis.exceptions.ConnectionError("reply lost")
        return result

    monkeypatch.setattr(SyncDriver, "execute_once", lose_first_reply_then_take_over)
    with pytest.raises(fencing.OutcomeUnknown):
        producer.send(b"a1")
    monkeypatch.setattr(SyncDriver, "execute_once", real)
    landed = producer.resolve(0)
    assert landed is not None and [m.offset for m in landed] == [1]
    assert [r.value for r in topic.reader(0, 0).read()] == [b"a0", b"a1"]
    with pytest.raises(ProducerFenced):
        producer.send(b"a2")


def test_a_blocking_read_never_returns_records_of_a_recreated_log(
    own: tuple[Client, redis.Redis],
) -> None:
    client, raw = own
    topic = client.topic("t", partitions=1)
    topic.producer().send(b"old")
    reader = topic.reader(0, "latest")
    out: list[object] = []

    def read() -> None:
        try:
            out.append(reader.read(block_ms=20_000))
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    wait_until(lambda: raw.info("clients")["blocked_clients"] >= 1)
    raw.flushall()
    fresh = client.topic("t", partitions=1)
    fresh.producer().send_batch([b"new-0", b"new-1"])
    thread.join(20)
    (result,) = out
    assert isinstance(result, StateLost)


def test_expiry_cleanup_never_removes_a_live_producer_state(
    server: ServerInfo, namespace: str, raw: redis.Redis
) -> None:
    client = fencing.Client(redis.Redis.from_url(server.url), namespace=namespace)
    client.settings = client.settings.model_copy(update={"producer_state_ttl": 1.0})
    topic = client.topic("t", partitions=1)
    live = topic.producer()
    live.send(b"first")  # indexed now; the index is refreshed at most once a minute
    deadline_ms = server_ms(raw) + 1_500
    while server_ms(raw) < deadline_ms:  # keeps writing: its own last write stays fresh
        live.send(b"x")
        time.sleep(0.1)
    newcomer = topic.producer()
    newcomer.send(b"hello")  # a new registration runs the expiry cleanup
    pids = client.keys.partition("t", 0).pids
    assert raw.hexists(pids, str(live.producer_id))
    # Its last batch is still in the window: a resend is a duplicate, not a second copy.
    before = topic.offsets(0)
    standing = live._standing[0]
    standing.next_sequence -= 1
    md = live.send(b"x")
    assert topic.offsets(0) == before
    assert md.offset == before[1] - 2  # the original offset of its last batch
    client.close()


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
    standing = shared._standing[0]
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
        partition_incarnation=topic.incarnation_of(0),
    )
    assert client._driver(1.0).execute(call, client._budget_default()) == 0
    assert raw.zcard(standing.pk.shared) == 0
    assert topic.producer(AccessMode.EXCLUSIVE).epoch(0) == 1  # no 30 s wait


def test_server_refusals_are_typed_and_apply_nothing(own: tuple[Client, redis.Redis]) -> None:
    client, raw = own
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    producer.send(b"a")
    raw.config_set("maxmemory", 1)  # under noeviction every write is refused: OOM
    try:
        with pytest.raises(fencing.Unavailable, match="applied nothing"):
            producer.send(b"b")
        with pytest.raises(fencing.Unavailable):
            client.ownership("g", "host-a", ttl=10).claim("r")
    finally:
        raw.config_set("maxmemory", 0)
    assert [r.value for r in topic.reader(0, 0).read()] == [b"a"]


@pytest.mark.parametrize("ttl", [0.05, 0.3, 1.0, 10.0, 60.0])
def test_the_worst_case_of_a_call_stays_below_its_lease(ttl: float) -> None:
    budget = RetryBudget.for_ttl(ttl)
    assert budget.timeout < ttl / 3
    assert budget.worst_case < ttl


def test_records_left_without_their_metadata_are_state_lost(
    client: Client, raw: redis.Redis
) -> None:
    raw.xadd(client.keys.partition("t", 0).stream, {"v": b"orphan"}, id="0-1")
    with pytest.raises(StateLost) as info:
        client.topic("t", partitions=1).open()
    assert info.value.reason == "stream"
    assert not raw.exists(client.keys.partition("t", 0).meta)


def test_too_many_headers_are_refused_before_any_io(client: Client) -> None:
    with pytest.raises(fencing.RecordTooLarge):
        fencing.Record(b"v", headers={f"h{i}": b"" for i in range(2000)})
    with pytest.raises(fencing.RecordTooLarge):
        fencing.Record(b"v", headers={"n" * 2000: b""})


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

"""Issue 11: holes around the epoch machinery, each reproduced first, then closed.

1. one client's producer-state expiry never expires another producer's state (one expiry
   per topic, fixed at creation); a fenced incarnation never starts afresh below its fence;
3. a lost reply to a resolution is answered as the first attempt (resolve is idempotent);
4. a damaged saved ProducerState is refused before any write, and the scripts refuse
   integers they cannot hold exactly;
6. a producer id handed out twice (the counter went backwards) is StateLost, not a batch
   silently dropped as a "duplicate";
7. an incarnation fenced by resume= or by its name stops renewing and leaves at once;
8. a waiting claim re-checks even when the release notification never comes;
9. blocking reads and many lease lengths do not make a connection pool each;
plus the bad input that escaped typing. (2, forks, is in test_fork.py; 5, non-idempotent
lost replies, in test_lost_reply.py.)
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from urllib.parse import urlparse

import pytest
import redis

import fencing
from fencing import AccessMode, Client
from fencing import _protocol as protocol
from fencing._lua_loader import script
from fencing._protocol.producer import decode_pid_state
from fencing._settings import FencingSettings, load_settings
from fencing.faults import Proxy

from .conftest import ServerInfo
from .support.clock import server_ms
from .support.polling import wait_until

APPEND = script("append").sha1.encode()
RESOLVE = script("resolve").sha1.encode()


def values(topic: fencing.Topic, partition: int = 0) -> list[bytes]:
    records = topic.reader(partition, "earliest").read(max_records=10_000)
    return [r.value for r in records]


def snapshot(raw: redis.Redis, namespace: str) -> dict[bytes, bytes | None]:
    return {k: raw.dump(k) for k in sorted(raw.scan_iter(match=f"{namespace}:*"))}


# -- 1. one expiry per topic -------------------------------------------------------------------


def test_another_clients_short_state_ttl_never_expires_this_topics_state(
    server: ServerInfo,
    namespace: str,
    client: Client,
    raw: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = client.topic("t", partitions=1)
    first = topic.producer()
    first.send(b"a")
    second = topic.producer(resume=first.state)  # generation 1: fences the first
    assert second._standing[0].generation == 1
    pk = topic.partition_keys(0)
    written = decode_pid_state(raw.hget(pk.pids, str(first.producer_id))).last_write_ms  # type: ignore[arg-type]
    wait_until(lambda: server_ms(raw) > written + 1_500)

    # A client configured with a 1 s expiry registers a producer on the same partition:
    # that runs the expired-state cleanup. Its setting does not apply to this topic.
    settings = FencingSettings(redis_url=server.url, namespace=namespace, producer_state_ttl=1)
    other = Client(redis.Redis.from_url(server.url), settings=settings)
    try:
        with caplog.at_level(logging.WARNING, logger="fencing._sync.topic"):
            other_topic = other.topic("t", partitions=1)
            assert other_topic.producer_state_ttl == 7 * 24 * 3600
        assert "does not apply to topic 't'" in caplog.text
        other_topic.producer().send(b"b")
    finally:
        other.close()
    assert raw.hexists(pk.pids, str(first.producer_id))  # the fence is still there
    with pytest.raises(fencing.ProducerFenced, match="incarnation"):
        first.send(b"zombie")
    second.send(b"c")
    assert values(topic) == [b"a", b"b", b"c"]


def test_an_explicit_conflicting_state_ttl_is_refused_before_any_write(
    client: Client, raw: redis.Redis, namespace: str
) -> None:
    topic = client.topic("t", partitions=1, producer_state_ttl=3600)
    topic.producer().send(b"a")
    assert topic.producer_state_ttl == 3600
    assert raw.hget(topic.partition_keys(0).meta, "pidexp") == b"3600000"
    before = snapshot(raw, namespace)
    with pytest.raises(fencing.InvalidArgument, match="fixed when it was created"):
        client.topic("t", partitions=1, producer_state_ttl=60).open()
    assert snapshot(raw, namespace) == before
    assert client.topic("t").producer_state_ttl == 3600  # omitted: whatever it has


@pytest.mark.parametrize("ttl", [0.0001, 0.5, 0, -1, float("nan"), float("inf"), 10**12])
def test_an_unusable_state_ttl_is_refused(client: Client, ttl: float) -> None:
    with pytest.raises(fencing.InvalidArgument, match="producer_state_ttl"):
        client.topic("t", partitions=1, producer_state_ttl=ttl)
    with pytest.raises(fencing.InvalidArgument, match="producer_state_ttl"):
        load_settings(producer_state_ttl=ttl)  # FENCING_PRODUCER_STATE_TTL


@pytest.mark.parametrize("how", ["removed", "expired"])
def test_a_fenced_incarnation_whose_state_expired_never_starts_afresh(
    client: Client, raw: redis.Redis, how: str
) -> None:
    """The PID's state expires; its fence does not. The incarnation fenced by resume= is
    refused (it was paused, and learns it only now), the newest one goes on."""
    topic = client.topic("t", partitions=1, producer_state_ttl=1)
    first = topic.producer(lease_ttl=30)
    first.send(b"a")
    second = topic.producer(resume=first.state, lease_ttl=30)
    second.send(b"b")
    pk = topic.partition_keys(0)
    pid = str(first.producer_id)
    if how == "removed":
        raw.hdel(pk.pids, pid)  # what the expiry cleanup does
        raw.zrem(pk.pid_expiry, pid)
    else:
        written = decode_pid_state(raw.hget(pk.pids, pid)).last_write_ms  # type: ignore[arg-type]
        wait_until(lambda: server_ms(raw) > written + 1_100)
        topic.producer().send(b"newcomer")  # a registration runs the cleanup
        assert not raw.hexists(pk.pids, pid)
    with pytest.raises(fencing.ProducerFenced, match="incarnation 1"):
        first.send(b"zombie")  # generation 0: below the fence, state or no state
    second.send(b"c")  # generation 1: the fence vouches for it, it starts afresh
    with pytest.raises(fencing.ProducerFenced):
        first.send(b"zombie")  # fenced for good, without asking the server again
    expected = [b"a", b"b", b"c"] if how == "removed" else [b"a", b"b", b"newcomer", b"c"]
    assert values(topic) == expected


def test_a_resolution_long_after_the_send_is_unknown_not_a_guess(
    pclient: Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """Found in review: a first batch landed, its replies were lost, and its state expired
    before the resolution: "no state" no longer proves it never landed. While the expired
    state is still stored, it says so by itself (the batch is in its window: landed); once
    a cleanup dropped it, the outcome is UnknownProducerId, never a guess."""
    topic = pclient.topic("t", partitions=1, producer_state_ttl=1)
    pclient.topic("warm", partitions=1).producer().send(b"w")  # scripts loaded
    for dropped in (False, True):
        p = topic.producer(lease_ttl=2.0)
        value = b"payment-%d" % dropped
        with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send(value)
        pk = topic.partition_keys(0)
        written = decode_pid_state(raw.hget(pk.pids, str(p.producer_id))).last_write_ms  # type: ignore[arg-type]
        wait_until(lambda: server_ms(raw) > written + 1_100)  # noqa: B023 - used at once
        if dropped:
            assert raw.hdel(pk.pids, str(p.producer_id)) == 1  # as the cleanup does
            with pytest.raises(fencing.UnknownProducerId):
                p.resolve(0)
        else:
            assert [m.offset for m in p.resolve(0) or []] == [0]
        p.close()
    assert values(topic) == [b"payment-0", b"payment-1"]  # and never a second copy


def test_an_interrupted_send_is_resolved_before_the_next_one(client: Client) -> None:
    """Found in review: a KeyboardInterrupt after the request left made no pending batch, so
    every later batch reused its sequences and was refused for good."""
    topic = client.topic("t", partitions=1)
    p = topic.producer()
    p.send(b"a")
    real = p._execute

    def interrupted(call: object, *more: object, **options: object) -> object:
        real(call, *more, **options)  # type: ignore[arg-type]  # it lands...
        raise KeyboardInterrupt  # ...and the caller is interrupted before the reply

    p._execute = interrupted  # type: ignore[method-assign,assignment]
    with pytest.raises(KeyboardInterrupt):
        p.send(b"b")
    p._execute = real  # type: ignore[method-assign]
    assert p.send(b"c").offset == 2
    assert p.last_resolution is not None and [m.offset for m in p.last_resolution[1] or []] == [1]
    assert values(topic) == [b"a", b"b", b"c"]


def test_a_closed_producers_state_and_epochs_can_still_be_read(client: Client) -> None:
    topic = client.topic("t", partitions=2)
    with topic.producer(AccessMode.EXCLUSIVE) as p:
        p.send(b"a", partition=1)
    assert p.state.sequences == {0: 0, 1: 1}
    assert p.epoch(1) == 1
    with pytest.raises(fencing.InvalidArgument, match="closed"):
        p.send(b"b", partition=1)


# -- 3. a lost reply to the resolution -------------------------------------------------------


@pytest.mark.parametrize("how", ["next-send", "explicit"])
def test_a_lost_reply_to_the_resolution_is_answered_as_the_first_attempt(
    pclient: Client, proxy: Proxy, raw: redis.Redis, how: str
) -> None:
    topic = pclient.topic("t", partitions=1)
    with topic.producer(lease_ttl=1.0) as p:
        p.send(b"w0")
        standing = p._standing[0]
        generation = standing.generation
        with proxy.drop_requests(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send(b"lost")
        assert standing.pending is not None
        # The resolution bumps the generation, and its reply is lost: the retry must see
        # its own bump and answer as the first attempt did, not "fenced".
        with proxy.observe(RESOLVE) as seen, proxy.drop_replies(RESOLVE) as lost:
            if how == "explicit":
                assert p.resolve(0) is None
            else:
                assert p.send(b"next").offset == 1
        assert lost.hits == 1 and seen.hits >= 2
        assert not p.fenced
        assert p.last_resolution == (0, None)
        assert standing.generation == generation + 1
        if how == "explicit":
            assert p.send(b"next").offset == 1
        assert values(topic) == [b"w0", b"next"]
        state = decode_pid_state(raw.hget(topic.partition_keys(0).pids, str(p.producer_id)))  # type: ignore[arg-type]
        assert (state.generation, state.owner) == (generation + 1, p.session)


def test_a_resolution_after_a_newer_incarnation_is_still_fenced(client: Client) -> None:
    """Idempotent, not blind: the bump of another incarnation is not taken for our own."""
    topic = client.topic("t", partitions=1)
    p = topic.producer()
    p.send(b"a")
    standing = p._standing[0]
    standing.pending = protocol_pending(standing.next_sequence, [b"lost"])
    topic.producer(resume=p.state)  # generation + 1, by someone else
    with pytest.raises(fencing.ProducerFenced):
        p.resolve(0)


@pytest.mark.parametrize("successor", ["name", "resume"])
def test_a_superseded_incarnation_learns_its_batch_landed_and_stays_fenced(
    server: ServerInfo, pclient: Client, proxy: Proxy, client: Client, successor: str
) -> None:
    """Found by the chaos test: resolving after a newer incarnation opened said "landed" and
    handed the old incarnation the new one's generation, so it could write again."""
    p1 = pclient.topic("t", partitions=1).producer(name="n", lease_ttl=1.0)
    p1.send(b"a")
    saved = p1.state
    with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
        p1.send(b"b")
    topic = client.topic("t")
    p2 = topic.producer(name="n") if successor == "name" else topic.producer(resume=saved)
    landed = p1.resolve(0)
    assert landed is not None and [m.offset for m in landed] == [1]
    assert p1.fenced
    with pytest.raises(fencing.ProducerFenced):
        p1.send(b"zombie")
    if successor == "resume":
        assert p2.send(b"b").offset == 1  # resent from the saved state: the original offset
    p2.send(b"c")
    assert values(topic) == [b"a", b"b", b"c"]


def test_a_resend_answered_from_the_window_reports_the_epoch_it_was_written_in(
    pclient: Client, proxy: Proxy, client: Client
) -> None:
    """Found by the chaos test: the metadata carried the resender's epoch (a G2 lie)."""
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


def protocol_pending(first_sequence: int, batch: list[bytes]) -> fencing._modes.Pending:
    records = [fencing.Record(v) for v in batch]
    return fencing._modes.Pending(len(batch), 0, first_sequence, protocol.topic.checksum(records))


# -- 4. a damaged saved state ----------------------------------------------------------------


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
    assert values(topic) == [b"a", b"b"]


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
    pk = topic.partition_keys(0)
    call = protocol.producer.pid_open(
        pk,
        pid=live.producer_id,
        name=None,
        resume_generation=value,  # type: ignore[arg-type]
        resume_next_sequence=1,
        session=uuid.uuid4().hex,
        incarnation=topic.incarnation_of(0),
    )
    before = snapshot(raw, namespace)
    with pytest.raises(fencing.FencingError, match=r"unexpected reply.*BAD_ARGUMENT"):
        client._driver(1.0).execute(call, client._budget_default())
    assert snapshot(raw, namespace) == before
    live.send(b"b")


# -- 6. a producer id handed out twice ---------------------------------------------------------


def test_a_producer_id_handed_out_twice_is_state_lost_not_a_duplicate(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("t", partitions=1)
    first = topic.producer()
    assert first.send(b"same").offset == 0
    # A failover loses the counter's INCR but not the partition's state (another shard).
    raw.decr(client.keys.producer_ids())
    second = topic.producer()
    assert second.producer_id == first.producer_id
    with pytest.raises(fencing.StateLost) as info:
        second.send(b"same")  # same PID, sequence 0, same records: was a silent "duplicate"
    assert info.value.reason == "pid-reused"
    assert "counter went backwards" in str(info.value)
    raw.decr(client.keys.producer_ids())
    with pytest.raises(fencing.StateLost, match="counter"):
        topic.producer(name="job")  # a named newcomer would have taken the PID over
    assert first.send(b"next").offset == 1  # the owner is untouched
    assert values(topic) == [b"same", b"next"]


# -- 7. a fenced incarnation does not keep its lease --------------------------------------------


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
    assert values(topic) == [b"a", b"b"]


def test_a_shared_incarnation_fenced_by_its_name_stops_renewing(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("t", partitions=1)
    old = topic.producer(name="job", lease_ttl=0.6)
    old.send(b"a")
    new = topic.producer(name="job", lease_ttl=30)
    shared = topic.partition_keys(0).shared
    wait_until(lambda: old.fenced, timeout=5)  # its next renewal (every ttl/3) finds out
    wait_until(lambda: raw.zcard(shared) == 1, timeout=5)  # and it left
    assert raw.zrange(shared, 0, -1) == [new.session.encode()]
    new.send(b"b")


# -- 8. a waiting claim and a missed notification -------------------------------------------------


def test_a_waiting_claim_rechecks_when_the_release_notification_never_comes(
    server: ServerInfo, namespace: str, client: Client, raw: redis.Redis
) -> None:
    if not server.owned:
        pytest.skip("creates an ACL user")
    user, password = f"nopub-{namespace}", uuid.uuid4().hex
    # A holder whose ACL forbids (S)PUBLISH: its release happens, its notification does not.
    raw.acl_setuser(
        user,
        enabled=True,
        passwords=[f"+{password}"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-publish", "-spublish"],
    )
    url = urlparse(server.url)
    holder_client = Client.from_url(
        f"redis://{user}:{password}@{url.hostname}:{url.port}/0", namespace=namespace
    )
    try:
        holder = holder_client.ownership("g", "holder", ttl=30)
        holder.claim("r")
        out: list[object] = []
        waiter = client.ownership("g", "waiter", ttl=5)

        def wait() -> None:
            try:
                out.append(waiter.claim("r", wait=True, timeout=8))
            except BaseException as exc:
                out.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        channel = client.keys.released_channel("g", "r")
        wait_until(lambda: raw.pubsub_shardnumsub(channel)[0][1] >= 1)
        assert holder.release("r") == {"r": True}
        thread.join(15)
        (result,) = out
        assert isinstance(result, dict), result  # granted long before the 30 s lease
        assert result["r"].token == 2
    finally:
        holder_client.close()
        raw.acl_deluser(user)


# -- 9. connection pools -------------------------------------------------------------------------


def test_blocking_reads_and_lease_lengths_do_not_make_a_pool_each(
    server: ServerInfo, namespace: str
) -> None:
    client = Client.from_url(server.url, namespace=namespace, socket_timeout=0.2)
    try:
        topic = client.topic("t", partitions=1)
        reader = topic.reader(0)
        for block_ms in range(1, 21):
            assert reader.read(block_ms=block_ms) == []
        for i in range(20):
            topic.producer(lease_ttl=1.0 + i / 100).close()
        # One driver for the client's default timeout, and the few lease-derived steps.
        assert len(client._drivers) <= 3, sorted(client._drivers)

        # A read blocks longer than the socket timeout, across steps, and gets the record.
        got: list[list[fencing.Record]] = []
        thread = threading.Thread(target=lambda: got.append(reader.read(block_ms=10_000)))
        thread.start()
        r = redis.Redis.from_url(server.url)
        wait_until(lambda: r.info("clients")["blocked_clients"] >= 1)
        time.sleep(0.5)  # pacing: well past one blocking step (0.1 s)
        topic.producer().send(b"late")
        thread.join(15)
        r.close()
        assert [rec.value for rec in got[0]] == [b"late"]
    finally:
        client.close()


# -- bad input that escaped typing ---------------------------------------------------------------


@pytest.mark.parametrize("url", ["bogus://", "redis://host:notaport/0", "nonsense"])
def test_an_unusable_url_is_invalid_argument(url: str) -> None:
    with pytest.raises(fencing.InvalidArgument, match="bad Redis URL"):
        Client.from_url(url)


def test_a_url_with_a_password_is_not_echoed() -> None:
    with pytest.raises(fencing.InvalidArgument) as info:
        Client.from_url("bogus://:hunter2@host:1/0")
    assert "hunter2" not in str(info.value)


def test_a_seek_out_of_range_is_offset_out_of_range(client: Client) -> None:
    topic = client.topic("t", partitions=1)
    topic.producer().send_batch([b"a", b"b"])
    reader = topic.reader(0)
    for offset in (3, 2**53, 2**70):
        with pytest.raises(fencing.OffsetOutOfRange):
            reader.seek(offset)
    with pytest.raises(fencing.InvalidArgument):
        reader.seek(-1)
    reader.seek(2)
    assert reader.read() == []
    reader.seek(1)
    assert [r.value for r in reader.read()] == [b"b"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_an_unusable_wait_timeout_is_refused(client: Client, value: float) -> None:
    topic = client.topic("t", partitions=1)
    with pytest.raises(fencing.InvalidArgument, match="wait_timeout"):
        topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, wait_timeout=value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0, -1])
def test_an_unusable_socket_timeout_is_refused(value: float) -> None:
    with pytest.raises(fencing.InvalidArgument, match="socket_timeout"):
        Client.from_url("redis://127.0.0.1:1/0", socket_timeout=value)


@pytest.mark.parametrize("mode", [AccessMode.EXCLUSIVE_WITH_FENCING, AccessMode.EXCLUSIVE])
def test_a_topic_handle_from_before_a_flushall_cannot_take_the_recreated_topic(
    own: tuple[Client, redis.Redis], mode: AccessMode
) -> None:
    """Found in review: opening a producer did not check the partition's incarnation, so a
    stale handle fenced (or, renewing, blocked) the recreated topic's producers."""
    client, raw = own
    stale = client.topic("t", partitions=1).open()
    raw.flushall()
    other = Client(redis.Redis(connection_pool=raw.connection_pool), namespace=client.namespace)
    holder = other.topic("t", partitions=1).producer(AccessMode.SHARED)
    holder.send(b"new history")
    with pytest.raises(fencing.StateLost):
        stale.producer(mode)
    assert holder.send(b"still writing").offset == 1
    other.close()


def test_a_state_written_before_owners_were_kept_is_adopted(
    client: Client, raw: redis.Redis
) -> None:
    """A PID state of the previous format ("g s t x|window", no owner) is read, not lost."""
    topic = client.topic("t", partitions=1)
    p = topic.producer()
    p.send(b"a")
    pk = topic.partition_keys(0)
    stored = raw.hget(pk.pids, str(p.producer_id))
    assert stored is not None
    head, bar, window = stored.decode().partition("|")
    legacy = " ".join(head.split(" ")[:4]) + bar + window
    raw.hset(pk.pids, str(p.producer_id), legacy)
    assert decode_pid_state(legacy).owner == ""
    assert p.send(b"b").offset == 1
    state = decode_pid_state(raw.hget(pk.pids, str(p.producer_id)))  # type: ignore[arg-type]
    assert (state.owner, state.last_sequence) == (p.session, 1)
    assert values(topic) == [b"a", b"b"]


def test_a_client_left_at_the_default_state_ttl_is_not_warned_about_it(
    client: Client, server: ServerInfo, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a setting somebody chose is worth a warning: a topic made with its own expiry,
    opened by a client that never set FENCING_PRODUCER_STATE_TTL, logs nothing."""
    client.topic("t", partitions=1, producer_state_ttl=60).open()
    settings = FencingSettings(redis_url=server.url, namespace=namespace)
    assert "producer_state_ttl" not in settings.model_fields_set
    plain = Client(redis.Redis.from_url(server.url), settings=settings)
    try:
        with caplog.at_level(logging.WARNING, logger="fencing._sync.topic"):
            assert plain.topic("t").producer_state_ttl == 60
        assert "does not apply" not in caplog.text
    finally:
        plain.close()

"""How long a producer's state (its PID, sequences and duplicate window) is kept: one expiry
per topic, fixed when the topic is created (another client's setting never applies to it,
and a conflicting one is refused), the expiry cleanup never removing a live state, and a
fenced incarnation whose state expired never starting afresh below its fence."""

from __future__ import annotations

import logging
import time

import pytest
import redis

import fencing
from fencing import Client
from fencing._protocol.producer import decode_pid_state
from fencing._settings import FencingSettings, load_settings
from fencing.faults import Proxy
from tests.support.internals import metadata_of

from ..conftest import ServerInfo
from ..support.clock import server_ms, wait_server_past
from ..support.keys import snapshot
from ..support.logs import values_of
from ..support.polling import wait_until
from ..support.wire import APPEND


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
    standing = live._queues[0].standing
    standing.next_sequence -= 1
    md = live.send(b"x")
    assert topic.offsets(0) == before
    assert md.offset == before[1] - 2  # the original offset of its last batch
    client.close()


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
    assert second._queues[0].standing.generation == 1
    pk = metadata_of(topic).partition_keys(0)
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
    assert values_of(topic) == [b"a", b"b", b"c"]


def test_an_explicit_conflicting_state_ttl_is_refused_before_any_write(
    client: Client, raw: redis.Redis, namespace: str
) -> None:
    topic = client.topic("t", partitions=1, producer_state_ttl=3600)
    topic.producer().send(b"a")
    assert topic.producer_state_ttl == 3600
    assert raw.hget(metadata_of(topic).partition_keys(0).meta, "pidexp") == b"3600000"
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
    pk = metadata_of(topic).partition_keys(0)
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
    assert values_of(topic) == expected


def test_a_resumed_expired_state_keeps_its_duplicate_window(
    pclient: Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """Resuming a state that expired but is still stored carries it on, window and all (the
    expiry cleanup of that open leaves it alone): its resends are answered with their
    original offsets, and a new batch whose every reply is lost is resolved as landed."""
    topic = pclient.topic("t", partitions=1, producer_state_ttl=1, dedup_window=5)
    first = topic.producer(lease_ttl=2)
    saved = first.state
    batches = [[b"a"], [b"b", b"c"]]
    for batch in batches:
        first.send_batch(batch, partition=0)
    pk = metadata_of(topic).partition_keys(0)
    pid = str(first.producer_id)
    written = decode_pid_state(raw.hget(pk.pids, pid)).last_write_ms  # type: ignore[arg-type]
    wait_server_past(raw, written + 1_100)

    resumed = topic.producer(resume=saved, lease_ttl=2)
    resent = [resumed.send_batch(batch, partition=0) for batch in batches]
    assert [[(md.offset, md.duplicate) for md in mds] for mds in resent] == [
        [(0, True)],
        [(1, True), (2, True)],
    ]
    assert raw.zscore(pk.pid_expiry, pid) is not None  # still indexed: it can expire again
    with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
        resumed.send_batch([b"d"], partition=0)
    assert [md.offset for md in resumed.send_batch([b"e"], partition=0)] == [4]
    landed = resumed.last_resolution
    assert landed is not None and landed[0] == 0
    assert [md.offset for md in landed[1]] == [3]  # type: ignore[union-attr]
    assert values_of(topic) == [b"a", b"b", b"c", b"d", b"e"]
    first.close()
    resumed.close()


def test_a_name_reopened_after_its_state_was_removed_goes_on_after_its_last_sequence(
    client: Client, raw: redis.Redis
) -> None:
    """A named producer's state expires and is removed; reopening the name goes on after
    the PID's last sequence on the partition, never at 0 (a PID's sequences are never
    written twice). A state saved before then resumes, and its resends are refused as
    written before (older than the window), never written again."""
    topic = client.topic("t", partitions=1, producer_state_ttl=1, dedup_window=1)
    first = topic.producer(name="copier", lease_ttl=30)
    saved = first.state
    for v in (b"a", b"b", b"c"):
        first.send_batch([v], partition=0)
    pk = metadata_of(topic).partition_keys(0)
    pid = str(first.producer_id)
    written = decode_pid_state(raw.hget(pk.pids, pid)).last_write_ms  # type: ignore[arg-type]
    wait_server_past(raw, written + 1_100)
    topic.producer().send(b"newcomer", partition=0)  # a registration runs the cleanup
    assert not raw.hexists(pk.pids, pid)
    again = topic.producer(name="copier", lease_ttl=30)
    assert (again.producer_id, again.state.next_sequence(0)) == (first.producer_id, 3)
    assert again.send_batch([b"d"], partition=0)[0].offset == 4
    resumed = topic.producer(resume=saved, name="copier", lease_ttl=30)
    for v in (b"a", b"b", b"c"):
        with pytest.raises(fencing.DuplicateSequence) as info:
            resumed.send_batch([v], partition=0)
        assert info.value.reason == "older-than-window"
    with pytest.raises(fencing.ProducerFenced):  # the resumed incarnation took over
        again.send(b"late", partition=0)
    assert values_of(topic) == [b"a", b"b", b"c", b"newcomer", b"d"]
    for p in (first, again, resumed):
        p.close()

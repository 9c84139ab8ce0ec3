"""Lost replies and lost requests on a real TCP path (G5).

A producer's client talks to the server through :class:`fencing.faults.Proxy`, which is told
to lose the reply of an append (the append ran, the producer never hears of it) or the
request itself (the append never ran). The log is always checked with a plain redis-py
client connected straight to the server, never through the proxy.

- A lost reply is retried by the library within its budget: the resend carries the same PID
  and sequence, so the server answers with the original offsets and writes nothing. A
  non-idempotent producer appends the batch twice in the same situation (the contrast).
- When every attempt loses its reply, the send raises ``OutcomeUnknown``; resolving finds
  the batch in the window (it landed once) and returns its original metadata.
- When every attempt loses its request, resolving returns None and bumps the PID
  generation: the producer goes on, and no copy of the lost batch with the old generation
  can ever land.

Faults target only the append script's EVALSHA (by its SHA1), so lease renewals and other
calls on the same connections pass untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import fencing
from fencing import AccessMode, Client, ProducerFenced
from fencing import _protocol as protocol
from fencing._keys import PartitionKeys
from fencing._modes import Pending
from fencing._protocol.producer import decode_pid_state
from fencing._protocol.topic import Sequenced
from fencing._sync.driver import Driver as SyncDriver
from fencing._sync.producer import Producer
from fencing.faults import Proxy
from tests.support.internals import context_of, metadata_of

from ..conftest import ServerInfo
from ..support.clock import server_ms, wait_server_past
from ..support.logs import values_of
from ..support.polling import wait_until
from ..support.wire import APPEND, RESOLVE

TOPIC = "out"
T = TypeVar("T")
#: The append script as it appears on the wire: its SHA1 follows EVALSHA.
#: Short leases: each socket step times out after ttl/8; attempts start within ttl/3.
LEASE_TTL = 2.0
SHORT_TTL = 1.0


def log_values(raw: redis.Redis, pk: PartitionKeys) -> list[tuple[int, bytes, int]]:
    """(offset, value, producer id) of every record in the stream, read straight from it."""
    entries: list[tuple[bytes, dict[bytes, bytes]]] = raw.xrange(pk.stream)  # type: ignore[assignment]
    out = []
    for entry_id, fields in entries:
        ms, seq = entry_id.decode().split("-")
        assert ms == "0"
        out.append((int(seq) - 1, fields[b"v"], int(fields[b"p"])))
    return out


def assert_log(raw: redis.Redis, pk: PartitionKeys, values: list[bytes], pid: int) -> None:
    """The whole log is exactly ``values`` at offsets 0.. by ``pid``, and next == len."""
    expected = [(i, v, pid) for i, v in enumerate(values)]
    assert log_values(raw, pk) == expected
    assert int(raw.hget(pk.meta, "next")) == len(values)  # type: ignore[arg-type]


def evalsha_args(chunk: bytes) -> list[bytes]:
    """The arguments of the EVALSHA command of the append script in a captured chunk."""
    at = chunk.index(b"$7\r\nEVALSHA\r\n$40\r\n" + APPEND)
    pos = chunk.rindex(b"*", 0, at)
    end = chunk.index(b"\r\n", pos)
    count = int(chunk[pos + 1 : end])
    pos = end + 2
    args = []
    for _ in range(count):
        assert chunk[pos : pos + 1] == b"$"
        end = chunk.index(b"\r\n", pos)
        size = int(chunk[pos + 1 : end])
        args.append(chunk[end + 2 : end + 2 + size])
        assert len(args[-1]) == size, "the captured request is incomplete"
        pos = end + 4 + size
    return args


def offsets(mds: list[fencing.RecordMetadata]) -> list[int]:
    return [m.offset for m in mds]


def metadata(p: Producer, first: int, n: int) -> list[fencing.RecordMetadata]:
    return [fencing.RecordMetadata(TOPIC, 0, first + i, p.epoch(0)) for i in range(n)]


def window(raw: redis.Redis, pk: PartitionKeys, pid: int) -> list[list[object]]:
    """The PID's duplicate window on the partition: [first_seq, last_seq, checksum, offset]."""
    state = raw.hget(pk.pids, str(pid))
    assert state is not None
    slots = raw.hgetall(pk.window)
    return [list(batch) for batch in decode_pid_state(state, slots, pid=pid).window]


@pytest.mark.parametrize("close", [True, False], ids=["reset", "timeout"])
def test_lost_reply_is_retried_with_the_same_sequence(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis, close: bool
) -> None:
    topic = pclient.topic(TOPIC, partitions=1)
    pk = metadata_of(topic).partition_keys(0)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        assert offsets(p.send_batch([b"w0"], partition=0)) == [0]  # script loaded, p opened
        with proxy.observe(APPEND) as seen, proxy.drop_replies(APPEND, close=close) as lost:
            mds = p.send_batch([b"a", b"b", b"c"], partition=0)
        # The first attempt ran and lost its reply; exactly one retry answered, and it was
        # the very same request: same PID, generation and first sequence (fields 9, 4 and
        # 5 of the header, ARGV 2) and digest (ARGV 5); still fresh (field 6), as it came
        # far sooner than half the state's expiry. ARGV[i] is argument 11 + i after EVALSHA,
        # sha, numkeys, 9 keys.
        assert (lost.hits, seen.hits) == (1, 2)
        first, retry = (evalsha_args(chunk) for chunk in seen.captured)
        assert first == retry
        header = first[11 + 2].split(b" ")
        assert [header[i - 1] for i in (9, 4, 5, 6)] == [b"%d" % p.producer_id, b"0", b"1", b"1"]
        batch = [fencing.Record(v) for v in (b"a", b"b", b"c")]
        assert first[11 + 5] == protocol.topic.checksum(batch).encode()
        assert proxy.dropped_reply_bytes > 0
        assert mds == metadata(p, 1, 3)
        assert_log(raw, pk, [b"w0", b"a", b"b", b"c"], p.producer_id)
        # The retry was answered from the window: the batch is in it once, at offset 1.
        batches = window(raw, pk, p.producer_id)
        assert [b[:2] for b in batches] == [[0, 0], [1, 3]]
        assert [b[3] for b in batches] == [0, 1]
        assert offsets(p.send_batch([b"d"], partition=0)) == [4]
        assert_log(raw, pk, [b"w0", b"a", b"b", b"c", b"d"], p.producer_id)
        assert p.last_resolution is None  # nothing was ever unknown to the caller


@pytest.mark.parametrize("close", [True, False], ids=["reset", "timeout"])
def test_a_lost_reply_without_idempotence_is_unknown_never_a_duplicate(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis, close: bool
) -> None:
    """G5: with no sequence to deduplicate on, a request that may have been delivered is
    never sent again: the caller hears OutcomeUnknown, and the batch stands once."""
    topic = pclient.topic(TOPIC, partitions=1)
    pk = metadata_of(topic).partition_keys(0)
    with topic.producer(lease_ttl=LEASE_TTL, idempotent=False) as p:
        assert offsets(p.send_batch([b"w0"], partition=0)) == [0]
        with (
            proxy.observe(APPEND) as seen,
            proxy.drop_replies(APPEND, close=close) as lost,
            pytest.raises(fencing.OutcomeUnknown, match="not sent again"),
        ):
            p.send_batch([b"a", b"b"], partition=0)
        assert (lost.hits, seen.hits) == (1, 1)  # no resend
        assert_log(raw, pk, [b"w0", b"a", b"b"], p.producer_id)
        assert raw.hlen(pk.pids) == 0  # no sequence state for a non-idempotent producer
        assert offsets(p.send_batch([b"c"], partition=0)) == [3]  # it goes on
        assert_log(raw, pk, [b"w0", b"a", b"b", b"c"], p.producer_id)


@pytest.mark.parametrize("where", ["reused", "from-the-pool"])
def test_a_request_that_never_left_is_resent_even_without_idempotence(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis, where: str
) -> None:
    """A connection that cannot be made never carried the request: that retry is safe."""
    topic = pclient.topic(TOPIC, partitions=1)
    pk = metadata_of(topic).partition_keys(0)
    with topic.producer(lease_ttl=LEASE_TTL, idempotent=False) as p:
        assert offsets(p.send_batch([b"w0"], partition=0)) == [0]
        # The idle connection is closed under the client and the next connect is refused
        # once: the first attempt cannot connect, the retry can. The connection is either
        # the script path's own (reconnected there) or a new one the pool connects.
        with proxy.refuse_connections(count=1) as refused:
            proxy.sever()
            if where == "from-the-pool":
                context_of(pclient).driver(p._calls.budget.timeout)._scripts.close()
            assert offsets(p.send_batch([b"a"], partition=0)) == [1]
        assert refused.hits == 1
        assert_log(raw, pk, [b"w0", b"a"], p.producer_id)


def max_attempts(p: Producer) -> int:
    """Attempts one send may make: a first one, then the retry engine's (budget.attempts)."""
    return 1 + p._calls.budget.attempts


def _exhaust(p: Producer, batch: list[bytes]) -> None:
    with pytest.raises(fencing.OutcomeUnknown, match="resolves it before its next send"):
        p.send_batch(batch, partition=0)


@pytest.mark.parametrize("how", ["explicit", "next-send"])
def test_retries_run_out_after_the_batch_landed(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis, how: str
) -> None:
    topic = pclient.topic(TOPIC, partitions=1)
    pk = metadata_of(topic).partition_keys(0)
    with topic.producer(lease_ttl=SHORT_TTL) as p:
        assert offsets(p.send_batch([b"w0"], partition=0)) == [0]
        standing = p._queues[0].standing
        generation = standing.generation
        with proxy.drop_replies(APPEND, count=None) as lost:
            _exhaust(p, [b"a", b"b"])
        # Every attempt reached the server; only the first one wrote.
        assert 2 <= lost.hits <= max_attempts(p)
        assert standing.pending is not None
        assert_log(raw, pk, [b"w0", b"a", b"b"], p.producer_id)
        if how == "explicit":
            resolved = p.resolve(0)
            assert resolved == metadata(p, 1, 2)
            assert p.last_resolution == (0, resolved)
            assert p.resolve(0) is None  # settled: nothing pending any more
            assert offsets(p.send_batch([b"c"], partition=0)) == [3]
        else:
            assert offsets(p.send_batch([b"c"], partition=0)) == [3]
            assert p.last_resolution == (0, metadata(p, 1, 2))
        assert standing.pending is None
        assert standing.generation == generation  # it landed: no need to fence anything
        assert_log(raw, pk, [b"w0", b"a", b"b", b"c"], p.producer_id)


def test_unanswered_attempts_give_up_within_the_lease(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """Every attempt times out (mute connections): the send gives up before the lease ends."""
    topic = pclient.topic(TOPIC, partitions=1)
    pk = metadata_of(topic).partition_keys(0)
    with topic.producer(lease_ttl=SHORT_TTL) as p:
        assert offsets(p.send_batch([b"w0"], partition=0)) == [0]
        with proxy.drop_replies(APPEND, count=None, close=False) as lost:
            started = time.monotonic()
            _exhaust(p, [b"a"])
            elapsed = time.monotonic() - started
        assert 2 <= lost.hits <= max_attempts(p)
        # Each attempt waited its socket timeout (ttl/8); all of them fit in the lease.
        assert lost.hits * p._calls.budget.timeout <= elapsed < SHORT_TTL
        assert p.resolve(0) == metadata(p, 1, 1)
        assert_log(raw, pk, [b"w0", b"a"], p.producer_id)


@pytest.mark.parametrize("how", ["explicit", "next-send"])
def test_retries_run_out_before_the_batch_reached_the_server(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis, how: str
) -> None:
    topic = pclient.topic(TOPIC, partitions=1)
    pk = metadata_of(topic).partition_keys(0)
    with topic.producer(lease_ttl=SHORT_TTL) as p:
        assert offsets(p.send_batch([b"w0"], partition=0)) == [0]
        standing = p._queues[0].standing
        old_generation, old_sequence, writer = (
            standing.generation,
            standing.next_sequence,
            standing.writer,
        )
        lost_batch = [b"lost-a", b"lost-b"]
        with proxy.drop_requests(APPEND, count=None) as dropped:
            _exhaust(p, lost_batch)
        assert 2 <= dropped.hits <= max_attempts(p)
        assert_log(raw, pk, [b"w0"], p.producer_id)

        if how == "explicit":
            assert p.resolve(0) is None
            assert p.last_resolution == (0, None)
            # The lost batch's sequences are free again, under a newer generation.
            assert (standing.generation, standing.next_sequence) == (
                old_generation + 1,
                old_sequence,
            )
            _assert_old_copy_fenced(pclient, raw, p, writer, old_generation, old_sequence)
        mds = p.send_batch([b"c"], partition=0)
        assert mds == metadata(p, 1, 1)
        assert p.last_resolution == (0, None)
        assert standing.generation == old_generation + 1
        _assert_old_copy_fenced(pclient, raw, p, writer, old_generation, old_sequence)
        assert_log(raw, pk, [b"w0", b"c"], p.producer_id)


def _assert_old_copy_fenced(
    client: fencing.Client,
    raw: redis.Redis,
    p: Producer,
    writer: protocol.topic.Writer,
    generation: int,
    sequence: int,
) -> None:
    """A late copy of the lost batch (old generation, same sequence) can never land."""
    topic = p.topic
    pk = metadata_of(topic).partition_keys(0)
    records = [fencing.Record(b"lost-a"), fencing.Record(b"lost-b")]
    call = protocol.topic.append(
        pk,
        records,
        incarnation=metadata_of(topic).incarnation_of(0),
        seen_next=metadata_of(topic).seen_next(0),
        expected_offset=None,
        writer=writer,
        sequenced=Sequenced(
            pid_generation=generation,
            first_sequence=sequence,
            checksum=protocol.topic.checksum(records),
            name="",
        ),
        errors=protocol.producer.producer_errors(pk),
    )
    before = [raw.dump(k) for k in (pk.meta, pk.stream, pk.pids, pk.pid_expiry)]
    with pytest.raises(fencing.ProducerFenced, match="incarnation"):
        context_of(client).driver(1.0).execute(call, context_of(client).budget_default())
    assert [raw.dump(k) for k in (pk.meta, pk.stream, pk.pids, pk.pid_expiry)] == before


def test_a_pending_batch_whose_state_expired_is_an_unknown_producer(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """G5: UnknownProducerId when a batch is pending and the PID's state is gone: pending
    for half the expiry or more, a batch may have landed and its state expired since (one
    pending for less cannot have: its state would still be there)."""
    topic = pclient.topic(TOPIC, partitions=1, producer_state_ttl=1.0)
    pk = metadata_of(topic).partition_keys(0)
    with topic.producer(lease_ttl=SHORT_TTL) as p:
        assert offsets(p.send_batch([b"w0"], partition=0)) == [0]
        with proxy.drop_replies(APPEND, count=None):
            _exhaust(p, [b"a"])
        pending = p._queues[0].standing.pending
        assert pending is not None
        wait_until(lambda: time.monotonic() - pending.sent_at >= 0.5)
        assert raw.hdel(pk.pids, str(p.producer_id)) == 1
        raw.zrem(pk.pid_expiry, str(p.producer_id))
        before = [raw.dump(k) for k in (pk.meta, pk.stream, pk.pids, pk.pid_expiry)]
        with pytest.raises(fencing.UnknownProducerId) as info:
            p.resolve(0)
        assert info.value.pid == p.producer_id
        assert [raw.dump(k) for k in (pk.meta, pk.stream, pk.pids, pk.pid_expiry)] == before
        assert_log(raw, pk, [b"w0", b"a"], p.producer_id)  # it did land; only the log knows


def test_the_proxy_loses_replies_or_requests_on_demand(
    proxy: Proxy, raw: redis.Redis, namespace: str
) -> None:
    """The proxy itself, with a plain redis-py client (no retries) going through it."""
    r = redis.Redis(port=proxy.port, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
    key = f"{namespace}:proxy"
    # The command name as a RESP bulk string: b"SET" alone also matches CLIENT SETINFO,
    # which redis-py sends on every new connection.
    set_cmd = b"$3\r\nSET\r\n"
    try:
        assert r.ping()
        with proxy.observe(set_cmd) as seen:
            with proxy.drop_replies(set_cmd) as lost, pytest.raises(redis.ConnectionError):
                r.set(key, b"applied")
            assert lost.hits == 1
            assert raw.get(key) == b"applied"  # the request ran, only its reply was lost
            with proxy.drop_requests(set_cmd, close=False) as dropped:
                with pytest.raises(redis.TimeoutError):  # a deaf connection: no reply at all
                    r.set(key, b"never")
                assert r.set(key, b"next")  # one-shot: the next connection is healthy
            assert dropped.hits == 1
            assert seen.hits == 3
        assert raw.get(key) == b"next"
        assert proxy.dropped_reply_bytes > 0 and proxy.dropped_request_bytes > 0
        assert proxy.active_connections() == 1
        accepted = proxy.accepted
        proxy.sever()
        wait_until(lambda: proxy.active_connections() == 0, timeout=5.0)
        assert r.get(key) == b"next"  # redis-py notices the closed connection, reconnects
        assert proxy.accepted == accepted + 1
    finally:
        r.close()
        raw.delete(key)


@pytest.mark.parametrize("idempotent", [True, False])
def test_requests_that_never_left_are_unavailable_not_unknown(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis, idempotent: bool
) -> None:
    """When no attempt could even connect, nothing was applied: the caller hears Unavailable, and
    an idempotent producer has nothing pending to resolve."""
    topic = pclient.topic(TOPIC, partitions=1)
    pk = metadata_of(topic).partition_keys(0)
    with topic.producer(lease_ttl=LEASE_TTL, idempotent=idempotent) as p:
        assert offsets(p.send_batch([b"w0"], partition=0)) == [0]
        generation = p._queues[0].standing.generation
        with proxy.refuse_connections(count=None) as refused:
            proxy.sever()
            with pytest.raises(fencing.Unavailable, match="nothing was applied"):
                p.send_batch([b"never"], partition=0)
        assert refused.hits >= 2
        assert p._queues[0].standing.pending is None
        assert offsets(p.send_batch([b"a"], partition=0)) == [1]
        assert p._queues[0].standing.generation == generation  # nothing to fence
        assert p.last_resolution is None
        assert_log(raw, pk, [b"w0", b"a"], p.producer_id)


# -- a resend after the producer state expired during the retries ---------------------------

#: The topic's producer-state expiry in these tests (the shortest allowed, seconds).
QUICK_EXPIRY = 1.0
#: Lease of the producers below: each socket step then times out after ttl/8 = 1.25 s
#: (pclient's cap is 2 s), longer than QUICK_EXPIRY, so a resend on a silent connection
#: reaches the server after the state written by the first attempt has expired.
EXPIRY_LEASE = 10.0
#: Rounds per test: each one a topic of its own.
EXPIRY_ROUNDS = 3


def _outcome(call: Callable[[], T]) -> T | fencing.FencingError:
    """What ``call`` returned, or the FencingError it raised."""
    try:
        return call()
    except fencing.FencingError as exc:
        return exc


def _lost_reply_after_expiry(
    topic: fencing.Topic, p: Producer, raw: redis.Redis, proxy: Proxy, before: list[bytes]
) -> None:
    """Send ``b`` on partition 0 with its reply lost on a silent connection (the append
    lands, the library resends after its socket timeout, past the state's expiry), then
    settle it and send ``c``: ``b`` is in the log once, and no offset is handed out twice."""
    pk = metadata_of(topic).partition_keys(0)
    assert p._calls.budget.timeout > QUICK_EXPIRY  # the resend comes after the expiry
    first = len(before)
    pid = p.producer_id
    with proxy.drop_replies(APPEND, count=1, close=False) as lost:
        sent = _outcome(lambda: offsets(p.send_batch([b"b"], partition=0)))
    assert lost.hits == 1
    assert log_values(raw, pk) == [(i, v, p.producer_id) for i, v in enumerate([*before, b"b"])], (
        f"the send answered {sent!r}"
    )
    assert sent == [first] or isinstance(sent, fencing.OutcomeUnknown), sent
    resolved = _outcome(lambda: p.resolve(0))
    if isinstance(sent, list):
        assert resolved is None  # nothing pending: the send told where b is
    else:
        assert isinstance(resolved, list), resolved
        assert offsets(resolved) == [first]
    assert offsets(p.send_batch([b"c"], partition=0)) == [first + 1]
    # (c may go under a fresh PID: a plain producer idle past its state's expiry takes one.)
    assert log_values(raw, pk) == [
        *[(i, v, pid) for i, v in enumerate([*before, b"b"])],
        (first + 1, b"c", p.producer_id),
    ]
    assert int(raw.hget(pk.meta, "next")) == first + 2  # type: ignore[arg-type]


@pytest.mark.one_server
def test_a_named_producer_resending_after_its_state_expired_never_appends_twice(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    for round_ in range(EXPIRY_ROUNDS):
        topic = pclient.topic(f"named{round_}", partitions=1, producer_state_ttl=QUICK_EXPIRY)
        with topic.producer(name="copy-job", lease_ttl=EXPIRY_LEASE) as p:
            assert offsets(p.send_batch([b"a"], partition=0)) == [0]
            _lost_reply_after_expiry(topic, p, raw, proxy, [b"a"])


@pytest.mark.one_server
def test_a_resumed_producer_resending_after_its_state_expired_never_appends_twice(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    for round_ in range(EXPIRY_ROUNDS):
        topic = pclient.topic(f"resumed{round_}", partitions=1, producer_state_ttl=QUICK_EXPIRY)
        with topic.producer(lease_ttl=EXPIRY_LEASE) as first:
            assert offsets(first.send_batch([b"a"], partition=0)) == [0]
            saved = first.state
        with topic.producer(resume=saved, lease_ttl=EXPIRY_LEASE) as p:
            assert p.producer_id == saved.producer_id
            _lost_reply_after_expiry(topic, p, raw, proxy, [b"a"])


@pytest.mark.one_server
def test_a_first_batch_resent_after_its_state_expired_is_never_appended_twice(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    for round_ in range(EXPIRY_ROUNDS):
        topic = pclient.topic(f"first{round_}", partitions=1, producer_state_ttl=QUICK_EXPIRY)
        with topic.producer(lease_ttl=EXPIRY_LEASE) as p:
            p.open()
            _lost_reply_after_expiry(topic, p, raw, proxy, [])


# -- which resends may start a PID's state afresh -------------------------------------------


def _values(raw: redis.Redis, pk: PartitionKeys) -> list[bytes]:
    return [v for _, v, _ in log_values(raw, pk)]


def _expire_and_drop(client: fencing.Client, raw: redis.Redis, topic: fencing.Topic) -> None:
    """Wait out the topic's state expiry by server time, then let a new producer register
    (a registration drops expired states): every earlier producer's state is gone."""
    wait_server_past(raw, server_ms(raw) + round(topic.producer_state_ttl * 1000))
    with client.topic(topic.name).producer(lease_ttl=LEASE_TTL) as other:
        other.send_batch([b"x"], partition=0)


@pytest.mark.parametrize("named", [False, True], ids=["plain", "named"])
def test_a_first_send_whose_connection_was_refused_once_lands_once(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis, named: bool
) -> None:
    """A first attempt that never reached the server leaves the resend fresh: a new PID's
    first batch lands (it is not taken for a resend whose state expired)."""
    topic = pclient.topic(TOPIC, partitions=1)
    pk = metadata_of(topic).partition_keys(0)
    options = {"name": "job"} if named else {}
    with topic.producer(lease_ttl=LEASE_TTL, **options) as p:  # type: ignore[arg-type]
        with proxy.refuse_connections(count=1) as refused:
            proxy.sever()
            mds = p.send_batch([b"a"], partition=0)
        assert refused.hits == 1
        assert offsets(mds) == [0]
        assert_log(raw, pk, [b"a"], p.producer_id)


def test_a_first_send_after_an_idle_expiry_whose_connection_was_refused_lands_once(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """The same after the state expired while idle: the producer still takes a fresh PID
    and the batch lands once."""
    topic = pclient.topic(TOPIC, partitions=1, producer_state_ttl=1.0)
    pk = metadata_of(topic).partition_keys(0)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        p.send_batch([b"a"], partition=0)
        _expire_and_drop(pclient, raw, topic)
        with proxy.refuse_connections(count=1) as refused:
            proxy.sever()
            assert offsets(p.send_batch([b"b"], partition=0)) == [2]
        assert refused.hits == 1
        assert _values(raw, pk) == [b"a", b"x", b"b"]


@pytest.mark.parametrize("window", [1, 5])
def test_a_lost_reply_on_a_resend_older_than_the_window_never_writes_the_job_twice(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis, window: int
) -> None:
    """A resumed job's resend older than the window, its reply lost: the retry's refusal
    proves no attempt landed (one that had would be answered from the window), so the job
    is told older-than-window, not OutcomeUnknown, and goes on exactly once."""
    topic = pclient.topic(TOPIC, partitions=1, dedup_window=window)
    pk = metadata_of(topic).partition_keys(0)
    inputs = [b"r%02d" % i for i in range(window + 6)]
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        saved = p.state  # saved before the first send; the job then crashed later
        for value in inputs[: window + 2]:
            p.send_batch([value], partition=0)
    answers: list[object] = []
    with topic.producer(resume=saved, lease_ttl=LEASE_TTL) as q:
        with proxy.drop_replies(APPEND, count=1) as lost:
            answers.append(_outcome(lambda: offsets(q.send_batch([inputs[0]], partition=0))))
        assert lost.hits == 1
        for value in inputs[1:]:
            answers.append(_outcome(lambda v=value: offsets(q.send_batch([v], partition=0))))
        assert q.resolve(0) is None  # nothing pending
    reasons = [a.reason if isinstance(a, fencing.DuplicateSequence) else a for a in answers]
    assert reasons == [
        *["older-than-window"] * 2,
        *[[i] for i in range(2, window + 2)],  # in the window: the original offsets
        *[[i] for i in range(window + 2, window + 6)],  # new records
    ]
    assert _values(raw, pk) == inputs


def test_a_resend_whose_state_expired_and_was_dropped_is_unknown_never_written_twice(
    pclient: fencing.Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """A resumed job pauses past its state's expiry, a cleanup drops the state, and its
    first resend loses its reply: that batch may have landed long before it went pending,
    so its age proves nothing. It is UnknownProducerId (check the log), never "did not
    land" (which would write the job's records again)."""
    topic = pclient.topic(TOPIC, partitions=1, producer_state_ttl=1.0)
    pk = metadata_of(topic).partition_keys(0)
    with topic.producer(lease_ttl=LEASE_TTL) as p:
        saved = p.state
        for value in (b"r0", b"r1", b"r2"):
            p.send_batch([value], partition=0)
    with topic.producer(resume=saved, lease_ttl=LEASE_TTL) as q:
        _expire_and_drop(pclient, raw, topic)
        assert raw.hget(pk.pids, str(q.producer_id)) is None
        with proxy.drop_replies(APPEND, count=1) as lost:
            sent = _outcome(lambda: q.send_batch([b"r0"], partition=0))
        assert lost.hits == 1
        assert isinstance(sent, fencing.OutcomeUnknown), sent
        with pytest.raises(fencing.UnknownProducerId, match="cannot be known"):
            q.resolve(0)
        with pytest.raises(fencing.UnknownProducerId):
            q.send_batch([b"r1"], partition=0)
    assert _values(raw, pk) == [b"r0", b"r1", b"r2", b"x"]


def test_a_lost_first_batch_resolves_as_not_landed_and_can_never_land(client: Client) -> None:
    topic = client.topic("t", partitions=1)
    producer = topic.producer()
    standing = producer._queues[0].standing
    batch = [fencing.Record(b"late")]
    # The first send's outcome is unknown (it never reached the server).
    standing.pending = Pending(1, 0, 0, protocol.topic.checksum(batch))
    assert producer.resolve(0) is None
    assert standing.generation == 1
    # A copy of it still in flight (generation 0, sequence 0) is refused for good.
    call = protocol.topic.append(
        standing.pk,
        batch,
        incarnation=metadata_of(topic).incarnation_of(0),
        seen_next=0,
        expected_offset=None,
        writer=standing.writer,
        sequenced=protocol.topic.Sequenced(0, 0, protocol.topic.checksum(batch), ""),
        errors=standing.errors,
    )
    with pytest.raises(ProducerFenced):
        context_of(client).driver(1.0).execute_once(call)
    assert producer.send(b"next").offset == 0
    assert [r.value for r in topic.reader(0, 0).read()] == [b"next"]


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


def test_a_resolution_long_after_the_send_is_unknown_not_a_guess(
    pclient: Client, proxy: Proxy, raw: redis.Redis
) -> None:
    """A first batch landed, its replies were lost, and its state expired before the resolution:
    "no state" no longer proves it never landed. While the expired state is still stored, it says
    so by itself (the batch is in its window: landed); once a cleanup dropped it, the outcome is
    UnknownProducerId, never a guess."""
    topic = pclient.topic("t", partitions=1, producer_state_ttl=1)
    pclient.topic("warm", partitions=1).producer().send(b"w")  # scripts loaded
    for dropped in (False, True):
        p = topic.producer(lease_ttl=2.0)
        value = b"payment-%d" % dropped
        with proxy.drop_replies(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
            p.send(value)
        pk = metadata_of(topic).partition_keys(0)
        written = decode_pid_state(raw.hget(pk.pids, str(p.producer_id))).last_write_ms  # type: ignore[arg-type]
        wait_until(lambda: server_ms(raw) > written + 1_100)  # noqa: B023 - used at once
        if dropped:
            assert raw.hdel(pk.pids, str(p.producer_id)) == 1  # as the cleanup does
            with pytest.raises(fencing.UnknownProducerId):
                p.resolve(0)
        else:
            assert [m.offset for m in p.resolve(0) or []] == [0]
        p.close()
    assert values_of(topic) == [b"payment-0", b"payment-1"]  # and never a second copy


def test_an_interrupted_send_is_resolved_before_the_next_one(client: Client) -> None:
    """A send interrupted (KeyboardInterrupt) after its request left leaves its batch pending:
    the next send resolves it first (it landed, offset 1) instead of reusing its sequences, which
    would be refused for good."""
    topic = client.topic("t", partitions=1)
    p = topic.producer()
    p.send(b"a")
    real = p._calls.execute

    def interrupted(call: object, *more: object, **options: object) -> object:
        real(call, *more, **options)  # type: ignore[arg-type]  # it lands...
        raise KeyboardInterrupt  # ...and the caller is interrupted before the reply

    p._calls.execute = interrupted  # type: ignore[method-assign,assignment]
    with pytest.raises(KeyboardInterrupt):
        p.send(b"b")
    p._calls.execute = real  # type: ignore[method-assign]
    assert p.send(b"c").offset == 2
    assert p.last_resolution is not None and [m.offset for m in p.last_resolution[1] or []] == [1]
    assert values_of(topic) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("how", ["next-send", "explicit"])
def test_a_lost_reply_to_the_resolution_is_answered_as_the_first_attempt(
    pclient: Client, proxy: Proxy, raw: redis.Redis, how: str
) -> None:
    topic = pclient.topic("t", partitions=1)
    with topic.producer(lease_ttl=1.0) as p:
        p.send(b"w0")
        standing = p._queues[0].standing
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
        assert values_of(topic) == [b"w0", b"next"]
        state = decode_pid_state(
            raw.hget(metadata_of(topic).partition_keys(0).pids, str(p.producer_id))
        )  # type: ignore[arg-type]
        assert (state.generation, state.owner) == (generation + 1, p.session)


def pending_of(first_sequence: int, batch: list[bytes]) -> fencing._modes.Pending:
    records = [fencing.Record(v) for v in batch]
    return fencing._modes.Pending(len(batch), 0, first_sequence, protocol.topic.checksum(records))


def test_a_resolution_after_a_newer_incarnation_is_still_fenced(client: Client) -> None:
    """Idempotent, not blind: the bump of another incarnation is not taken for our own."""
    topic = client.topic("t", partitions=1)
    p = topic.producer()
    p.send(b"a")
    standing = p._queues[0].standing
    standing.pending = pending_of(standing.next_sequence, [b"lost"])
    topic.producer(resume=p.state)  # generation + 1, by someone else
    with pytest.raises(fencing.ProducerFenced):
        p.resolve(0)


@pytest.mark.parametrize("successor", ["name", "resume"])
def test_a_superseded_incarnation_learns_its_batch_landed_and_stays_fenced(
    server: ServerInfo, pclient: Client, proxy: Proxy, client: Client, successor: str
) -> None:
    """An incarnation that resolves its pending batch after a newer one opened (by its name, or
    by resume=) learns that it landed, and stays fenced: it never takes the newer incarnation's
    generation, so it can never write again."""
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
    assert values_of(topic) == [b"a", b"b", b"c"]


def test_a_resolution_that_finds_its_batch_written_by_a_successor_names_the_records_epoch(
    pclient: Client, client: Client, proxy: Proxy
) -> None:
    """A batch whose request was lost, then written by the producer's successor (a copy job
    resumed from the saved state resends it under the next epoch): the old incarnation's
    resolution learns that it landed, and the metadata it gives names the epoch the records
    carry, never its own stale one."""
    topic = pclient.topic("t", partitions=1)
    old = topic.producer(AccessMode.EXCLUSIVE, lease_ttl=5.0)
    old.send(b"a")
    saved = old.state
    with proxy.drop_requests(APPEND, count=None), pytest.raises(fencing.OutcomeUnknown):
        old.send(b"b")
    successor = client.topic("t").producer(AccessMode.EXCLUSIVE_WITH_FENCING, resume=saved)
    written = successor.send(b"b")
    assert (written.offset, written.epoch) == (1, old.epoch(0) + 1)
    try:
        landed = old.resolve(0)
    except ProducerFenced:
        landed = None  # told it is fenced: it claims nothing, which is also true
    if landed is not None:
        assert [(m.offset, m.epoch) for m in landed] == [(1, written.epoch)]
    records = client.topic("t").reader(0, 0).read()
    assert [(r.value, r.epoch) for r in records] == [(b"a", 1), (b"b", written.epoch)]
    successor.close()
    old.close()

"""Single readers: ownership of partitions, fenced commits,
resuming at the committed offset, takeovers, waiting, bad input."""

from __future__ import annotations

import threading
import time

import pytest
import redis

import fencing
from fencing import Client, Topic
from fencing.faults import Proxy

from ..conftest import ServerInfo
from ..support.logs import fill
from ..support.polling import wait_until
from ..support.wire import CLAIM, COMMIT


@pytest.fixture
def orders(client: Client) -> Topic:
    topic = client.topic("orders", partitions=2)
    fill(topic, 10, 0)
    fill(topic, 4, 1)
    return topic


def test_poll_commit_and_resume_at_the_committed_offset(orders: Topic) -> None:
    with orders.consumer("billing", "host-a", partitions=[0]) as c:
        assert c.partitions == [0]
        assert c.committed(0) is None
        got = c.poll(max_records=4)
        assert [r.offset for r in got] == [0, 1, 2, 3]
        assert c.position(0) == 4
        assert c.commit() == {0: 4}
        assert c.committed(0) == 4
        assert [r.offset for r in c.poll(max_records=2)] == [4, 5]  # polled, not committed
    with orders.consumer("billing", "host-b", partitions=0) as c2:
        assert c2.position(0) == 4
        assert [r.value for r in c2.poll(max_records=100)] == [b"v%03d" % i for i in range(4, 10)]
    # Another group has its own offsets.
    with orders.consumer("audit", "host-a", partitions=[0]) as c3:
        assert c3.position(0) == 0


def test_start_earliest_latest_and_an_offset(orders: Topic) -> None:
    for start, expected in (("earliest", 0), ("latest", 10), (7, 7)):
        with orders.consumer("g", "a", partitions=[0], start=start) as c:
            assert c.position(0) == expected


def test_two_partitions_take_turns(orders: Topic) -> None:
    with orders.consumer("g", "a", partitions=[1, 0]) as c:
        assert c.partitions == [0, 1]
        got: list[tuple[int, int]] = []
        while len(got) < 14:
            batch = c.poll(max_records=3)
            assert batch, "records left unread"
            got += [(r.partition, r.offset) for r in batch]
        assert sorted(got) == [(0, i) for i in range(10)] + [(1, i) for i in range(4)]
        assert c.poll(max_records=10) == []
        assert c.commit() == {0: 10, 1: 4}


def test_a_held_partition_conflicts_or_waits_and_is_handed_over_on_close(
    orders: Topic,
) -> None:
    holder = orders.consumer("g", "a", partitions=[0], ttl=30.0)
    with pytest.raises(fencing.OwnershipConflict):
        orders.consumer("g", "b", partitions=[0, 1])
    # The failed claim released what it took: partition 1 is free.
    with orders.consumer("g", "c", partitions=[1]) as c:
        assert c.partitions == [1]
    holder.poll(max_records=3)
    holder.commit()
    got: list[fencing.Consumer] = []
    t = threading.Thread(
        target=lambda: got.append(orders.consumer("g", "b", partitions=[0], wait=True, timeout=10))
    )
    t.start()
    time.sleep(0.05)  # not a synchronisation: b is queued or not, the asserts hold either way
    closed_at = time.monotonic()
    holder.close()
    t.join(10)
    assert got, "the waiter was not handed the partition"
    # Woken by the release, not by the 30 s lease (with room for a busy machine).
    assert time.monotonic() - closed_at < 10.0
    assert got[0].position(0) == 3
    got[0].close()


def test_a_superseded_member_commit_is_fenced_and_writes_nothing(
    orders: Topic, raw: redis.Redis, client: Client
) -> None:
    old = orders.consumer("g", "a", partitions=[0], ttl=30.0)
    old.poll(max_records=2)
    assert old.commit() == {0: 2}
    # An operator takes the partition over (what `fencing release` does).
    client.ownership("g", "operator", ttl=30.0).claim(["orders/0"], generation=0)
    with pytest.raises(fencing.Fenced):
        old.commit({0: 5})
    pk = client.keys.partition("orders", 0)
    assert raw.hget(pk.committed, "g") == b"2"
    with pytest.raises(fencing.Fenced):
        old.poll()
    old.close()


def test_a_commit_lost_by_the_server_is_state_lost_not_gone_back(
    orders: Topic, raw: redis.Redis, client: Client
) -> None:
    """What a failover that lost the last commit leaves (the stored offset is the one
    before it): the live consumer's next commit and committed() raise StateLost and write
    nothing, never carrying on from the older offset (G9)."""
    c = orders.consumer("g", "a", partitions=[0], ttl=1.0)
    c.poll(max_records=2)
    assert c.commit() == {0: 2}
    c.poll(max_records=2)
    assert c.commit() == {0: 4}
    pk = client.keys.partition("orders", 0)
    raw.hset(pk.committed, "g", 2)  # the commit of 4 is lost
    with pytest.raises(fencing.StateLost, match="had committed 4"):
        c.commit()
    assert raw.hget(pk.committed, "g") == b"2"
    with pytest.raises(fencing.StateLost, match="committed 4"):
        c.committed(0)
    c.close()  # (a handle that lost state leaves its lease to lapse)
    # A new consumer resumes from what is stored (and commits on).
    with orders.consumer("g", "b", partitions=[0], wait=True, timeout=10.0) as again:
        assert again.position(0) == 2
        again.poll(max_records=1)
        assert again.commit() == {0: 3}


def test_a_member_may_commit_a_lower_offset_itself(orders: Topic) -> None:
    with orders.consumer("g", "a", partitions=[0]) as c:
        c.poll(max_records=5)
        assert c.commit() == {0: 5}
        assert c.commit({0: 1}) == {0: 1}  # a rewind of its own is no loss
        assert c.committed(0) == 1
        assert c.commit({0: 3}) == {0: 3}


def test_racing_members_commit_only_as_the_current_owner(
    orders: Topic, client: Client, raw: redis.Redis
) -> None:
    """Members take partition 0 from each other with generation-0 claims while each polls
    and commits as fast as it can. Over the whole history: the stored offset is always the
    last commit that succeeded, only current owners' commits succeed (in token order), and
    every new owner resumes exactly at the last successful commit before its term."""
    fill(orders, 490, 0)  # 500 records on partition 0
    pk = client.keys.partition("orders", 0)
    stop = threading.Event()
    errors: list[BaseException] = []
    fenced = [0]
    starts: dict[int, int] = {}  # token -> first offset its term read
    commits: list[tuple[int, int]] = []  # (token, offset) of commits that succeeded
    lock = threading.Lock()

    def member(name: str) -> None:
        try:
            while not stop.is_set():
                # Take over: sever whoever holds it, then hand it to a consumer of ours.
                taker = client.ownership("g", f"{name}-taker", ttl=30.0)
                taker.claim(["orders/0"], generation=0)
                taker.release()
                try:
                    c = orders.consumer("g", name, partitions=[0], wait=True, timeout=5)
                except fencing.FencingError:
                    continue
                token = c._owner.grants["orders/0"].token
                with lock:
                    starts[token] = c.position(0)
                try:
                    for _ in range(5):
                        c.poll(max_records=7)
                        done = c.commit()
                        with lock:
                            commits.append((token, done[0]))
                except fencing.Fenced:
                    with lock:
                        fenced[0] += 1
                finally:
                    c.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=member, args=(n,)) for n in ("a", "b", "c")]
    for t in threads:
        t.start()
    wait_until(lambda: len(commits) > 100 or errors, timeout=30)
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert fenced[0] > 0, "no commit raced a takeover: the test proved nothing"
    ordered = sorted(commits)
    # Successful commits in token order never go back, and the stored offset (and token)
    # is the last of them.
    offsets = [o for _, o in ordered]
    assert offsets == sorted(offsets)
    assert raw.hget(pk.committed, "g") == str(ordered[-1][1]).encode()
    assert raw.hget(pk.committed, "g#t") == str(ordered[-1][0]).encode()
    # Every term began at a committed offset. A term that committed successfully was never
    # superseded before it read its start, so it began exactly at the last commit that
    # succeeded before it. (A term superseded while it opened may have read a later
    # commit of its successor; it never commits.)
    committed_values = {0} | {o for _, o in ordered}
    active = {t for t, _ in ordered}
    for token, first in starts.items():
        assert first in committed_values, (token, first)
        if token in active:
            before = [o for t, o in ordered if t < token]
            assert first == (before[-1] if before else 0), (token, first, before[-3:])


def test_takeover_resumes_exactly_at_the_last_committed_offset(
    orders: Topic, client: Client
) -> None:
    a = orders.consumer("g", "a", partitions=[0], ttl=0.3)
    assert [r.offset for r in a.poll(max_records=3)] == [0, 1, 2]
    a.commit()
    a.poll(max_records=3)  # processed 3..5 but crashed before committing
    a._renewal.cancel()  # type: ignore[union-attr]  # the crash: renewals stop
    b = orders.consumer("g", "b", partitions=[0], wait=True, timeout=5)
    assert b.position(0) == 3
    with pytest.raises(fencing.Fenced):
        a.commit()
    assert b.committed(0) == 3
    b.close()
    a.close()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"partitions": [2]}, fencing.InvalidArgument),
        ({"partitions": []}, fencing.InvalidArgument),
        ({"partitions": [-1]}, fencing.InvalidArgument),
        ({"partitions": "0"}, fencing.InvalidArgumentType),
        ({"partitions": [0], "start": -1}, fencing.InvalidArgument),
        ({"partitions": [0], "start": "first"}, fencing.InvalidArgument),
        ({"partitions": [0], "start": 11}, fencing.OffsetOutOfRange),
        ({"partitions": [0], "ttl": 0}, fencing.InvalidArgument),
        ({"partitions": [0], "wait": "yes"}, fencing.InvalidArgumentType),
    ],
)
def test_bad_consumer_arguments_write_nothing(
    orders: Topic, raw: redis.Redis, client: Client, kwargs: dict[str, object], error: type
) -> None:
    before = sorted(raw.keys(f"{client.namespace}:*"))
    with pytest.raises(error):
        orders.consumer("g", "a", **kwargs)  # type: ignore[arg-type]
    assert sorted(raw.keys(f"{client.namespace}:*")) == before
    assert raw.hget(client.keys.ownership("g", "orders/0"), "session") in (None, b"")


@pytest.mark.parametrize(("group", "member"), [("", "a"), ("__x", "a"), ("a b", "a"), ("g", "")])
def test_bad_group_or_member_names(orders: Topic, group: str, member: str) -> None:
    with pytest.raises(fencing.InvalidArgument):
        orders.consumer(group, member, partitions=[0])


def test_bad_commits_and_seeks_write_nothing(
    orders: Topic, raw: redis.Redis, client: Client
) -> None:
    pk = client.keys.partition("orders", 0)
    with orders.consumer("g", "a", partitions=[0]) as c:
        c.poll(max_records=2)
        c.commit()
        for offsets, error in (
            ({0: -1}, fencing.InvalidArgument),
            ({0: 11}, fencing.OffsetOutOfRange),
            ({1: 0}, fencing.InvalidArgument),  # not owned
            ({5: 0}, fencing.InvalidArgument),  # no such partition
            ({0: "3"}, fencing.InvalidArgumentType),
            ([(0, 1)], fencing.InvalidArgumentType),
            ({}, fencing.InvalidArgument),
        ):
            with pytest.raises(error):
                c.commit(offsets)  # type: ignore[arg-type]
            assert raw.hget(pk.committed, "g") == b"2"
        for partition, offset, error in (
            (0, 11, fencing.OffsetOutOfRange),
            (0, -1, fencing.InvalidArgument),
            (1, 0, fencing.InvalidArgument),
        ):
            with pytest.raises(error):
                c.seek(partition, offset)
        assert c.position(0) == 2
        c.seek(0, 10)
        assert c.poll() == []
        c.seek(0, 0)
        assert c.poll(max_records=1)[0].offset == 0
        with pytest.raises(fencing.InvalidArgument):
            c.poll(max_records=0)
    with pytest.raises(fencing.InvalidArgument):
        c.poll()  # closed


def test_a_wrong_type_committed_key_is_refused(
    orders: Topic, raw: redis.Redis, client: Client
) -> None:
    pk = client.keys.partition("orders", 0)
    raw.set(pk.committed, "oops")
    with orders.consumer("g", "a", partitions=[0], start="earliest") as c:
        c.poll(max_records=1)
        with pytest.raises(fencing.WrongKeyType):
            c.commit()
    assert raw.get(pk.committed) == b"oops"


def test_blocking_poll_wakes_on_a_new_record(orders: Topic) -> None:
    with orders.consumer("g", "a", partitions=[0, 1], start="latest") as c:
        timer = threading.Timer(0.2, lambda: fill(orders, 1, 1))
        timer.start()
        started = time.monotonic()
        got = c.poll(max_records=10, block_ms=30_000)
        timer.join()
        assert [(r.partition, r.offset) for r in got] == [(1, 4)]
        assert time.monotonic() - started < 10  # woken by the record, not the 30 s block


def test_iteration_ends_when_closed(orders: Topic) -> None:
    c = orders.consumer("g", "a", partitions=[1])
    seen = []
    for record in c:
        seen.append(record.offset)
        if len(seen) == 4:
            c.close()
    assert seen == [0, 1, 2, 3]


def test_a_recreated_partition_is_state_lost(
    orders: Topic, client: Client, raw: redis.Redis
) -> None:
    with orders.consumer("g", "a", partitions=[0]) as c:
        c.poll(max_records=1)
        raw.hset(client.keys.partition("orders", 0).meta, "inc", "other")
        with pytest.raises(fencing.StateLost):
            c.commit()
        with pytest.raises(fencing.StateLost):
            c.poll()


def test_a_wrong_type_committed_key_is_refused_on_read(
    orders: Topic, raw: redis.Redis, client: Client
) -> None:
    pk = client.keys.partition("orders", 0)
    raw.set(pk.committed, "oops")
    with pytest.raises(fencing.WrongKeyType):
        orders.consumer("g", "a", partitions=[0])
    assert raw.hget(client.keys.ownership("g", "orders/0"), "session") in (None, b"")


def blocked_in_xread(raw: redis.Redis) -> bool:
    return any("xread" in str(c.get("cmd", "")) for c in raw.client_list())


def test_a_consumer_that_fails_to_open_after_its_claim_landed_leaves_the_partition_free(
    proxied: tuple[Proxy, Client], client: Client
) -> None:
    """A consumer whose open raised (OutcomeUnknown: the claim reply was lost) does not keep its
    partition; another member can open it at once."""
    proxy, pclient = proxied
    topic = pclient.topic("orders", partitions=1)
    fill(topic, 3)
    with proxy.drop_replies(CLAIM, count=None), pytest.raises(fencing.OutcomeUnknown):
        topic.consumer("g", "a", partitions=[0], ttl=30.0)
    with client.topic("orders").consumer("g", "b", partitions=[0], ttl=30.0) as c:
        assert [r.offset for r in c.poll()] == [0, 1, 2]


def test_a_blocking_poll_returns_nothing_appended_after_its_member_was_superseded(
    client: Client, raw: redis.Redis
) -> None:
    """"Every poll first checks the grants by server time, so a member that was paused and
    superseded finds out there, never by reading on."

    A poll(block_ms=...) that was blocking when another member took the partition over (and this
    member was told, by the severed notification) raises Fenced (or returns nothing), never
    handing over records appended after the takeover, which the new owner is processing."""
    topic = client.topic("orders", partitions=1)
    fill(topic, 2)
    member = topic.consumer("g", "a", partitions=[0], start="latest", ttl=30.0)
    got: list[object] = []

    def poll() -> None:
        try:
            got.append(member.poll(max_records=10, block_ms=4000))
        except BaseException as exc:
            got.append(exc)

    t = threading.Thread(target=poll)
    t.start()
    try:
        wait_until(lambda: blocked_in_xread(raw), timeout=3)
        taker = client.ownership("g", "operator", ttl=30.0)
        taker.claim(["orders/0"], generation=0)
        wait_until(member._owner.severed.is_set, timeout=3)  # it was told
        fill(topic, 1)
    finally:
        t.join(6)
    taker.close()
    member.close()
    result = got[0]
    assert not (isinstance(result, list) and result), (
        f"a superseded member's poll returned {[r.offset for r in result]} "  # type: ignore[union-attr]
        "appended after the takeover"
    )


def test_a_commit_that_landed_before_a_takeover_is_not_reported_as_fenced_and_unwritten(
    proxied: tuple[Proxy, Client], client: Client, raw: redis.Redis
) -> None:
    """Consumer.commit: "if another member took the partition over, it raises Fenced and writes
    nothing for that partition".

    The commit runs, its reply is lost (the connection stays mute until the socket timeout),
    another member takes the partition over, the library's retry is refused. OutcomeUnknown
    (the first attempt may have landed), as the append does with ``ambiguous_after_retry``;
    never "Fenced, nothing written" for a write that is there."""
    proxy, pclient = proxied
    topic = pclient.topic("orders", partitions=1)
    fill(topic, 5)
    pk = client.keys.partition("orders", 0)
    member = topic.consumer("g", "a", partitions=[0], ttl=10.0)
    member.commit({0: 1})  # the script is loaded (a NOSCRIPT reply is not what we lose)
    member.poll(max_records=3)
    rule = proxy.drop_replies(COMMIT, count=1, close=False)
    outcome: list[BaseException | dict[int, int]] = []

    def commit() -> None:
        try:
            outcome.append(member.commit())
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=commit)
    t.start()
    rule.wait(5)
    wait_until(lambda: raw.hget(pk.committed, "g") == b"3", timeout=3)  # it landed
    taker = client.ownership("g", "operator", ttl=10.0)
    taker.claim(["orders/0"], generation=0)
    assert t.is_alive(), "the retry ran before the takeover: the scenario did not happen"
    t.join(5)
    taker.close()
    member.close()
    assert raw.hget(pk.committed, "g") == b"3"
    assert isinstance(outcome[0], fencing.OutcomeUnknown), (
        f"told {outcome[0]!r} although its commit of 3 is stored"
    )


@pytest.mark.parametrize("offset", [2**53, 10**17, 2**64])
def test_a_huge_commit_offset_is_refused_before_io_with_a_clear_error(
    client: Client, offset: int
) -> None:
    """An offset no partition can reach is refused in Python (InvalidArgument or OffsetOutOfRange),
    before any I/O."""
    topic = client.topic("orders", partitions=1)
    fill(topic, 1)
    with (
        topic.consumer("g", "a", partitions=[0]) as c,
        pytest.raises((fencing.InvalidArgument, fencing.OffsetOutOfRange)),
    ):
        c.commit({0: offset})


def test_a_corrupt_committed_offset_raises_a_typed_error(client: Client, raw: redis.Redis) -> None:
    """A committed offset that is not a number (written by another program) is a typed FencingError
    (StateLost / WrongKeyType) naming the key, like every other foreign value."""
    topic = client.topic("orders", partitions=1)
    fill(topic, 1)
    raw.hset(client.keys.partition("orders", 0).committed, "g", "abc")
    with pytest.raises(fencing.FencingError):
        topic.consumer("g", "a", partitions=[0])


def test_a_consumer_that_could_not_open_leaves_no_subscription_behind(
    client: Client, raw: redis.Redis
) -> None:
    """A consumer whose open failed (the partition is held: OwnershipConflict) leaves nothing
    behind, so a retry loop around ``topic.consumer(...)`` runs for ever in bounded memory."""
    topic = client.topic("orders", partitions=1)
    fill(topic, 1)
    holder = topic.consumer("g", "holder", partitions=[0], ttl=30.0)
    pattern = f"{client.namespace}:*:session:*"  # one channel per (resource, session)

    def sessions() -> int:
        return len(raw.pubsub_shardchannels(pattern))

    before = sessions()
    for _ in range(20):
        with pytest.raises(fencing.OwnershipConflict):
            topic.consumer("g", "retry", partitions=[0], ttl=30.0)
    leaked = sessions() - before
    holder.close()
    assert leaked == 0, f"{leaked} session channels left subscribed by 20 failed opens"


def test_a_commit_after_the_partition_went_back_in_history_is_state_lost(
    client: Client, raw: redis.Redis
) -> None:
    """G9: "Every fenced call sends the incarnation it saw and the highest offset it has seen ... a
    next offset below what the handle already saw means the store went backwards: the call
    raises StateLost and writes nothing."

    The partition is put back to an older copy of itself (DUMP/RESTORE of the partition's keys:
    what a failover that lost writes leaves), same incarnation, next offset 5 where the
    consumer already read up to 10. Commit raises StateLost and writes nothing."""
    topic = client.topic("orders", partitions=1)
    fill(topic, 5)
    pk = client.keys.partition("orders", 0)
    snapshot = {k: raw.dump(k) for k in (pk.meta, pk.stream)}
    fill(topic, 5)
    with topic.consumer("g", "a", partitions=[0], start="earliest", ttl=30.0) as c:
        assert len(c.poll(max_records=100)) == 10
        for k, v in snapshot.items():
            raw.restore(k, 0, v, replace=True)
        assert raw.hget(pk.meta, "next") == b"5"
        with pytest.raises(fencing.StateLost):
            c.commit({0: 4})
        assert raw.hget(pk.committed, "g") is None, "a commit into a rewound partition landed"


def test_a_commit_of_the_position_after_a_rewind_is_state_lost_not_out_of_range(
    client: Client, raw: redis.Redis
) -> None:
    """Same rewind as above. Commit() of the consumer's position (10, past the rewound end 5)
    raises StateLost, which tells the operator what happened."""
    topic = client.topic("orders", partitions=1)
    fill(topic, 5)
    pk = client.keys.partition("orders", 0)
    snapshot = {k: raw.dump(k) for k in (pk.meta, pk.stream)}
    fill(topic, 5)
    with topic.consumer("g", "a", partitions=[0], start="earliest", ttl=30.0) as c:
        assert len(c.poll(max_records=100)) == 10
        for k, v in snapshot.items():
            raw.restore(k, 0, v, replace=True)
        with pytest.raises(fencing.StateLost):
            c.commit()


def test_flushall_under_a_consumer_is_state_lost_for_poll_and_commit(
    fresh_server: ServerInfo, namespace: str
) -> None:
    """After a FLUSHALL (and a producer writing a new history), the consumer's poll and commit
    raise StateLost and write nothing."""
    client = fencing.Client.from_url(fresh_server.url, namespace=namespace)
    raw = redis.Redis.from_url(fresh_server.url)
    try:
        topic = client.topic("orders", partitions=1)
        fill(topic, 5)
        with topic.consumer("g", "a", partitions=[0], ttl=30.0) as c:
            assert len(c.poll()) == 5
            raw.flushall()
            other = fencing.Client.from_url(fresh_server.url, namespace=namespace)
            fill(other.topic("orders", partitions=1), 7)
            other.close()
            with pytest.raises(fencing.StateLost):
                c.commit()
            with pytest.raises(fencing.StateLost):
                c.poll()
        assert raw.hget(client.keys.partition("orders", 0).committed, "g") is None
    finally:
        client.close()
        raw.close()

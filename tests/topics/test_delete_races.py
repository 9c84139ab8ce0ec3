"""Deleting a topic against everything that can happen meanwhile: an open through a topic
handle made before, a second delete, a creation under way, a delete cut short and run again
without force, keys of the wrong shape, a forced delete under load. Interleavings that need
two actors at an exact point are made by wrapping one step of the delete so the other actor
runs right there."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

import fencing
import fencing._sync.admin as admin
from fencing import AccessMode
from fencing import _protocol as protocol

from ..conftest import ServerInfo
from .test_delete import keys_of


@pytest.fixture
def clients(server: ServerInfo, namespace: str) -> Iterator[list[fencing.Client]]:
    """Independent clients (an operator's and applications')."""
    made = [fencing.Client.from_url(server.url, namespace=namespace) for _ in range(3)]
    yield made
    for c in made:
        c.close()


def test_an_open_through_a_topic_handle_made_before_is_refused_once_a_delete_began(
    clients: list[fencing.Client], raw: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete's in-use check runs after every partition refuses new users: an app's
    topic handle made before the delete cannot open a producer meanwhile (a send of it
    acknowledged and then deleted by a delete that was not forced)."""
    operator, app = clients[0], clients[1]
    topic = app.topic("orders", partitions=2).open()
    real_users = admin._users
    tried: list[BaseException | fencing.Producer] = []

    def users_then_the_app_opens(*args: object) -> list[str]:
        try:
            tried.append(topic.producer(AccessMode.EXCLUSIVE))
        except fencing.FencingError as exc:
            tried.append(exc)
        return real_users(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(admin, "_users", users_then_the_app_opens)
    operator.delete_topic("orders")
    (outcome,) = tried
    assert isinstance(outcome, fencing.UnknownTopic), outcome
    assert "being deleted" in str(outcome)
    assert keys_of(raw, namespace, "orders") == []


def test_an_overlapping_delete_never_touches_the_topic_made_again(
    clients: list[fencing.Client], raw: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two deletes of one topic overlap; the first finishes, the app makes the topic again
    (4 partitions) and writes. The second goes on with the incarnation it marked only: the
    new topic, its records and its live producer are untouched."""
    slow, fast, app = clients
    app.topic("orders", partitions=2).open()
    real_users = admin._users
    made: dict[str, object] = {}

    def meanwhile(*args: object) -> list[str]:
        if not made:
            made["began"] = True  # (the fast delete below runs this too)
            fast.delete_topic("orders")
            topic = app.topic("orders", partitions=4)
            producer = topic.producer(AccessMode.EXCLUSIVE)
            made["producer"] = producer
            made["incarnation"] = topic.incarnation
            for p in range(4):
                producer.send(b"new", partition=p)
        return real_users(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(admin, "_users", meanwhile)
    slow.delete_topic("orders")
    assert raw.hget(f"{namespace}:{{orders}}:topic", "inc") == str(made["incarnation"]).encode()
    assert [raw.xlen(f"{namespace}:{{orders/{p}}}:log") for p in range(4)] == [1, 1, 1, 1]
    assert app.topics() == ["orders"]
    producer = made["producer"]
    assert isinstance(producer, fencing.Producer)
    assert producer.send(b"more", partition=3).offset == 1
    producer.close()


def test_a_delete_during_a_creation_never_leaves_the_name_unusable(
    clients: list[fencing.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete runs while a creator is between making the topic's metadata and its
    partitions': the creator fails (StateLost), and the name can be created again at once
    (a partition the late creator left is of a dead incarnation, and is made afresh)."""
    operator, creator, later = clients
    real = protocol.topic.partition_open
    done: list[bool] = []

    def delete_first(*args: object, **kwargs: object) -> object:
        if not done:  # the creator ran topic_open; its partitions come next
            done.append(True)
            operator.delete_topic("orders")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(protocol.topic, "partition_open", delete_first)
    with pytest.raises(fencing.StateLost):
        creator.topic("orders", partitions=2).open()
    monkeypatch.setattr(protocol.topic, "partition_open", real)
    topic = later.topic("orders", partitions=2)
    with topic.producer() as producer:
        assert [producer.send(b"v", partition=p).offset for p in (0, 1)] == [0, 0]
    assert later.topics() == ["orders"]


def test_a_delete_cut_short_is_finished_by_force_and_a_plain_rerun_keeps_it_marked(
    clients: list[fencing.Client], raw: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forced delete dies after partition 0. Running it again without force finds the
    topic in use (the old producer still holds partition 1) and says a delete was begun and
    must be forced, keeping the mark (the topic stays hidden and refuses opens); forced, it
    finishes, and the old producer's next call raises StateLost."""
    operator, app, fresh = clients
    producer = app.topic("orders", partitions=2).producer(AccessMode.EXCLUSIVE)
    producer.send(b"a", partition=0)
    producer.send(b"b", partition=1)
    real_drop = protocol.admin.partition_delete

    def cut_short(pk: object, inc: str, step: str, *rest: float | None) -> object:
        if step == "drop" and getattr(pk, "partition", None) == 1:
            raise KeyboardInterrupt("the delete's process dies here")
        return real_drop(pk, inc, step, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(protocol.admin, "partition_delete", cut_short)
    with pytest.raises(KeyboardInterrupt):
        operator.delete_topic("orders", force=True)
    monkeypatch.setattr(protocol.admin, "partition_delete", real_drop)
    assert operator.topics() == []
    with pytest.raises(fencing.OwnershipConflict, match="begun and not finished"):
        operator.delete_topic("orders")
    assert raw.hexists(f"{namespace}:{{orders}}:topic", "deleting")
    with pytest.raises(fencing.UnknownTopic, match="being deleted"):
        fresh.topic("orders").open()
    operator.delete_topic("orders", force=True)
    assert keys_of(raw, namespace, "orders") == []
    with pytest.raises(fencing.StateLost):
        producer.send(b"c", partition=1)


@pytest.mark.parametrize(
    ("suffix", "junk"),
    [
        ("own:__producer__", "string"),
        ("own:billing", {"session": "s", "expires": "soon"}),
        ("sink:app", {"b": "x"}),
    ],
)
def test_a_key_of_the_wrong_shape_refuses_the_delete_and_leaves_the_topic_as_it_was(
    clients: list[fencing.Client], raw: redis.Redis, namespace: str, suffix: str, junk: object
) -> None:
    operator, app = clients[0], clients[1]
    app.topic("orders", partitions=1).open()
    key = f"{namespace}:{{orders/0}}:{suffix}"
    if isinstance(junk, dict):
        raw.hset(key, mapping=junk)
    else:
        raw.set(key, str(junk))
    with pytest.raises(fencing.OwnershipConflict, match="cannot be read"):
        operator.delete_topic("orders")
    assert not raw.hexists(f"{namespace}:{{orders}}:topic", "deleting")
    assert not raw.hexists(f"{namespace}:{{orders/0}}:part", "deleting")
    assert operator.topics() == ["orders"]
    operator.delete_topic("orders", force=True)
    assert keys_of(raw, namespace, "orders") == []


def test_a_forced_delete_under_load_lands_no_record_after_it_and_leaves_no_key(
    clients: list[fencing.Client], raw: redis.Redis, namespace: str
) -> None:
    """Two shared producers send in loops and a third waits for exclusivity while a forced
    delete runs: each gets StateLost, no record is acknowledged after the delete returned,
    and no lease renewal brings a key back."""
    operator, app = clients[0], clients[1]
    topic = app.topic("orders", partitions=4)
    producers = [topic.producer(AccessMode.SHARED, lease_ttl=1.0) for _ in range(2)]
    stop = threading.Event()
    acked: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def send(producer: fencing.Producer) -> None:
        n = 0
        try:
            while not stop.is_set():
                md = producer.send(b"v", partition=n % 4)
                acked.append((md.partition, md.offset))
                n += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    def wait_exclusive() -> None:
        try:
            topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, lease_ttl=1.0, wait_timeout=20)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(p,)) for p in producers]
    threads.append(threading.Thread(target=wait_exclusive))
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(acked) < 50 and time.monotonic() < deadline:
        time.sleep(0.005)
    operator.delete_topic("orders", force=True)
    count = len(acked)
    for t in threads:
        t.join(20)
    assert len(acked) == count
    assert len(errors) == 3 and all(isinstance(e, fencing.StateLost) for e in errors), errors
    time.sleep(1.0)  # (lease renewals run every ttl/3: none may bring a key back)
    for p in producers:
        p.close()
    assert keys_of(raw, namespace, "orders") == []


def test_a_producer_waiting_for_exclusivity_outlives_a_refused_delete(
    clients: list[fencing.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A WAIT_FOR_EXCLUSIVE producer that tries its turn while a delete checks whether the
    topic is in use (it is: the holder and this waiter) is told to wait on, not that the
    topic is gone; the delete is refused, and once the holder closes the waiter holds the
    partition and sends."""
    operator, app = clients[0], clients[1]
    topic = app.topic("orders", partitions=1)
    holder = topic.producer(AccessMode.EXCLUSIVE)
    holder.send(b"a")
    waiter = fencing.Producer(topic, AccessMode.WAIT_FOR_EXCLUSIVE, wait_timeout=30)
    calls = waiter._calls  # type: ignore[attr-defined]
    original = calls.execute
    refused: list[BaseException] = []

    def execute(call: object, durability: object = None) -> object:
        try:
            return original(call, durability)
        except fencing.UnknownTopic as exc:
            refused.append(exc)
            raise

    monkeypatch.setattr(calls, "execute", execute)
    opened = threading.Event()
    thread = threading.Thread(target=lambda: (waiter.open(), opened.set()), daemon=True)
    thread.start()
    real_users = admin._users

    def users_while_the_waiter_tries(*args: object) -> list[str]:
        deadline = time.monotonic() + 10
        while not refused and time.monotonic() < deadline:
            waiter._lease.wake_waiter()  # type: ignore[attr-defined]  # its turn, now
            time.sleep(0.01)
        return real_users(*args)  # type: ignore[arg-type]

    deadline = time.monotonic() + 10
    while waiter._lease._wait_sub is None and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.005)
    monkeypatch.setattr(admin, "_users", users_while_the_waiter_tries)
    with pytest.raises(fencing.OwnershipConflict, match="waiting"):
        operator.delete_topic("orders")
    assert refused and all(getattr(e, "deleting", False) for e in refused)
    assert not opened.is_set()
    holder.close()
    assert opened.wait(10)
    assert waiter.send(b"b").offset == 1
    waiter.close()


def test_a_consumer_opened_through_a_topic_handle_made_before_leaves_no_row_behind(
    clients: list[fencing.Client], raw: redis.Redis, namespace: str
) -> None:
    """A consumer opened through an app's topic handle made before the delete claims its
    rows before it learns the partitions are gone: it raises StateLost, and the rows it
    claimed go too (no key of the deleted topic outlives the delete)."""
    operator, app = clients[0], clients[1]
    topic = app.topic("orders", partitions=2).open()
    operator.delete_topic("orders")
    with pytest.raises(fencing.StateLost):
        topic.consumer("billing", "host-a", [0, 1])
    assert keys_of(raw, namespace, "orders") == []


def test_a_consumer_waiting_for_a_partition_leaves_no_row_behind_a_forced_delete(
    clients: list[fencing.Client], raw: redis.Redis, namespace: str
) -> None:
    """A consumer waits (wait=True) for a partition another member holds; a forced delete
    removes the holder's row, which ends the wait: the waiter's claim lands after the
    delete, then it raises StateLost and its row goes too."""
    operator, app = clients[0], clients[1]
    topic = app.topic("orders", partitions=1).open()
    holder = topic.consumer("billing", "host-a", [0], ttl=2.0)
    outcome: list[object] = []

    def wait_for_it() -> None:
        try:
            outcome.append(topic.consumer("billing", "host-b", [0], ttl=2.0, wait=True, timeout=20))
        except BaseException as exc:  # reported below
            outcome.append(exc)

    row = f"{namespace}:{{orders/0}}:own:billing"
    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    deadline = time.monotonic() + 10  # (the waiter subscribed and tried once)
    while not raw.exists(f"{namespace}:{{orders/0}}:own:billing") and time.monotonic() < deadline:
        time.sleep(0.005)
    operator.delete_topic("orders", force=True)
    waiter.join(20)
    (got,) = outcome
    assert isinstance(got, fencing.StateLost), got
    with pytest.raises(fencing.StateLost):
        holder.poll()
    holder.close()
    assert not raw.exists(row)
    assert keys_of(raw, namespace, "orders") == []

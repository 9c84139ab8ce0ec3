"""``fencing release --producer`` on the in-memory client: the command's own path (the
partitions' incarnations read as the CLI reads them, then ``producer_evict`` on each) runs
on fakeredis as on a server, so users can test their reaction to an operator's release."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import fencing
from fencing import AccessMode

pytest.importorskip("fakeredis")

from fencing.cli._client import raw_redis
from fencing.cli._connect import Conn
from fencing.cli._release import _release_producers
from fencing.testing import memory_client

from ..support.polling import wait_until


@pytest.fixture
def memory() -> Iterator[fencing.Client]:
    client = memory_client("release")
    yield client
    client.close()


def queued_waiter(
    client: fencing.Client, topic: fencing.Topic
) -> tuple[threading.Thread, list[Any]]:
    """A WAIT_FOR_EXCLUSIVE producer opening in a thread, returned once it is queued."""
    got: list[Any] = []

    def open_waiter() -> None:
        try:
            got.append(topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, name="b", wait_timeout=20))
        except fencing.FencingError as exc:
            got.append(exc)

    thread = threading.Thread(target=open_waiter)
    thread.start()
    waiters = client.keys.partition(topic.name, 0).waiters
    raw = raw_redis(client, 5.0)
    wait_until(lambda: raw.zcard(waiters) == 1, what="the waiter queued")
    return thread, got


def release(client: fencing.Client, topic: str, *, evict_waiters: bool) -> list[dict[str, Any]]:
    conn = Conn(client, raw_redis(client, 5.0), "memory")
    return _release_producers(conn, topic, evict_waiters=evict_waiters, text=False)


def test_release_producer_hands_the_partition_to_the_waiter_in_memory(
    memory: fencing.Client,
) -> None:
    topic = memory.topic("ctl", partitions=1)
    holder = topic.producer(AccessMode.EXCLUSIVE, name="a", lease_ttl=30.0)
    holder.send(b"before")
    thread, got = queued_waiter(memory, topic)

    [result] = release(memory, "ctl", evict_waiters=False)

    thread.join(20)
    [waiter] = got
    assert isinstance(waiter, fencing.Producer)
    assert result == {
        "topic": "ctl",
        "partition": 0,
        "semantics": "hand to the queue",
        "epoch": {"old": 1, "new": 2},
        "severed": {"label": "a", "session": holder.session},
        "next_holder": {"session": waiter.session},
        "shared_fenced": 0,
        "waiters_fenced": 0,
    }
    assert waiter.epoch(0) == 2
    with pytest.raises(fencing.ProducerFenced):
        holder.send(b"late")
    assert (waiter.send(b"after").offset, waiter.send(b"after").epoch) == (1, 2)
    waiter.close()
    holder.close()


def test_release_producer_evicting_waiters_fences_them_in_memory(memory: fencing.Client) -> None:
    topic = memory.topic("ctl", partitions=1)
    holder = topic.producer(AccessMode.EXCLUSIVE, name="a", lease_ttl=30.0)
    thread, got = queued_waiter(memory, topic)

    [result] = release(memory, "ctl", evict_waiters=True)

    thread.join(20)
    assert isinstance(got[0], fencing.ProducerFenced)
    assert (result["semantics"], result["epoch"], result["next_holder"]) == (
        "evict all",
        {"old": 1, "new": 2},
        None,
    )
    assert (result["severed"]["label"], result["waiters_fenced"]) == ("a", 1)
    with pytest.raises(fencing.ProducerFenced):
        holder.send(b"late")
    with topic.producer(AccessMode.EXCLUSIVE) as successor:
        assert successor.epoch(0) == 3
    holder.close()

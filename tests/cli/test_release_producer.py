"""``fencing release --producer TOPIC`` severs a topic's writers and hands each partition to
its queue in order; ``--evict-waiters`` fences the queue too."""

from __future__ import annotations

import json

import pytest
import redis

import fencing
from fencing import AccessMode, Client, ProducerFenced

from ..conftest import ServerInfo
from ..producers.test_access_modes import in_thread, queued, row
from ..support.cli import at, run
from ..support.clock import server_ms

EXCLUSIVE = AccessMode.EXCLUSIVE
WAIT = AccessMode.WAIT_FOR_EXCLUSIVE


def test_release_hands_the_partition_to_the_first_waiter(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    topic = client.topic("t", partitions=1)
    holder = topic.producer(EXCLUSIVE, name="holder", lease_ttl=30)
    holder.send(b"before", partition=0)
    lease_end = int(row(raw, client, "t")["expires"])
    first, first_out = in_thread(lambda: topic.producer(WAIT, name="w0", lease_ttl=30))
    queued(raw, client, "t", 1)
    second, second_out = in_thread(
        lambda: topic.producer(WAIT, name="w1", lease_ttl=30, wait_timeout=60)
    )
    queued(raw, client, "t", 2)
    head = raw.zrange(client.keys.partition("t", 0).waiters, 0, 0)[0].decode()

    code, out, err = run(capsys, "release", "--producer", "t", "--yes", *at(server, namespace))

    assert (code, err) == (0, "")
    assert out.splitlines()[1] == (
        f"  t/0: epoch 1 -> 2; severed exclusive holder 'holder' (session "
        f"{holder.session[:8]}); next: the first waiter (session {head[:8]}) holds epoch 2"
    )
    first.join(20)
    (waiter,) = first_out
    assert isinstance(waiter, fencing.Producer)
    assert waiter.session == head
    assert server_ms(raw) < lease_end  # woken by the release, not by a lease running out
    assert waiter.epoch(0) == 2
    assert row(raw, client, "t")["label"] == "w0"
    with pytest.raises(ProducerFenced):
        holder.send(b"fenced", partition=0)
    assert waiter.send(b"after", partition=0).offset == 1
    assert [(r.value, r.epoch) for r in topic.reader(partition=0, start_offset=0).read()] == [
        (b"before", 1),
        (b"after", 2),
    ]
    assert second_out == [] and raw.zcard(client.keys.partition("t", 0).waiters) == 1
    waiter.close()  # the next waiter in order takes over
    second.join(20)
    (after,) = second_out
    assert isinstance(after, fencing.Producer) and after.epoch(0) == 3
    after.close()
    holder.close()


def test_evict_waiters_fences_the_queue_and_leaves_the_partition_free(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    topic = client.topic("t", partitions=1)
    holder = topic.producer(EXCLUSIVE, name="holder", lease_ttl=30)
    thread, out = in_thread(lambda: topic.producer(WAIT, name="w0", lease_ttl=30))
    queued(raw, client, "t", 1)

    code, text, err = run(
        capsys,
        "release",
        "--producer",
        "t",
        "--evict-waiters",
        "--yes",
        "--json",
        *at(server, namespace),
    )

    assert (code, err) == (0, "")
    [result] = json.loads(text)
    assert result == {
        "topic": "t",
        "partition": 0,
        "semantics": "evict all",
        "epoch": {"old": 1, "new": 2},
        "severed": {"label": "holder", "session": holder.session},
        "next_holder": None,
        "shared_fenced": 0,
        "waiters_fenced": 1,
    }
    thread.join(20)
    (refused,) = out
    assert isinstance(refused, ProducerFenced)
    assert "fencing release --producer --evict-waiters" in str(refused)
    with pytest.raises(ProducerFenced):
        holder.send(b"fenced", partition=0)
    state = row(raw, client, "t")
    assert (state["token"], state["session"]) == ("2", "")
    holder.close()
    with topic.producer(EXCLUSIVE) as fresh:
        assert fresh.epoch(0) == 3


def test_evict_waiters_needs_producer(capsys) -> None:
    down = ["--url", "redis://127.0.0.1:1/0"]
    code, out, err = run(
        capsys, "release", "journal", "orders/0", "--evict-waiters", "--yes", *down
    )
    assert (code, out) == (2, "")
    assert "--evict-waiters goes with --producer TOPIC" in err

"""``fencing._inspection``, the read-only views ``fencing status``, ``owners`` and
``elections`` print, against keys of another Redis type where redis-fencing keeps state:
each view raises :class:`fencing.WrongKeyType` naming the key (never a raw
``redis.ResponseError``), and the namespace view skips the key and lists the rest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

import fencing
from fencing import Client
from fencing import _inspection as insp
from fencing._keys import ELECTION_GROUP, Keys


@pytest.fixture
def keys(client: Client) -> Keys:
    return client.keys


@pytest.fixture
def orders(client: Client) -> fencing.Topic:
    """Topic orders (2 partitions), a record on partition 0, a consumer group billing."""
    topic = client.topic("orders", partitions=2)
    with topic.producer() as producer:
        producer.send(b"a", partition=0)
    with topic.consumer("billing", "host-a", partitions=[0, 1]) as consumer:
        consumer.commit({0: 1})
    return topic


def replace(raw: redis.Redis, key: str, kind: str) -> None:
    """Put a value of Redis type ``kind`` at ``key`` instead of what was there."""
    raw.delete(key)
    {
        "string": lambda: raw.set(key, b"x"),
        "list": lambda: raw.rpush(key, b"x"),
        "set": lambda: raw.sadd(key, b"x"),
        "zset": lambda: raw.zadd(key, {b"x": 1}),
    }[kind]()


View = Callable[[redis.Redis, Keys], Any]

# (the key replaced, the type put there, the view that reads it)
CASES: list[tuple[str, Callable[[Keys], str], str, View]] = [
    (
        "topic metadata",
        lambda k: k.topic_meta("orders"),
        "list",
        lambda r, k: insp.topic_meta(r, k, "orders"),
    ),
    (
        "topic metadata, every topic",
        lambda k: k.topic_meta("orders"),
        "string",
        insp.topics,
    ),
    (
        "partition log",
        lambda k: k.partition("orders", 0).stream,
        "string",
        lambda r, k: insp.topic_status(r, k, "orders"),
    ),
    (
        "partition metadata",
        lambda k: k.partition("orders", 1).meta,
        "zset",
        lambda r, k: insp.topic_status(r, k, "orders", [1]),
    ),
    (
        "shared producers",
        lambda k: k.partition("orders", 0).shared,
        "string",
        lambda r, k: insp.topic_status(r, k, "orders"),
    ),
    (
        "committed offsets",
        lambda k: k.partition("orders", 0).committed,
        "set",
        lambda r, k: insp.consumer_groups(r, k, "orders"),
    ),
    (
        "consumer ownership row",
        lambda k: k.ownership("billing", "orders/1"),
        "string",
        lambda r, k: insp.consumer_groups(r, k, "orders", [1]),
    ),
    (
        "ownership row",
        lambda k: k.ownership("billing", "orders/0"),
        "string",
        lambda r, k: insp.ownership_row(r, k, "billing", "orders/0"),
    ),
    (
        "every ownership row of a group",
        lambda k: k.ownership("billing", "orders/0"),
        "list",
        lambda r, k: insp.owners(r, k, "billing"),
    ),
    (
        "election row",
        lambda k: k.ownership(ELECTION_GROUP, "scheduler"),
        "string",
        insp.elections,
    ),
    (
        "election candidates",
        lambda k: k.election_candidates("scheduler"),
        "string",
        lambda r, k: insp.elections(r, k, ["scheduler"]),
    ),
]


@pytest.mark.parametrize(("where", "key_of", "kind", "view"), CASES, ids=[c[0] for c in CASES])
def test_a_view_raises_wrong_key_type_naming_the_key(
    client: Client,
    orders: fencing.Topic,
    raw: redis.Redis,
    keys: Keys,
    where: str,
    key_of: Callable[[Keys], str],
    kind: str,
    view: View,
) -> None:
    election = client.election("scheduler", candidate_id="host-a", ttl=10.0)
    with election.campaign():
        pass
    election.close()
    key = key_of(keys)
    replace(raw, key, kind)
    with pytest.raises(fencing.WrongKeyType) as info:
        view(raw, keys)
    assert (info.value.key, info.value.key_type) == (key, kind)
    assert str(info.value).startswith(f"key {key!r} (")
    assert f") holds a Redis {kind}, not a " in str(info.value)
    assert "\n" not in str(info.value)


def test_namespace_view_skips_keys_of_the_wrong_type(
    client: Client, orders: fencing.Topic, raw: redis.Redis, keys: Keys
) -> None:
    client.topic("events", partitions=1).open()
    replace(raw, keys.topic_meta("events"), "string")
    replace(raw, keys.partition("orders", 1).meta, "list")
    status = insp.namespace_status(raw, keys)
    assert [t.name for t in status.topics] == ["orders"]
    # Partition 1 is left out of every group; partition 0 is listed.
    [billing] = status.groups
    assert [gp.partition for gp in billing.partitions] == [0]
    assert status.skipped == [
        insp.SkippedKey(
            key=keys.topic_meta("events"),
            key_type="string",
            expected="hash",
            what="the metadata of topic 'events'",
            left_out="topic 'events'",
        ),
        insp.SkippedKey(
            key=keys.partition("orders", 1).meta,
            key_type="list",
            expected="hash",
            what="the metadata of partition 1 of topic 'orders'",
            left_out="partition 1 of topic 'orders' in every consumer group",
        ),
    ]
    # Without the wrong keys nothing is skipped.
    raw.delete(keys.topic_meta("events"))
    raw.delete(keys.partition("orders", 1).meta)
    assert insp.namespace_status(raw, keys).skipped == []


def test_other_refusals_still_raise_as_redis_errors(
    own: tuple[Client, redis.Redis], namespace: str
) -> None:
    """Only WRONGTYPE means a key of the wrong type: a user that may not read (NOPERM) gets
    the server's refusal, not a WrongKeyType."""
    client, admin = own
    client.topic("orders", partitions=1).open()
    admin.acl_setuser(
        "reader", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-hgetall"]
    )
    kwargs = admin.connection_pool.connection_kwargs
    reader = redis.Redis(host=kwargs["host"], port=kwargs["port"], username="reader", password="pw")
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            insp.topic_meta(reader, Keys(namespace), "orders")
    finally:
        reader.close()

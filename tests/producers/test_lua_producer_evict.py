"""producer_evict-5.lua against real servers: raw KEYS/ARGV in, exact reply out. An
operator's release of a partition's producers severs its writers with epoch + 1 and hands the
partition to the first live waiter in the same script (or, evicting waiters, fences them and
leaves it free); a partition with nobody registered is left as it is."""

from __future__ import annotations

from typing import Any

import pytest
import redis

import fencing
from fencing._keys import PartitionKeys
from fencing._lua_loader import script

from ..support.keys import snapshot
from ..support.pubsub import next_message

#: Also on Redis 8: the script against the server (errors, sharded pub/sub).
pytestmark = pytest.mark.server_specific

TTL = 10_000


def pk_of(client: fencing.Client, topic: str) -> PartitionKeys:
    client.topic(topic, partitions=1).open()
    return client.keys.partition(topic, 0)


def keys_of(pk: PartitionKeys) -> tuple[str, ...]:
    return (pk.owner, pk.shared, pk.waiters, pk.waiting_leases, pk.meta)


def open_(r: redis.Redis, pk: PartitionKeys, session: str, mode: str, wgen: str = "") -> Any:
    """producer_open-5 as ``session`` (labelled ``l-<session>``) in ``mode``."""
    args = (session, f"l-{session}", mode, TTL, "row-inc", "", wgen, pk.session_prefix,
            pk.released, "0", r.hget(pk.meta, "inc"), "", "")  # fmt: skip
    return r.eval(script("producer_open").source, 5, *keys_of(pk), *args)


def evict(r: redis.Redis, pk: PartitionKeys, *, waiters: bool = False, inc: str = "") -> Any:
    part_inc = inc or r.hget(pk.meta, "inc")
    args = (part_inc, pk.session_prefix, pk.released, "1" if waiters else "0")
    return r.eval(script("producer_evict").source, 5, *keys_of(pk), *args)


def error_of(call: Any, *args: Any, **kw: Any) -> str:
    with pytest.raises(redis.ResponseError) as info:
        call(*args, **kw)
    return str(info.value)


def row(r: redis.Redis, pk: PartitionKeys, *fields: str) -> list[Any]:
    return r.hmget(pk.owner, *fields)


def test_the_holder_is_severed_and_the_first_waiter_holds_the_partition_at_once(
    client: fencing.Client, r: redis.Redis
) -> None:
    pk = pk_of(client, "t")
    assert open_(r, pk, "a", "exclusive")[:2] == ["granted", 1]
    assert open_(r, pk, "w1", "wait")[0] == "waiting"
    assert open_(r, pk, "w2", "wait")[0] == "waiting"
    with r.pubsub() as pubsub:
        pubsub.ssubscribe(pk.released, pk.session_prefix + "a")
        assert next_message(pubsub)["type"] == "ssubscribe"
        assert next_message(pubsub)["type"] == "ssubscribe"

        assert evict(r, pk) == [1, 2, "a", "l-a", "w1", 0, 0]

        heard = {next_message(pubsub)["data"], next_message(pubsub)["data"]}
    assert heard == {f"severed 1 2 {pk.owner}", "handed 2"}
    assert row(r, pk, "session", "label", "token", "mode") == ["w1", "", "2", "x"]
    assert r.zrange(pk.waiters, 0, -1) == ["w2"]
    assert list(r.hgetall(pk.waiting_leases)) == ["w2"]
    # The waiter's next open finds itself granted at that epoch; the old holder is refused.
    assert open_(r, pk, "w1", "wait", "0")[:2] == ["granted", 2]
    assert row(r, pk, "label") == ["l-w1"]
    assert error_of(open_, r, pk, "a", "exclusive").startswith("PRODUCER_BUSY exclusive ")


def test_evicting_the_waiters_fences_them_and_leaves_the_partition_free(
    client: fencing.Client, r: redis.Redis
) -> None:
    pk = pk_of(client, "t")
    open_(r, pk, "a", "exclusive")
    open_(r, pk, "w1", "wait")
    open_(r, pk, "w2", "wait")
    with r.pubsub() as pubsub:
        pubsub.ssubscribe(pk.released)
        assert next_message(pubsub)["type"] == "ssubscribe"

        assert evict(r, pk, waiters=True) == [1, 2, "a", "l-a", "", 0, 2]

        assert next_message(pubsub)["data"] == "fenced 2"
    assert row(r, pk, "session", "token", "wgen") == ["", "2", "1"]
    assert r.exists(pk.shared, pk.waiters, pk.waiting_leases) == 0
    assert error_of(open_, r, pk, "w1", "wait", "0") == "PRODUCER_FENCED 2 2 fenced-waiter"
    assert open_(r, pk, "b", "exclusive")[:2] == ["granted", 3]


def test_shared_producers_are_fenced_and_the_epoch_moves_past_them(
    client: fencing.Client, r: redis.Redis
) -> None:
    pk = pk_of(client, "t")
    assert open_(r, pk, "s1", "shared")[:2] == ["shared", 0]
    assert open_(r, pk, "s2", "shared")[:2] == ["shared", 0]

    assert evict(r, pk) == [0, 1, "", "", "", 2, 0]

    assert row(r, pk, "session", "token", "mode") == ["", "1", "s"]
    assert r.exists(pk.shared) == 0


def test_a_partition_with_nobody_registered_is_left_as_it_is(
    client: fencing.Client, r: redis.Redis, namespace: str
) -> None:
    pk = pk_of(client, "t")
    before = snapshot(r, namespace)
    assert evict(r, pk) == [0, 0, "", "", "", 0, 0]  # no producer row yet
    assert evict(r, pk, waiters=True) == [0, 0, "", "", "", 0, 0]
    assert snapshot(r, namespace) == before
    open_(r, pk, "a", "exclusive")
    evict(r, pk, waiters=True)
    before = snapshot(r, namespace)
    assert evict(r, pk) == [2, 2, "", "", "", 0, 0]  # a row, nobody on it: a retry
    assert snapshot(r, namespace) == before


def test_another_history_or_a_key_of_the_wrong_type_is_refused_writing_nothing(
    client: fencing.Client, r: redis.Redis, namespace: str
) -> None:
    pk = pk_of(client, "t")
    open_(r, pk, "a", "exclusive")
    inc = r.hget(pk.meta, "inc")
    before = snapshot(r, namespace)
    assert error_of(evict, r, pk, inc="older") == f"STATE_LOST incarnation older {inc}"
    assert snapshot(r, namespace) == before
    r.set(pk.shared, "x")
    before = snapshot(r, namespace)
    assert error_of(evict, r, pk) == f"WRONG_TYPE string {pk.shared}"
    assert snapshot(r, namespace) == before

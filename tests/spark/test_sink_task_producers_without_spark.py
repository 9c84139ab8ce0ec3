"""The sink's task producers (Spark workers' shared producers recorded in the app's sink
state): recorded only where a batch of the app was begun and the producer is registered,
kept across batches, and removed with their shared entry by the finishing of a batch once
their lease lapsed; live ones and other producers' entries are left alone."""

from __future__ import annotations

from typing import Any

import redis

import fencing
from fencing import _protocol as protocol
from fencing._protocol.sink import Lineage
from tests.support.internals import context_of, metadata_of

from ..support.clock import server_ms


def _execute(client: fencing.Client, call: Any) -> Any:
    context = context_of(client)
    return context.driver(client.settings.socket_timeout).execute(call, context.budget_default())


def _enlist(client: fencing.Client, topic: fencing.Topic, session: str) -> bool:
    meta = metadata_of(topic)
    call = protocol.sink.enlist(
        meta.partition_keys(0),
        "etl",
        incarnation=meta.incarnation_of(0),
        session=session,
        producer_id="7",
    )
    found: bool = _execute(client, call)
    return found


def _lineage_call(client: fencing.Client, topic: fencing.Topic, batch: int, finish: bool) -> None:
    meta = metadata_of(topic)
    pk, inc = meta.partition_keys(0), meta.incarnation_of(0)
    lineage = Lineage("etl", "query-1", batch, 1)
    if finish:
        _execute(client, protocol.sink.finish(pk, lineage, incarnation=inc, rows=0))
    else:
        _execute(client, protocol.sink.begin(pk, lineage, incarnation=inc, new_lineage=False))


def test_finishing_a_batch_removes_the_task_producers_whose_lease_lapsed(
    client: fencing.Client, raw: redis.Redis
) -> None:
    topic = client.topic("events", 1).open()
    pk = client.keys.partition("events", 0)
    now = server_ms(raw)
    raw.zadd(pk.shared, {"dead": now - 1_000, "live": now + 600_000, "other": now - 1_000})
    assert _enlist(client, topic, "dead") is False  # no batch of the app begun here
    _lineage_call(client, topic, 0, finish=False)
    assert _enlist(client, topic, "unregistered") is False
    assert [_enlist(client, topic, s) for s in ("dead", "live", "closed")] == [True, True, False]
    raw.zadd(pk.shared, {"closed": now + 600_000})
    assert _enlist(client, topic, "closed") is True
    raw.zrem(pk.shared, "closed")  # its worker closed it

    _lineage_call(client, topic, 0, finish=True)
    assert sorted(raw.zrange(pk.shared, 0, -1)) == [b"live", b"other"]
    sink = raw.hgetall(pk.sink("etl"))
    assert {k: v for k, v in sink.items() if k.startswith(b"w:")} == {b"w:live": b"7"}

    # A later batch keeps the live one recorded.
    _lineage_call(client, topic, 1, finish=False)
    assert raw.hget(pk.sink("etl"), "w:live") == b"7"

"""``fencing status TOPIC`` on the Spark sinks that write a topic: per app id, the query
that holds it, the last batch it finished and its rows written and skipped, summed over the
partitions, from sink state the sink's own scripts wrote (no Spark needed); and under each
partition, the app's task producers (Spark workers' shared producers) whose lease lapsed,
apart from the other shared producers."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

import fencing
from fencing import _protocol as protocol
from fencing._protocol.sink import Lineage

from ..conftest import ServerInfo
from ..support.cli import at, run
from ..support.clock import server_ms
from ..support.internals import context_of, metadata_of


def _execute(client: fencing.Client, call: Any) -> Any:
    context = context_of(client)
    return context.driver(client.settings.socket_timeout).execute(call, context.budget_default())


def _batch(
    client: fencing.Client, topic: fencing.Topic, p: int, lineage: Lineage, *counts: int
) -> None:
    """Begin a batch on partition ``p``; with (written, skipped), finish it there."""
    meta = metadata_of(topic)
    pk, inc = meta.partition_keys(p), meta.incarnation_of(p)
    begin = protocol.sink.begin(pk, lineage, incarnation=inc, new_lineage=True)
    _execute(client, begin)
    if counts:
        written, skipped = counts
        done = protocol.sink.finish(
            pk, lineage, incarnation=inc, rows=written + skipped, written=written, skipped=skipped
        )
        _execute(client, done)


def _enlist(client: fencing.Client, topic: fencing.Topic, app: str, session: str) -> bool:
    """Record ``session`` as a task producer of ``app`` on partition 0, as a worker does."""
    meta = metadata_of(topic)
    call = protocol.sink.enlist(
        meta.partition_keys(0),
        app,
        incarnation=meta.incarnation_of(0),
        session=session,
        producer_id="7",
    )
    found: bool = _execute(client, call)
    return found


def test_status_shows_each_apps_totals_and_last_finished_batch(
    capsys: pytest.CaptureFixture[str], server: ServerInfo, namespace: str, client: fencing.Client
) -> None:
    topic = client.topic("events", 2).open()
    for batch in (0, 1):
        for p in (0, 1):
            _batch(client, topic, p, Lineage("etl", "query-1", batch, 2), 5, 0)
    # A new lineage (a lost checkpoint) took partition 0 over and finished its batch 0
    # there, skipping 3 rows the old query wrote; partition 1 still holds the old query's.
    _batch(client, topic, 0, Lineage("etl", "query-2", 0, 2), 2, 3)
    _batch(client, topic, 1, Lineage("backfill", "query-9", 0, 1))  # begun, not finished

    code, out, err = run(capsys, "status", "events", *at(server, namespace))
    assert (code, err) == (0, "")
    assert out.split("spark sinks: ", 1)[1] == (
        "2\n"
        "  APP       QUERY    LAST FINISHED  WRITTEN  SKIPPED\n"
        "  backfill  query-9  -              0        0\n"
        "  etl       query-2  batch 0        22       3\n"
    )

    code, out, _ = run(capsys, "status", "events", "--partition", "1", "--json",
                       *at(server, namespace))  # fmt: skip
    assert code == 0
    assert json.loads(out)["spark_sinks"] == [
        {
            "app_id": "backfill",
            "query": "query-9",
            "finished_batch": None,
            "written": 0,
            "skipped": 0,
            "partitions": [
                {
                    "partition": 1,
                    "query": "query-9",
                    "took_over": "",
                    "begun_batch": 0,
                    "finished_batch": None,
                    "written": 0,
                    "skipped": 0,
                    "task_producers": [],
                }
            ],
        },
        {
            "app_id": "etl",
            "query": "query-1",
            "finished_batch": 1,
            "written": 10,
            "skipped": 0,
            "partitions": [
                {
                    "partition": 1,
                    "query": "query-1",
                    "took_over": "",
                    "begun_batch": 1,
                    "finished_batch": 1,
                    "written": 10,
                    "skipped": 0,
                    "task_producers": [],
                }
            ],
        },
    ]


def test_status_of_a_topic_no_spark_sink_writes_lists_none(
    capsys: pytest.CaptureFixture[str], server: ServerInfo, namespace: str, client: fencing.Client
) -> None:
    client.topic("events", 1).open()
    code, out, _ = run(capsys, "status", "events", *at(server, namespace))
    assert code == 0
    assert "spark sinks" not in out


def test_lapsed_producers_of_finished_spark_tasks_are_listed_as_the_sinks(
    capsys: pytest.CaptureFixture[str],
    server: ServerInfo,
    namespace: str,
    client: fencing.Client,
    raw: redis.Redis,
) -> None:
    topic = client.topic("events", 1).open()
    _batch(client, topic, 0, Lineage("etl", "query-1", 0, 1))
    shared = client.keys.partition("events", 0).shared
    now = server_ms(raw)
    # Two Spark workers' producers of the app: one whose worker went 10 min ago, one live;
    # and a lapsed shared producer no sink knows. (Half a second of margin for the test.)
    raw.zadd(shared, {"dead0000task": now - 600_400, "live0000task": now + 120_900})
    raw.zadd(shared, {"gone0000else": now - 600_400})
    for session in ("dead0000task", "live0000task"):
        assert _enlist(client, topic, "etl", session) is True

    code, out, err = run(capsys, "status", "events", *at(server, namespace))
    assert (code, err) == (0, "")
    partition = out.split("\n  waiters (FIFO)", 1)[0].splitlines()[-2:]
    assert partition == [
        "  shared producers: 1 live of 2: gone0000 (lapsed 10m ago), live0000 (expires in 2m)",
        "  spark sink 'etl': 1 lapsed task producer(s) of finished tasks, removed when the app "
        "finishes a batch here: dead0000 (lapsed 10m ago)",
    ]
    code, out, _ = run(capsys, "status", "events", "--json", *at(server, namespace))
    assert json.loads(out)["spark_sinks"][0]["partitions"][0]["task_producers"] == [
        "dead0000task",
        "live0000task",
    ]

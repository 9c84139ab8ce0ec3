"""``fencing status TOPIC`` on the Spark sinks that write a topic: per app id, the query
that holds it, the last batch it finished and its rows written and skipped, summed over the
partitions, from sink state the sink's own scripts wrote (no Spark needed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import fencing
from fencing import _protocol as protocol
from fencing._protocol.sink import Lineage

from ..conftest import ServerInfo
from ..support.cli import at, run
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

"""The Spark sink's parts without a Spark session: its scripts called directly (a Spark
partition that is not an index, a layout that does not match its parts, a new lineage
interrupted between its begins), the row encoding of a whole row as JSON, and the one line
that reports executors unable to run the library."""

from __future__ import annotations

import json
from typing import Any

import pytest

import fencing
from fencing import _protocol as protocol
from fencing._protocol.sink import CHAIN_START, Chunk, Lineage, chain
from fencing._protocol.topic import EncodedBatch
from fencing._sync.producer import fenced_call
from fencing.spark import ForeachBatchSink, producers
from fencing.spark.probe import executor_error, worker_failure
from fencing.spark.rows import row_json
from tests.support.internals import context_of, metadata_of

from ..conftest import ServerInfo
from ..support.logs import read_records
from ..support.polling import wait_until


def execute(client: fencing.Client, call):  # type: ignore[no-untyped-def]
    return (
        context_of(client)
        .driver(client.settings.socket_timeout)
        .execute(call, context_of(client).budget_default())
    )


def chunk_of(sp: int, indexes: list[int], values: list[bytes]) -> Chunk:
    h = CHAIN_START
    hashes = []
    for i, v in zip(indexes, values, strict=True):
        h = chain(h, i, v, None, b"")
        hashes.append(h)
    return Chunk(
        sp,
        -1,
        CHAIN_START,
        indexes,
        b"".join(hashes),
        EncodedBatch(len(values), "0" * len(values), list(values), ""),
    )


def test_whole_row_json_keeps_the_field_names_of_a_struct_column() -> None:
    # value_col=None writes the row as JSON; a struct column arrives as a pyspark Row (a
    # tuple), which json.dumps encodes as a list before _json_default's asDict branch runs.
    pyspark_sql = pytest.importorskip("pyspark.sql")
    got = json.loads(row_json(("id", "s"), (1, pyspark_sql.Row(a=1, b="x"))))
    assert got == {"id": 1, "s": {"a": 1, "b": "x"}}


def test_python_workers_that_cannot_start_are_reported_in_one_line() -> None:
    # As Spark 4 words them, amid Java frames: PYSPARK_PYTHON naming no file, and an
    # interpreter of another minor version than the driver's.
    missing = (
        "org.apache.spark.SparkException: Job aborted due to stage failure: ...\n"
        'java.io.IOException: Cannot run program "/opt/py/bin/python": error=2, No such '
        "file or directory\n\tat java.base/java.lang.ProcessBuilder.start(ProcessBuilder.java:1143)"
    )
    assert worker_failure(missing) == (
        'their Python worker failed: Cannot run program "/opt/py/bin/python": error=2, No '
        "such file or directory"
    )
    mismatch = (
        "pyspark.errors.exceptions.base.PySparkRuntimeError: [PYTHON_VERSION_MISMATCH] Python "
        "in worker has different version: 3.12 than that in driver: 3.11, PySpark cannot run "
        "with different minor versions.\nPlease check environment variables PYSPARK_PYTHON "
        "and PYSPARK_DRIVER_PYTHON are correctly set.\n SQLSTATE: 38000\n\tat org.apache..."
    )
    reason = worker_failure(mismatch)
    assert reason is not None and reason.endswith("cannot run with different minor versions.")
    line = executor_error(reason)
    assert "\n" not in line and "versions.." not in line
    assert line.endswith("; nothing was written")
    # Other failures are not this one.
    assert worker_failure("java.lang.OutOfMemoryError: Java heap space") is None
    assert worker_failure("ModuleNotFoundError: No module named 'numpy'") is None
    assert "\n" not in executor_error("their Python /p (3.11.7) reports ImportError: a\n  b")


def test_sink_append_refuses_a_spark_partition_that_is_not_an_index(client: fencing.Client) -> None:
    topic = client.topic("t", 1).open()
    lin = Lineage("app", "q1", 0, 2)
    pk = metadata_of(topic).partition_keys(0)
    execute(
        client,
        protocol.sink.begin(
            pk, lin, incarnation=metadata_of(topic).incarnation_of(0), new_lineage=False
        ),
    )
    producer = topic.producer()
    producer.open()
    for bad in (-1, 7):  # below 0, and not below the batch's Spark partition count (2)
        with pytest.raises(fencing.errors.FencingError):
            fenced_call(
                producer,
                0,
                lambda w, b=bad: protocol.sink.append(
                    pk,
                    lin,
                    chunk_of(b, [0], [b"v"]),
                    incarnation=metadata_of(topic).incarnation_of(0),
                    seen_next=0,
                    writer=w,
                ),
            )
    producer.close()


def test_tasks_that_are_not_told_the_partition_count_write_any_spark_partition_once(
    client: fencing.Client,
) -> None:
    # The data source sink's tasks begin a batch with partition count 0 (not known to them).
    topic = client.topic("t", 1).open()
    meta = metadata_of(topic)
    lin = Lineage("app", "q1", 0, 0)
    pk = meta.partition_keys(0)
    inc = meta.incarnation_of(0)
    begun = execute(client, protocol.sink.begin(pk, lin, incarnation=inc, new_lineage=False))
    assert begun.status == "fresh"
    again = execute(client, protocol.sink.begin(pk, lin, incarnation=inc, new_lineage=False))
    assert again.status == "replay"  # another task of the batch: begun already
    producer = topic.producer()
    producer.open()

    def append(sp: int) -> Any:
        return fenced_call(
            producer,
            0,
            lambda w: protocol.sink.append(
                pk, lin, chunk_of(sp, [0], [b"v%d" % sp]), incarnation=inc, seen_next=0, writer=w
            ),
        )

    assert [append(sp).written for sp in (0, 9, 9, 0)] == [1, 1, 0, 0]
    with pytest.raises(fencing.errors.FencingError):
        append(-1)
    producer.close()
    assert [r.value for r in read_records(client, "t", 0)] == [b"v0", b"v9"]


def test_sink_append_refuses_a_layout_that_does_not_match_its_parts(
    client: fencing.Client, server: ServerInfo, namespace: str
) -> None:
    topic = client.topic("t", 1).open()
    lin = Lineage("app", "q1", 0, 1)
    pk = metadata_of(topic).partition_keys(0)
    execute(
        client,
        protocol.sink.begin(
            pk, lin, incarnation=metadata_of(topic).incarnation_of(0), new_lineage=False
        ),
    )
    producer = topic.producer()
    producer.open()
    c = chunk_of(0, [0], [b"v"])
    # one record of shape 0 (value only) but two parts: the extra part is silently dropped
    bad = Chunk(
        0, -1, CHAIN_START, c.indexes, c.hashes, EncodedBatch(1, "0", [b"v", b"stray-key"], "")
    )
    with pytest.raises(fencing.errors.FencingError):
        fenced_call(
            producer,
            0,
            lambda w: protocol.sink.append(
                pk,
                lin,
                bad,
                incarnation=metadata_of(topic).incarnation_of(0),
                seen_next=0,
                writer=w,
            ),
        )
    producer.close()


def test_new_lineage_interrupted_between_begins_is_not_refused_on_restart(
    client: fencing.Client, server: ServerInfo
) -> None:
    # The README: "pass new_lineage=True once". The driver with new_lineage=True began batch 0
    # of query q2 on partition 0 and died before partition 1; the restart without the flag is
    # refused on partition 1 with CheckpointReset, although q2 already owns partition 0.
    topic = client.topic("t", 2).open()
    old = Lineage("app", "q1", 5, 1)
    for t in range(2):
        execute(
            client,
            protocol.sink.begin(
                metadata_of(topic).partition_keys(t),
                old,
                incarnation=metadata_of(topic).incarnation_of(t),
                new_lineage=False,
            ),
        )
        execute(
            client,
            protocol.sink.finish(
                metadata_of(topic).partition_keys(t),
                old,
                incarnation=metadata_of(topic).incarnation_of(t),
                rows=0,
            ),
        )
    new = Lineage("app", "q2", 0, 1)
    execute(
        client,
        protocol.sink.begin(
            metadata_of(topic).partition_keys(0),
            new,
            incarnation=metadata_of(topic).incarnation_of(0),
            new_lineage=True,
        ),
    )
    url = server.url
    # restart, flag removed: the driver completes the lineage q2 began on partition 0
    sink = ForeachBatchSink(url, "t", "app", namespace=client.namespace)
    got = sink._begin(sink._open_topic(), new)
    assert [g.status for g in got] == ["replay", "lineage"]
    # a query that owns no partition is still refused
    with pytest.raises(fencing.CheckpointReset):
        sink._begin(sink._open_topic(), Lineage("app", "q3", 0, 1))
    sink.close()


def test_a_query_whose_app_id_another_query_took_over_on_some_partitions_is_refused(
    client: fencing.Client, server: ServerInfo
) -> None:
    # Query q1 holds the app id on both partitions; q2 (new_lineage) has taken partition 0
    # over and not yet partition 1. q1's next begin must not take partition 0 back: only a
    # query that itself took over from the other completes its lineage.
    topic = client.topic("t", 2).open()
    meta = metadata_of(topic)

    def begin(lineage: Lineage, t: int, new: bool) -> Any:
        return execute(
            client,
            protocol.sink.begin(
                meta.partition_keys(t), lineage, incarnation=meta.incarnation_of(t), new_lineage=new
            ),
        )

    q1 = Lineage("app", "q1", 0, 1)
    for t in range(2):
        begin(q1, t, False)
    q2 = Lineage("app", "q2", 0, 1)
    taken = begin(q2, 0, True)
    assert (taken.status, taken.previous) == ("lineage", "q1")
    sink = ForeachBatchSink(server.url, "t", "app", namespace=client.namespace)
    with pytest.raises(fencing.CheckpointReset, match="belongs to streaming query q2"):
        sink._begin(sink._open_topic(), q1)
    # q2 itself, restarted without the flag, completes its lineage on partition 1.
    got = sink._begin(sink._open_topic(), q2)
    assert [(g.status, g.previous) for g in got] == [("replay", "q1"), ("lineage", "q1")]
    sink.close()


def test_a_task_that_found_its_topic_gone_is_raised_as_unknown_topic() -> None:
    """A task's UnknownTopic (the topic deleted, forced, while the batch ran) reaches the
    driver as itself, naming the topic, like any bad-input error met in a task (Spark's
    error text carries the task's exception by class name and message)."""

    class FailedJob:
        def collect(self) -> list[object]:
            raise RuntimeError(
                "Job aborted ... Traceback (most recent call last): ...\n"
                "fencing.errors.UnknownTopic: topic 'orders' does not exist: create it with "
                "client.topic('orders', partitions=N)\n\tat org.apache.spark..."
            )

    sink = ForeachBatchSink("redis://127.0.0.1:1/0", "orders", app_id="etl")
    with pytest.raises(fencing.UnknownTopic, match="topic 'orders' does not exist") as info:
        sink._run(FailedJob())
    assert info.value.topic == "orders"


def test_a_workers_producer_no_task_used_for_a_while_is_closed_and_its_lease_given_back(
    client: fencing.Client, server: ServerInfo, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Python worker outlives the query that opened its shared producer: once no task has
    used it for ``IDLE_SECONDS``, it is closed (no renewals, no lease held)."""
    monkeypatch.setattr(producers, "IDLE_SECONDS", 0.3)
    topic = client.topic("idle", partitions=1)
    topic.open()
    producers.shared_producer(server.url, namespace, "idle", lease_ttl=5.0)
    with pytest.raises(fencing.ProducerBusy):  # the shared producer holds the lease
        topic.producer(access_mode=fencing.AccessMode.EXCLUSIVE).open()

    def exclusive() -> fencing.Producer | None:
        try:
            return topic.producer(access_mode=fencing.AccessMode.EXCLUSIVE).open()
        except fencing.ProducerBusy:
            return None

    with wait_until(exclusive, timeout=10.0, what="the idle producer's lease given back") as p:
        assert p.send(b"after", partition=0).offset == 0
    assert (server.url, namespace, "idle") not in producers._cache

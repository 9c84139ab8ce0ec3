"""The Spark sinks across a driver killed with SIGKILL, then restarted from its checkpoint:
``ForeachBatchSink`` killed after it wrote a micro-batch and before Spark committed it to
the checkpoint, and a topic-to-topic pipeline of the ``fencing`` connector killed at any
point of its run, restarted from its checkpoint or, with the checkpoint deleted, as a new
lineage whose source starts after what the sink wrote."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

pytest.importorskip("pyspark", reason="the spark extra is not installed")

import fencing

from ..conftest import SOAK, ServerInfo
from ..support.logs import read_records, topic_values
from ..support.paths import ROOT
from ..support.polling import wait_until
from ..support.processes import kill_groups
from ..support.spark import duplicates, sink_totals


def _start(
    args: list[str], log: Path, module: str = "tests.spark.spark_worker"
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        stdout=open(log, "wb"),
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own group: the JVM dies with it
    )


@pytest.mark.timeout(420)  # two Spark drivers, one after the other
def test_a_driver_killed_between_the_write_and_the_checkpoint_commit_writes_once(
    server: ServerInfo, namespace: str, tmp_path: Path
) -> None:
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for two Spark drivers of their own: redis")
    source = tmp_path / "in"
    source.mkdir()
    expected = []
    for f in range(3):
        with open(source / f"part-{f}.json", "w") as out:
            for i in range(500):
                v = f"f{f}-{i}"
                expected.append(v.encode())
                out.write(json.dumps({"id": i, "v": v, "k": f"k{i % 11}"}) + "\n")
    args = [server.url, namespace, str(source), str(tmp_path / "ck"), "events"]
    marker = tmp_path / "hung"

    first = _start([*args, "1", str(marker)], tmp_path / "first.log")
    try:
        wait_until(lambda: marker.exists() or first.poll() is not None, timeout=240)
        assert marker.exists(), (tmp_path / "first.log").read_text()
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    client = fencing.Client.from_url(server.url, namespace=namespace)
    assert len(topic_values(client, "events")) == 1000  # batches 0 and 1 were written

    second = _start([*args, "-1", str(marker)], tmp_path / "second.log")
    try:
        assert second.wait(240) == 0
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    lines = (tmp_path / "second.log").read_text().splitlines()
    assert lines[-1] == "DONE"
    batches = [json.loads(line) for line in lines[:-1]]
    # Spark replays batch 1 (never committed to the checkpoint): the sink skips it whole.
    assert [(b["batch_id"], b["status"]) for b in batches] == [(1, "skipped"), (2, "written")]
    assert batches[0]["duplicates"] == 500
    values = topic_values(client, "events")
    assert duplicates(values) == {}
    assert sorted(values) == sorted(expected)
    client.close()


def _orders(client: fencing.Client, records: int) -> dict[int, list[bytes]]:
    """Topic orders of two partitions holding r0, r1, ... alternately; its values by
    partition."""
    expected: dict[int, list[bytes]] = {0: [], 1: []}
    with client.topic("orders", partitions=2).producer() as producer:
        for i in range(records):
            value = f"r{i}".encode()
            producer.send(value, partition=i % 2)
            expected[i % 2].append(value)
    return expected


def _copied(client: fencing.Client) -> dict[int, list[bytes]]:
    """The values of topic events by the source partition that keys them, in log order."""
    by_source: dict[int, list[bytes]] = {0: [], 1: []}
    for p in (0, 1):
        for r in read_records(client, "events", p):
            assert r.key is not None
            by_source[int(r.key)].append(r.value)
    return by_source


def _kill_once_written(
    args: list[str],
    log: Path,
    client: fencing.Client,
    written_at_least: int,
    executors: Callable[[], list[int]] = list,
) -> None:
    """Start the pipeline and kill its driver once events holds that many records, with
    its Python workers, and the ``executors`` (JVMs of a cluster's workers) with theirs."""

    def written() -> int:
        return len(topic_values(client, "events")) if "events" in client.topics() else 0

    driver = _start(args, log, PIPELINE)
    try:
        wait_until(lambda: written() >= written_at_least or driver.poll() is not None, timeout=240)
        assert driver.poll() is None, log.read_text()
    finally:
        # The Python workers too: nothing writes after this.
        for pid in [driver.pid, *executors()]:
            kill_groups(pid)
        driver.wait(30)


def _run_to_the_end(args: list[str], log: Path) -> None:
    last = _start(args, log, PIPELINE)
    try:
        assert last.wait(240) == 0
    finally:
        if last.poll() is None:
            os.killpg(last.pid, signal.SIGKILL)
    assert log.read_text().splitlines()[-1] == "DONE"


PIPELINE = "tests.spark.pipeline_worker"


@pytest.mark.timeout(600)  # Spark drivers one after the other
def test_a_pipeline_whose_driver_is_killed_at_any_point_copies_each_record_once(
    server: ServerInfo, namespace: str, client: fencing.Client, tmp_path: Path
) -> None:
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for Spark drivers of their own: redis")
    records = 3000 if SOAK else 1200  # micro-batches of 400: 3 (or 8 with a second kill)
    expected = _orders(client, records)
    args = [server.url, namespace, str(tmp_path / "ck"), "400"]
    # Killed once rows are written: wherever the kill lands (mid-batch, between the sink's
    # commit and the checkpoint's), the restart copies each record once. With
    # FENCING_SOAK=1, killed again after more rows.
    for run, written_at_least in enumerate((1, 1200) if SOAK else (1,)):
        _kill_once_written(args, tmp_path / f"run{run}.log", client, written_at_least)
    _run_to_the_end(args, tmp_path / "last.log")
    # Each source partition's rows are keyed by it: in one target partition, in order.
    assert _copied(client) == expected


def check_recovery(
    client: fencing.Client,
    raw: redis.Redis,
    namespace: str,
    args: list[str],
    folder: Path,
    executors: Callable[[], list[int]] = list,
) -> None:
    """Kill a pipeline once it wrote some batches, delete its checkpoint, recover it as a
    new lineage whose source starts afterSink, and check that it copied each record once,
    skipping exactly the rows past the offsets the sink recorded."""
    expected = _orders(client, 1200)
    # Killed after its first batches: wherever the kill lands (mid-batch too), then the
    # checkpoint is lost.
    _kill_once_written(args, folder / "killed.log", client, 300, executors)
    shutil.rmtree(args[2])
    killed = sink_totals(raw, namespace, "events", 2, "pipeline")
    present = len(topic_values(client, "events"))
    # Past the offsets the sink recorded: the rows of the batch the kill cut short.
    beyond = present - sum(offset + 1 for offset in killed.positions.values())
    assert 0 <= beyond <= 200  # at most the one batch under way
    _run_to_the_end([*args, "recover"], folder / "recovered.log")
    assert _copied(client) == expected
    # The new lineage skipped exactly the rows past the recorded offsets: its source
    # started where the sink stopped, not before (the ids alone would skip any repeat).
    recovered = sink_totals(raw, namespace, "events", 2, "pipeline")
    assert recovered.skipped - killed.skipped == beyond
    last = {source.rsplit("/", 1)[1]: offset for source, offset in recovered.positions.items()}
    assert last == {"0": 599, "1": 599}


@pytest.mark.timeout(600)  # Spark drivers one after the other
def test_a_pipeline_whose_checkpoint_is_deleted_resumes_after_what_its_sink_wrote(
    server: ServerInfo, namespace: str, client: fencing.Client, raw: redis.Redis, tmp_path: Path
) -> None:
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for Spark drivers of their own: redis")
    args = [server.url, namespace, str(tmp_path / "ck"), "200"]
    check_recovery(client, raw, namespace, args, tmp_path)

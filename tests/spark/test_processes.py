"""The Spark sink across a driver killed with SIGKILL after the sink wrote a micro-batch and
before Spark committed it to the checkpoint, then restarted from that checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

import fencing

from ..conftest import ServerInfo
from ..support.logs import topic_values
from ..support.paths import ROOT
from ..support.polling import wait_until
from ..support.spark import duplicates


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.spark_worker", *args],
        cwd=ROOT,
        stdout=open(log, "wb"),
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own group: the JVM dies with it
    )


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

"""The examples, run as documented in examples/README.md, against the suite's servers.

Each example runs as a subprocess (``sys.executable examples/<name>.py ...`` from the
repository root) with ``--url`` of the session's server and ``FENCING_NAMESPACE`` set to the
test's own namespace. The copy job is crashed (``--crash-after``: after a send, before its
save) at several points and restarted until done; then the topic must hold the source table,
once, in order, at offsets 0..299. The KV demo must exit 0 with identical final states; the
``KVStore`` class is also driven in-process, step by step.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import redis

import fencing
from examples.copy_job import CheckpointFenced, Checkpoints, connect, seed_rows
from examples.kv_store import KVStore, NotLeader, Op
from fencing._protocol.producer import decode_pid_state

from ..conftest import ServerInfo
from ..support.paths import ROOT

#: Bound on one example run (a run takes about a second).
RUN_TIMEOUT = 60.0


def run_example(
    server: ServerInfo, namespace: str, script: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """``python examples/<script> --url <server> <args>`` from the repository root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCING_")}
    env["FENCING_NAMESPACE"] = namespace
    return subprocess.run(
        [sys.executable, f"examples/{script}", "--url", server.url, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return result.stdout.splitlines()


# -- copy_job.py ---------------------------------------------------------------------------------


def test_copy_job_crashed_between_send_and_save_copies_exactly_once(
    server: ServerInfo, namespace: str, client: fencing.Client, raw: redis.Redis, tmp_path: Path
) -> None:
    db = str(tmp_path / "copy.db")
    job = ("copy_job.py", "--db", db, "--topic", "mirror")

    # (extra arguments, exit status, where it resumes, how the run ends). Every crash falls
    # right after a send and before its save, so every restart resends one landed batch.
    plan: list[tuple[tuple[str, ...], int, str, str]] = [
        # a fresh job crashing after its very first send: its state was saved before it
        (("--seed-rows", "300", "--crash-after", "1"), 1, "fresh start",
         "crashing after send 1, before saving it (--crash-after 1)"),
        # the first batch is the planned one (rows 1..50) although --batch changed
        (("--batch", "40", "--crash-after", "3"), 1, "resuming after source id 0 ",
         "crashing after send 3, before saving it (--crash-after 3)"),
        (("--batch", "70", "--crash-after", "2"), 1, "resuming after source id 90 ",
         "crashing after send 2, before saving it (--crash-after 2)"),
        ((), 0, "resuming after source id 130 ",
         "done: 300 of 300 rows copied to topic 'mirror'; this run sent 3 batches, "
         "1 already there; next offset 300"),
    ]  # fmt: skip
    resent = []
    for extra, status, start, end in plan:
        result = run_example(server, namespace, *job, *extra)
        assert result.returncode == status, result.stdout + result.stderr
        out = lines(result)
        assert any(start in line for line in out), out
        assert out[-1] == f"copy_job: {end}", out
        resent += [line for line in out if "already there: original offsets" in line]
    # Each restart's first send was the batch sent before the crash: the original offsets.
    assert [line.split("copy_job: ")[1] for line in resent] == [
        "sent source ids 1..50 -> offsets 0..49 (already there: original offsets returned)",
        "sent source ids 91..130 -> offsets 90..129 (already there: original offsets returned)",
        "sent source ids 131..200 -> offsets 130..199 (already there: original offsets returned)",
    ]

    # The topic is the source table: once, in order, at offsets 0..299.
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, key, value FROM source ORDER BY id").fetchall()
        checkpoint = conn.execute(
            "SELECT position, next_end, generation FROM copy_checkpoint "
            "WHERE namespace = ? AND topic = 'mirror'",
            (namespace,),
        ).fetchone()
    assert [r[0] for r in rows] == list(range(1, 301))
    assert checkpoint == (300, None, 3)
    topic = client.topic("mirror")
    assert topic.offsets(0) == (0, 300)
    records = topic.reader(0, 0).read(max_records=1000)
    assert [(r.offset, r.key, r.value, dict(r.headers)) for r in records] == [
        (i, key.encode(), value.encode(), {"source-id": str(row_id).encode()})
        for i, (row_id, key, value) in enumerate(rows)
    ]
    # One PID wrote everything; the three restarts were generations 1, 2 and 3 of it.
    (pid,) = {r.producer_id for r in records}
    pk = client.keys.partition("mirror", 0)
    entries = raw.xrange(pk.stream)
    assert [e[0] for e in entries] == [b"0-%d" % (i + 1) for i in range(300)]  # type: ignore[union-attr]
    state = decode_pid_state(raw.hget(pk.pids, str(pid)))  # type: ignore[arg-type]
    assert (state.generation, state.last_sequence) == (3, 299)


def test_copy_job_superseded_incarnation_can_neither_send_nor_save(
    client: fencing.Client, tmp_path: Path
) -> None:
    conn = connect(tmp_path / "copy.db")
    try:
        seed_rows(conn, 10)
        topic = client.topic("mirror", partitions=1)
        checkpoints = Checkpoints(conn, client.namespace, "mirror", batch=5)
        first = topic.producer()
        saved = checkpoints.create(first.state)
        old = topic.producer(resume=saved.state)  # a job that will be presumed dead...
        new = topic.producer(resume=saved.state)  # ...and its restart
        assert new.state.generation == old.state.generation + 1 == 2
        with pytest.raises(fencing.ProducerFenced):
            old.send_batch([b"late"], partition=0)
        mds = new.send_batch([b"row"], partition=0)
        checkpoints.save(1, new.state)
        with pytest.raises(CheckpointFenced):
            checkpoints.save(5, old.state)  # the older job cannot move the checkpoint back
        kept = checkpoints.load()
        assert kept is not None
        assert (kept.position, kept.generation) == (1, 2)
        assert [m.offset for m in mds] == [0]
        assert topic.offsets(0) == (0, 1)
        for producer in (first, old, new):
            producer.close()
    finally:
        conn.close()


# -- kv_store.py ---------------------------------------------------------------------------------

_FINAL = re.compile(r"^kv_store: final state of (\S+) \(upcoming offset (\d+)\): (\{.*\})$")


def test_kv_store_demo_two_leaders_end_identical(
    server: ServerInfo, namespace: str, client: fencing.Client
) -> None:
    result = run_example(server, namespace, "kv_store.py", "--topic", "kv-demo")
    assert result.returncode == 0, result.stdout + result.stderr
    out = lines(result)
    refused = [line for line in out if "refused with OffsetMismatch (expected 0, " in line]
    assert len(refused) == 1, out
    finals = {m[1]: (int(m[2]), json.loads(m[3])) for m in map(_FINAL.match, out) if m}
    assert set(finals) == {"leader-a", "leader-b", "replica-from-0"}
    winner = "leader-a" if "leader-b" in refused[0] else "leader-b"
    expected = {"owner": winner[-1], "writes": "11", "last": winner}
    if winner == "leader-a":
        expected["color"] = "red"
    assert all(final == (5, expected) for final in finals.values()), finals
    assert out[-1] == "kv_store: replicas agree: yes"
    # The shard's log: the winner's batch of 3, then its batch of 2; nothing of the loser.
    records = client.topic("kv-demo").reader(0, 0).read(max_records=100)
    assert [Op.decode(r).key for r in records] == ["owner", "writes", "color", "writes", "last"]
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]


def test_kv_store_second_leader_is_refused_and_rebootstraps(client: fencing.Client) -> None:
    topic = client.topic("kv", partitions=1)
    with KVStore(topic) as first, KVStore(topic) as second:
        assert (first.lead(), second.lead()) == (0, 0)
        mds = first.apply_batch([Op.set("a", "1"), Op.incr("n", 2)])
        assert [m.offset for m in mds] == [0, 1]

        # The second leader's upcoming offset is stale: refused, nothing written.
        with pytest.raises(fencing.OffsetMismatch) as refused:
            second.apply_batch([Op.set("a", "2")])
        assert (refused.value.expected, refused.value.actual) == (0, 2)
        assert not second.is_leader
        assert second.upcoming == first.upcoming == 2
        assert second.state() == first.state() == {"a": "1", "n": "2"}
        with pytest.raises(NotLeader):
            second.apply_batch([Op.set("a", "2")])

        # It leads again; now the first one is the stale leader.
        second.lead()
        assert [m.offset for m in second.apply_batch([Op.delete("a")])] == [2]
        with pytest.raises(fencing.OffsetMismatch) as refused:
            first.apply_batch([Op.incr("n")])
        assert (refused.value.expected, refused.value.actual) == (2, 3)
        assert first.state() == second.state() == {"n": "2"}
        assert first.get("a") is None and second.get("n") == "2"

        # An operation the state does not allow is refused before anything is written.
        with pytest.raises(fencing.InvalidArgument):
            second.apply_batch([Op.set("n", "x"), Op.incr("n")])
        assert topic.offsets(0) == (0, 3)
        assert second.state() == {"n": "2"}

        records = topic.reader(0, 0).read(max_records=100)
        assert [r.value for r in records] == [
            b'["set", "a", "1"]',
            b'["incr", "n", 2]',
            b'["del", "a"]',
        ]
        fresh = KVStore(topic)
        assert fresh.bootstrap() == 3
        assert (fresh.upcoming, fresh.state()) == (3, {"n": "2"})

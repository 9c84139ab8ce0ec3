"""Seed 003's mirror-maker case with real processes killed by SIGKILL (G5).

A copy job (a ``spawn``ed child) copies an input of N records into an output topic in
batches. After each batch it saves, atomically (temporary file + ``os.replace``), its input
position together with ``producer.state``; at start-up it resumes from that file with
``topic.producer(resume=...)`` and resends from the saved position. On a fresh start it
saves the producer's state *before* its first send, so no batch is ever sent by a producer
whose state was not saved.

The test kills the child with SIGKILL several times, at points drawn from a seeded RNG:
"random" kills come a random few milliseconds after the child reported a given position
(they land anywhere in the send/save cycle), "between" kills come while the child, told to,
holds still after a send and before its save — the exact window in which a resend of a
batch that had landed is unavoidable. It restarts the child each time until the job is
done, then checks the whole output log: the input, in order, at offsets 0..N-1, once.

The child reports on a pipe of its own (a small message is one ``write``, so a kill never
leaves half of one): ("started", position, log_end), ("sent", position, offsets),
("holding", position), ("saved", position), ("done", position) or ("error", text). A run
whose ``log_end`` is past its saved position resends a batch that had landed.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

import fencing
from fencing import ProducerState
from fencing.protocol.producer import decode_pid_state

from .conftest import ServerInfo, _drop_namespace

TOPIC = "mirror"
N = 300
BATCH = 7
LEASE_TTL = 2.0
SEED = int(os.environ.get("FENCING_COPY_JOB_SEED", "3003"))
#: Kills per server kind: this many in the window between a send and its save...
BETWEEN_KILLS = 2
#: ...and this many at random points.
RANDOM_KILLS = 5
#: Random kills come this long (at most) after the child reported the chosen position.
MAX_KILL_DELAY = 0.004
#: Batches a run may advance past its start before a kill (drawn uniformly).
MAX_ADVANCE = 5
#: Bound on every wait for a message from a child, and on the last run.
EVENT_TIMEOUT = 30.0

Event = tuple[Any, ...]


def input_records(n: int) -> list[bytes]:
    """The copy job's input: n distinct values."""
    return [b"record-%05d" % i for i in range(n)]


def batch_at(position: int) -> list[bytes]:
    return input_records(N)[position : position + BATCH]


# -- the child ---------------------------------------------------------------------------------


def _save(path: Path, position: int, state: ProducerState) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"position": position, "state": state.to_json()}))
    os.replace(tmp, path)


def copy_job(
    url: str,
    namespace: str,
    state_file: str,
    hold_at: int | None,
    conn: multiprocessing.connection.Connection,
) -> None:
    """Copy the input into the topic from the saved position; see the module doc."""
    try:
        inputs = input_records(N)
        path = Path(state_file)
        client = fencing.Client.from_url(url, namespace=namespace)
        topic = client.topic(TOPIC, partitions=1)
        if path.exists():
            saved = json.loads(path.read_text())
            position = int(saved["position"])
            state = ProducerState.from_json(saved["state"])
            producer = topic.producer(resume=state, lease_ttl=LEASE_TTL)
        else:
            position = 0
            producer = topic.producer(lease_ttl=LEASE_TTL)
        _save(path, position, producer.state)  # before any send: the state is known
        conn.send(("started", position, topic.offsets(0)[1]))
        while position < len(inputs):
            batch = inputs[position : position + BATCH]
            mds = producer.send_batch(batch, partition=0)
            conn.send(("sent", position, [m.offset for m in mds]))
            if position == hold_at:
                conn.send(("holding", position))
                conn.poll(EVENT_TIMEOUT)  # the test kills us here, between send and save
                return
            position += len(batch)
            _save(path, position, producer.state)
            conn.send(("saved", position))
        producer.close()
        client.close()
        conn.send(("done", position))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        raise


# -- the test ----------------------------------------------------------------------------------


@dataclass
class Run:
    """One life of the child: where it started, what it reported, how it ended."""

    kind: str  # "between", "random" or "final"
    start: int
    target: int
    events: list[Event] = field(default_factory=list)
    exitcode: int | None = None

    @property
    def started(self) -> Event:
        (event,) = [e for e in self.events if e[0] == "started"]
        return event

    def resent_landed(self) -> bool:
        """Did this run start by resending a batch that had already landed?"""
        _, position, log_end = self.started
        return bool(log_end > position)


def _saved_position(path: Path) -> int:
    if not path.exists():
        return 0
    return int(json.loads(path.read_text())["position"])


def _plan(rng: random.Random) -> list[tuple[str, int, float]]:
    """(kind, batches to advance, kill delay) per kill, in a seeded random order."""
    kinds = ["between"] * BETWEEN_KILLS + ["random"] * RANDOM_KILLS
    rng.shuffle(kinds)
    return [(k, rng.randint(0, MAX_ADVANCE), rng.uniform(0, MAX_KILL_DELAY)) for k in kinds]


def _live(
    ctx: Any, url: str, namespace: str, path: Path, kind: str, advance: int, delay: float
) -> Run:
    """Start the child, kill it at the planned point (or let it finish), return the run."""
    start = _saved_position(path)
    last_batch = (N - 1) // BATCH * BATCH
    target = min(start + advance * BATCH, last_batch)
    run = Run(kind, start, target)
    ours, theirs = ctx.Pipe()
    hold = target if kind == "between" else None
    process = ctx.Process(target=copy_job, args=(url, namespace, str(path), hold, theirs))
    process.start()
    theirs.close()
    try:
        deadline = time.monotonic() + EVENT_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not ours.poll(left):
                raise AssertionError(f"no word from the copy job within {EVENT_TIMEOUT}s: {run}")
            try:
                event: Event = ours.recv()
            except EOFError:
                raise AssertionError(f"the copy job died on its own: {run}") from None
            run.events.append(event)
            tag = event[0]
            if tag == "error":
                raise AssertionError(f"the copy job failed:\n{event[1]}")
            if tag == "done":
                break
            if kind == "between" and tag == "holding":
                os.kill(process.pid, signal.SIGKILL)
                break
            if kind == "random" and tag in ("started", "saved") and event[1] >= target:
                time.sleep(delay)  # not a synchronisation: picks a random point to kill at
                os.kill(process.pid, signal.SIGKILL)
                break
        process.join(EVENT_TIMEOUT)
        assert process.exitcode is not None, "the copy job outlived SIGKILL"
        run.exitcode = process.exitcode
        # What the child wrote before it died is still in the pipe: read it to the end.
        while ours.poll(0):
            try:
                run.events.append(ours.recv())
            except EOFError:
                break
        return run
    finally:
        if process.is_alive():
            process.kill()
            process.join(EVENT_TIMEOUT)
        ours.close()


@pytest.fixture
def job_namespace(server: ServerInfo, namespace: str) -> Any:
    yield namespace
    if not server.owned:
        _drop_namespace(server.url, namespace)


def test_a_killed_copy_job_copies_exactly_once(
    server: ServerInfo, job_namespace: str, raw: redis.Redis, tmp_path: Path
) -> None:
    ctx = multiprocessing.get_context("spawn")
    rng = random.Random(f"{SEED}-{server.kind}")
    path = tmp_path / "copy-job.json"
    runs: list[Run] = []
    for kind, advance, delay in _plan(rng):
        runs.append(_live(ctx, server.url, job_namespace, path, kind, advance, delay))
        if runs[-1].events[-1][0] == "done":
            break
    if runs[-1].events[-1][0] != "done":
        runs.append(_live(ctx, server.url, job_namespace, path, "final", N, 0.0))
    assert runs[-1].events[-1] == ("done", N)
    assert runs[-1].exitcode == 0
    assert all(r.exitcode == -signal.SIGKILL for r in runs[:-1])

    inputs = input_records(N)
    for previous, run in zip([None, *runs], runs, strict=False):
        _, position, log_end = run.started
        # Each run starts where the last save left it, and at most one batch (sent, not
        # saved) lies past it in the log.
        assert position == run.start
        assert position in ((0,) if previous is None else _possible_starts(previous))
        assert log_end in (position, position + len(batch_at(position)))
        for event in run.events:
            if event[0] == "sent":  # every send, first or resent, got the input's offsets
                _, at, got = event
                assert got == list(range(at, at + len(batch_at(at))))
    # A kill between a send and its save forces the next run to resend a landed batch,
    # which returned the original offsets (checked above) instead of appending again.
    for run, after in itertools.pairwise(runs):
        if run.kind == "between":
            assert after.resent_landed()
    resent = sum(r.resent_landed() for r in runs)
    random_resent = sum(
        after.resent_landed() for run, after in itertools.pairwise(runs) if run.kind == "random"
    )
    print(  # reported with -s: how often a random kill fell between a send and its save
        f"\n[{server.kind}] {len(runs)} runs, {resent} resent a landed batch "
        f"({random_resent} of {sum(r.kind == 'random' for r in runs)} after random kills)"
    )
    assert resent >= sum(r.kind == "between" for r in runs[:-1]) >= 1

    # The whole output log: the input, in order, once, at offsets 0..N-1, one PID.
    topic_keys = fencing.keys.Keys(job_namespace).partition(TOPIC, 0)
    entries: list[tuple[bytes, dict[bytes, bytes]]] = raw.xrange(topic_keys.stream)  # type: ignore[assignment]
    assert [e[0] for e in entries] == [b"0-%d" % (i + 1) for i in range(N)]
    assert [e[1][b"v"] for e in entries] == inputs
    assert len({e[1][b"p"] for e in entries}) == 1
    assert int(raw.hget(topic_keys.meta, "next")) == N  # type: ignore[arg-type]
    client = fencing.Client.from_url(server.url, namespace=job_namespace)
    try:
        records = client.topic(TOPIC).reader(0, 0).read(max_records=10_000)
    finally:
        client.close()
    assert [(r.offset, r.value) for r in records] == list(enumerate(inputs))
    # One PID for the whole job; every restart was one more incarnation of it.
    (pid,) = {r.producer_id for r in records}
    state = decode_pid_state(raw.hget(topic_keys.pids, str(pid)))  # type: ignore[arg-type]
    assert (state.generation, state.last_sequence) == (len(runs) - 1, N - 1)
    assert raw.hlen(topic_keys.pids) == 1


def _possible_starts(run: Run) -> tuple[int, ...]:
    """Where the run after ``run`` may start: its last reported save, or one batch further
    if it was killed after replacing the file and before reporting it."""
    saved = [e[1] for e in run.events if e[0] in ("started", "saved")][-1]
    sent = [e[1] for e in run.events if e[0] == "sent"]
    if sent and sent[-1] == saved:
        return (saved, saved + len(batch_at(saved)))
    return (saved,)

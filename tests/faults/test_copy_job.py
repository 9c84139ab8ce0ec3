"""A copy job (a mirror maker) with real processes killed by SIGKILL (G5).

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

import hashlib
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
from fencing._protocol.producer import decode_pid_state
from fencing.verify import Attempt, verify_log

from ..conftest import ServerInfo, _drop_namespace
from ..support.fleet import Channel, Fleet
from ..support.logs import check_exactly_once, read_values

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
    killed: bool = False  # the test sent SIGKILL (possibly after the child reported done)

    def exited_as_planned(self) -> bool:
        """A run the test did not kill exits 0. A killed one dies of SIGKILL, unless the kill
        landed after the child finished its copy and exited (a random kill point may fall
        after the last batch); either way is exact, the copy's check is on the log."""
        if not self.killed:
            return self.exitcode == 0
        if self.events and self.events[-1][0] == "done":
            return self.exitcode in (0, -signal.SIGKILL)
        return self.exitcode == -signal.SIGKILL

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
                run.killed = True
                break
            if kind == "random" and tag in ("started", "saved") and event[1] >= target:
                time.sleep(delay)  # not a synchronisation: picks a random point to kill at
                os.kill(process.pid, signal.SIGKILL)
                run.killed = True
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


@pytest.mark.one_server
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
    assert [r.exited_as_planned() for r in runs] == [True] * len(runs), runs

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
    topic_keys = fencing._keys.Keys(job_namespace).partition(TOPIC, 0)
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


# -- a copy job over two partitions that saves every K batches ------------------------------------
#
# The input is RECORDS deterministic records; batch b is records 10b..10b+9 and goes to
# partition b % 2, so partition p holds batches p, p+2, p+4, ... and batch b starts there at
# offset and sequence (b // 2) * 10. The job saves (input position, producer state) every
# ``every`` batches only, so a restarted job resends up to ``every`` batches per partition:
# those still in the duplicate window are answered with their original offsets, older ones
# raise DuplicateSequence("older-than-window"), which the job takes as "written before" and
# skips, and the producer goes on with the batches after them.
#
# Each life is killed at a point drawn from a keyed RNG: told at start-up which batch to
# hold at and whether before or after that batch's save, the job stops there and the test
# SIGKILLs it, so a run is the same every time for one RNG key (printed). Kills at a random
# instant of the send itself are the business of the test above.

COPIED = "copied"
PARTITIONS = 2
RECORDS = 2_000
PER_BATCH = 10
BATCHES = RECORDS // PER_BATCH
#: The topic's duplicate window (batches per producer and partition), the default.
WINDOW = 5
#: A restart from a save this many batches back resends, on the saved batch's partition,
#: at least WINDOW batches after it: that batch is older than the window.
BEYOND_WINDOW = PARTITIONS * WINDOW
KILLS = 3
#: A life is SIGKILLed after handling this many batches (drawn uniformly; moved forward to
#: at least BEYOND_WINDOW past its last save where the saves are that far apart).
KILL_AFTER = (15, 50)
#: Where the held job stops: right after the batch's send, or after its save (if one is due).
PHASES = ("sent", "saved")
#: Set it to an integer to repeat the kill points of a run (each run prints its own).
KILL_POINTS_ENV = "FENCING_COPY_JOB_KILL_POINTS"


def copy_input() -> list[bytes]:
    """The two-partition job's input: RECORDS distinct, deterministic values."""
    return [
        b"%05d:%s" % (i, hashlib.blake2b(b"%d" % i, digest_size=8).hexdigest().encode())
        for i in range(RECORDS)
    ]


def partition_of(batch: int) -> int:
    return batch % PARTITIONS


def first_of(batch: int) -> int:
    """Where batch ``batch`` starts in its partition: its first offset and sequence."""
    return batch // PARTITIONS * PER_BATCH


def expected_partition(inputs: list[bytes], partition: int) -> list[bytes]:
    return [
        v
        for b in range(partition, BATCHES, PARTITIONS)
        for v in inputs[b * PER_BATCH : (b + 1) * PER_BATCH]
    ]


def copy_two_partitions(
    channel: Channel, url: str, namespace: str, state_file: str, every: int
) -> None:
    """The job: resume from the saved (position, state) if any, then send the input from
    there batch by batch, skipping a batch older than the window, saving every ``every``
    batches.

    Reports ``started`` and waits for ``("run", hold_at, phase)``: with ``hold_at`` set it
    reports ``holding`` and waits, never to go on, once batch ``hold_at`` was handled
    (``phase`` "sent": before its save; "saved": after it). Then ``sent``/``skipped`` per
    batch, ``saved`` after each save, ``done`` at the end."""
    inputs = copy_input()
    path = Path(state_file)
    client = fencing.Client.from_url(url, namespace=namespace)
    topic = client.topic(COPIED, partitions=PARTITIONS)
    if path.exists():
        saved = json.loads(path.read_text())
        position = int(saved["position"])
        state = ProducerState.from_json(saved["state"])
        producer = topic.producer(resume=state, lease_ttl=LEASE_TTL)
    else:
        position = 0
        producer = topic.producer(lease_ttl=LEASE_TTL)
        _save(path, position, producer.state)  # before any send: the state is known
    ends = [topic.offsets(p)[1] for p in range(PARTITIONS)]
    channel.report("started", position=position, ends=ends)
    _, hold_at, phase = channel.command()

    def hold(batch: int) -> None:
        channel.report("holding", batch=batch, phase=phase)
        channel.command()  # the test kills the job here
        raise AssertionError("a held copy job was told to go on")

    while position < RECORDS:
        batch = position // PER_BATCH
        try:
            mds = producer.send_batch(
                inputs[position : position + PER_BATCH], partition=partition_of(batch)
            )
        except fencing.DuplicateSequence as exc:
            if exc.reason != "older-than-window":
                raise
            channel.report(
                "skipped",
                batch=batch,
                partition=exc.partition,
                sequences=[exc.first_sequence, exc.last_sequence],
            )
        else:
            channel.report(
                "sent",
                batch=batch,
                partitions=sorted({m.partition for m in mds}),
                offsets=[m.offset for m in mds],
                epochs=[m.epoch for m in mds],
            )
        position += PER_BATCH
        if batch == hold_at and phase == "sent":
            hold(batch)
        if position // PER_BATCH % every == 0:
            _save(path, position, producer.state)
            channel.report("saved", position=position)
        if batch == hold_at and phase == "saved":
            hold(batch)
    producer.close()
    client.close()
    channel.report("done", position=position)


def kill_point(start: int, after: int, every: int) -> int:
    """The batch to hold at: the ``after``-th from ``start``, moved forward where needed so
    that it lies at least BEYOND_WINDOW batches past the last save before it (and before
    the next save) when the saves are that far apart."""
    batch = start + after - 1
    if every > BEYOND_WINDOW + 1:
        since_save = batch % every
        if since_save < BEYOND_WINDOW:
            batch += BEYOND_WINDOW - since_save
        elif since_save == every - 1:
            batch -= 1  # (its "saved" phase would leave nothing to resend)
    return batch


def _runs(items: list[tuple[int, str]]) -> str:
    """``[(batch, what), ...]`` as runs: ``6-22 skipped, 23-27 sent``."""
    out: list[str] = []
    for what, group in itertools.groupby(items, key=lambda item: item[1]):
        batches = [b for b, _ in group]
        span = str(batches[0]) if len(batches) == 1 else f"{batches[0]}-{batches[-1]}"
        out.append(f"{span} {what}")
    return ", ".join(out)


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("every", [1, 7, 20, 200])
def test_a_copy_job_saving_every_k_batches_survives_kills_and_copies_exactly_once(
    server: ServerInfo, job_namespace: str, tmp_path: Path, every: int
) -> None:
    """Killed three times at drawn points and restarted from its last save each time, the
    job ends with each partition holding its input once, in order, whatever ``every``."""
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for the kill-and-restart runs: redis")
    key = int(os.environ.get(KILL_POINTS_ENV) or random.randrange(2**31))
    rng = random.Random(key * 1000 + every)
    plan = [(rng.randint(*KILL_AFTER), rng.choice(PHASES)) for _ in range(KILLS)]
    path = tmp_path / "copy-job.json"
    holds: list[tuple[int, str]] = []
    with Fleet(max_seconds=60) as fleet:
        fleet.start("job", copy_two_partitions, server.url, job_namespace, str(path), every)
        for after, phase in plan:
            started = fleet.wait_for("the job started", lambda e: e["ev"] == "started", wid="job")
            hold_at = kill_point(started["position"] // PER_BATCH, after, every)
            assert hold_at < BATCHES - 1, (hold_at, plan)
            holds.append((hold_at, phase))
            fleet.send("job", ("run", hold_at, phase))
            fleet.wait_for(f"the job held at {hold_at}", lambda e: e["ev"] == "holding", wid="job")
            fleet.kill("job")
            fleet.respawn("job")
        fleet.wait_for("the job started", lambda e: e["ev"] == "started", wid="job")
        fleet.send("job", ("run", None, None))
        fleet.wait_for("the job is done", lambda e: e["ev"] == "done", wid="job")
        assert fleet.finish("job") == 0
    lives = fleet.lives
    print(
        f"\n[every {every}] kill points from random.Random({key} * 1000 + {every}) "
        f"({KILL_POINTS_ENV}={key} repeats them): held at (batch, phase) {holds}"
    )

    # What each life did: where it started, batches sent (first time or answered from the
    # window) and skipped as older than the window.
    inputs = copy_input()
    for life in lives:
        (started,) = life.of("started")
        ends = started["ends"]
        sent = life.of("sent")
        answered = sum(1 for e in sent if e["offsets"][0] < ends[partition_of(e["batch"])])
        print(
            f"  life {life.life}: exit {life.exitcode}, from batch "
            f"{started['position'] // PER_BATCH} (log ends {ends}): {len(sent) - answered} "
            f"new, {answered} answered from the window, {len(life.of('skipped'))} older than "
            "the window: " + _runs([(e["batch"], e["ev"]) for e in life.of("sent", "skipped")])
        )

    # Each partition: its input, once, in order, at offsets 0.. (read back from Redis).
    client = fencing.Client.from_url(server.url, namespace=job_namespace)
    try:
        for p in range(PARTITIONS):
            check_exactly_once(client, COPIED, p, expected_partition(inputs, p))
        attempts = [
            Attempt(v, partition_of(e["batch"]), "acked", offset, epoch)
            for life in lives
            for e in life.of("sent")
            for v, offset, epoch in zip(
                inputs[e["batch"] * PER_BATCH : (e["batch"] + 1) * PER_BATCH],
                e["offsets"],
                e["epochs"],
                strict=True,
            )
        ]
        report = verify_log(client, COPIED, attempts=attempts, exclusive=True, unique_values=True)
    finally:
        client.close()
    print(report.summary(max_segments=3))
    assert report.ok, report.summary()

    # Every life but the last was killed where it held; the last one finished the input.
    assert [life.exitcode for life in lives] == [-signal.SIGKILL] * KILLS + [0]
    assert [(e["batch"], e["phase"]) for life in lives for e in life.of("holding")] == holds
    assert [e["position"] for e in lives[-1].of("done")] == [RECORDS]

    # Every send, first or resent, got the batch's own offsets; every skip named the
    # batch's own sequences.
    for life in lives:
        for e in life.of("sent"):
            b = e["batch"]
            assert (e["partitions"], e["offsets"]) == (
                [partition_of(b)],
                list(range(first_of(b), first_of(b) + PER_BATCH)),
            ), e
        for e in life.of("skipped"):
            b = e["batch"]
            assert (e["partition"], e["sequences"]) == (
                partition_of(b),
                [first_of(b), first_of(b) + PER_BATCH - 1],
            ), e
    # Each restart began at the last save of the life before and handled every batch from
    # there: those with WINDOW later batches of their partition written (up to the furthest
    # batch held at so far) skipped as older than the window, the rest sent; where the saves
    # are more than BEYOND_WINDOW batches apart, every restart began with a skip.
    for previous, life in itertools.pairwise(lives):
        start = life.of("started")[0]["position"] // PER_BATCH
        assert start * PER_BATCH == previous.of("started", "saved")[-1]["position"]
        handled = [e["batch"] for e in life.of("sent", "skipped")]
        assert handled == list(range(start, handled[-1] + 1)), handled
        held = max(e["batch"] for w in lives[: life.life] for e in w.of("holding"))
        skipped = [e["batch"] for e in life.of("skipped")]
        older = [b for b in handled if (held - b) // PARTITIONS >= WINDOW]
        assert skipped == older, (start, held, skipped)
    if every > BEYOND_WINDOW + 1:
        assert all(life.of("skipped") for life in lives[1:])


# -- the same in one process: a resume from a save older than the window -------------------------

WEDGED = "resent"
#: Input batches (of PER_BATCH records), batches written before the crash, and the batch
#: the saved position points at.
INPUT_BATCHES, WRITTEN_BATCHES, SAVED_AT = 40, 28, 6


def test_a_resume_from_a_save_older_than_the_window_skips_those_batches_and_goes_on(
    server: ServerInfo, namespace: str, client: fencing.Client
) -> None:
    """28 batches written, (position, state) saved after the 6th, then a crash; the resumed
    producer resends batches 6..27: 6..22 are older than the window (written before: the
    job skips each), 23..27 are answered with their original offsets, and the 12 batches
    after them are written next, each once."""
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for this sequence: redis")
    inputs = [b"value-%03d" % i for i in range(INPUT_BATCHES * PER_BATCH)]

    def batch(b: int) -> list[bytes]:
        return inputs[b * PER_BATCH : (b + 1) * PER_BATCH]

    def offsets(b: int) -> tuple[int, int]:
        return b * PER_BATCH, (b + 1) * PER_BATCH - 1

    crashed = fencing.Client.from_url(server.url, namespace=namespace)
    try:
        producer = crashed.topic(WEDGED, partitions=1).producer()
        saved: tuple[int, str] | None = None
        for b in range(WRITTEN_BATCHES):
            if b == SAVED_AT:
                saved = (b * PER_BATCH, producer.state.to_json())
            mds = producer.send_batch(batch(b), partition=0)
            assert [m.offset for m in mds] == list(range(b * PER_BATCH, (b + 1) * PER_BATCH))
    finally:
        crashed.close()  # a crash: the producer is never closed, its connections are gone
    assert saved is not None
    position, state = saved

    resumed = client.topic(WEDGED).producer(resume=ProducerState.from_json(state))
    outcomes: list[tuple[int, str, int, int]] = []
    after_resend: list[bytes] = []
    for b in range(position // PER_BATCH, INPUT_BATCHES):
        try:
            mds = resumed.send_batch(batch(b), partition=0)
        except fencing.DuplicateSequence as exc:
            # older-than-window: written before, skip it; any other reason shows below.
            outcomes.append((b, exc.reason, exc.first_sequence, exc.last_sequence))
        else:
            outcomes.append((b, "offsets", mds[0].offset, mds[-1].offset))
        if b == WRITTEN_BATCHES - 1:
            after_resend = read_values(client, WEDGED, 0)
    resumed.close()
    print(
        "\nresent and sent on: "
        + "; ".join(
            f"{b} {what} {first}-{last}"
            for b, what, first, last in outcomes
            if b in (SAVED_AT, 22, 23, 27, 28, INPUT_BATCHES - 1)
        )
        + f"\nlog after the resend: {len(after_resend)} records; "
        f"at the end: {len(read_values(client, WEDGED, 0))} of {len(inputs)}"
    )

    # The resend of 6..27 leaves the 280 records once each, in order.
    assert after_resend == inputs[: WRITTEN_BATCHES * PER_BATCH]
    # 6..22: older than the window, each naming its own sequences; 23..27 (the window):
    # their original offsets; 28..39: written next, at the offsets after them.
    window_starts = WRITTEN_BATCHES - WINDOW
    assert outcomes == [
        (b, "older-than-window", *offsets(b)) for b in range(SAVED_AT, window_starts)
    ] + [(b, "offsets", *offsets(b)) for b in range(window_starts, INPUT_BATCHES)]
    records = check_exactly_once(client, WEDGED, 0, inputs)
    assert len({r.producer_id for r in records}) == 1
    report = verify_log(client, WEDGED, exclusive=True, unique_values=True)
    assert report.ok, report.summary()

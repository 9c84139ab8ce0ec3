"""Copy a database table into a topic exactly once, across crashes (a mirror maker).

The source is a SQLite table ``source(id, key, value)`` read in ``id`` order; the
destination is partition 0 of a one-partition topic (one partition keeps the source's order,
so row ``n`` of the table lands at offset ``n - 1``). Each step of the job:

1. sends the next batch of rows with ``producer.send_batch`` (idempotent by default: the
   batch carries the producer's PID, generation and sequence range);
2. then saves, **in one SQLite transaction** in the same database, the input position (the
   last row id copied), ``producer.state.to_json()`` and the bounds of the next batch.

On start it loads that checkpoint, opens ``topic.producer(resume=state)`` and sends again
from the saved position. ``resume=`` opens a new incarnation of the same PID: the PID
generation is bumped, so an older copy of the job that is still running (a paused VM, a
process someone forgot) is fenced and none of its sends can land any more.

Why saving *after* the send is safe: the server keeps, per producer and partition, the last
batches it accepted (PID, sequence range, a digest of the records, offsets): the topic's
duplicate window, 5 batches unless the topic was created with ``dedup_window=``. The job
saves after every send, so when it crashes at most one batch was sent and not saved. The
restarted job sends that batch again with the saved state, that is with the very same PID,
sequence numbers and records; it is found in the window and the server returns the offsets
it got the first time instead of appending it again. Every other batch either was saved (and
is not sent again) or was never sent. So the output is the input, once, in order — the
network-retry case and the crash case are the same case.

A job that saves less often than every batch resends more than one: those still in the
window are answered with their original offsets, and an older one raises
``DuplicateSequence`` with ``reason="older-than-window"`` (written before, nothing written
now); the job skips it and the producer goes on after it. So any save cadence finishes
exactly once.

Two details make this hold:

- A resent batch must be *exactly* the batch that may have landed (same rows, same sequence
  range, same checksum), else the server refuses it with ``DuplicateSequence``. So each save
  also fixes the next batch's last row id: after a restart the first batch is the planned
  one, even if ``--batch`` changed or rows were added to the table meanwhile.
- On a fresh start (no checkpoint yet) the job saves the new producer's state *before* its
  first send. Otherwise a crash between the first send and the first save would leave no
  saved state, and the next run would take a new PID and append the first batch again.

The checkpoint row also carries the PID generation, and a save only happens while the stored
generation is not higher than the job's own (``UPDATE ... WHERE generation <= ?``): an older
incarnation that wakes up after a newer one took over can neither send (fenced by the
server) nor move the checkpoint back (fenced by the database).

The source is assumed append-only (rows are never changed or deleted, new rows get higher
ids), and one job runs per (database, namespace, topic).

Usage (``FENCING_REDIS_URL`` is used when ``--url`` is absent, ``FENCING_NAMESPACE`` picks
the key prefix)::

    python examples/copy_job.py --db /tmp/copy.db --topic mirror --seed-rows 300 --crash-after 2
    python examples/copy_job.py --db /tmp/copy.db --topic mirror      # resumes and finishes

Exit status: 0 when every row is copied, 1 for a ``--crash-after`` crash, 2 on an error.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis.exceptions

import fencing

PARTITION = 0
_PROGRESS_EVERY = 1.0  # seconds between progress lines (the first and deduplicated always show)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS source (
    id    INTEGER PRIMARY KEY,
    key   TEXT NOT NULL,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS copy_checkpoint (
    namespace      TEXT NOT NULL,
    topic          TEXT NOT NULL,
    position       INTEGER NOT NULL,   -- last source id copied (0: none)
    next_end       INTEGER,            -- last source id of the next batch (NULL: not planned)
    generation     INTEGER NOT NULL,   -- PID generation of the job that saved this row
    producer_state TEXT NOT NULL,      -- fencing.ProducerState.to_json()
    PRIMARY KEY (namespace, topic)
);
"""


class CheckpointFenced(fencing.FencingError):
    """A newer incarnation of this copy job saved a checkpoint: this one must stop."""


@dataclass(frozen=True)
class Row:
    """One source row, and the record it becomes."""

    id: int
    key: str
    value: str

    def record(self) -> fencing.Record:
        """The row as a record: its key and value, and its id in a header for tracing."""
        return fencing.Record(
            value=self.value.encode(),
            key=self.key.encode(),
            headers={"source-id": str(self.id).encode()},
        )


@dataclass
class Checkpoint:
    """What the job saved: input position, next batch bounds, producer state."""

    position: int
    next_end: int | None
    generation: int
    state: fencing.ProducerState


def demo_row(row_id: int) -> Row:
    """The demo table's row ``row_id`` (deterministic, so tests can rebuild it)."""
    amount = (row_id * 7919) % 100_000
    return Row(row_id, f"account-{row_id % 10}", json.dumps({"id": row_id, "cents": amount}))


# -- the source database ------------------------------------------------------------------------


def connect(db: Path) -> sqlite3.Connection:
    """Open the job's database and create its tables if needed."""
    conn = sqlite3.connect(db, timeout=30.0)
    conn.executescript(_SCHEMA)
    return conn


def seed_rows(conn: sqlite3.Connection, n: int) -> int:
    """Make sure demo rows 1..n exist (rows already there are kept); returns rows added."""
    with conn:
        before = conn.total_changes
        conn.executemany(
            "INSERT OR IGNORE INTO source (id, key, value) VALUES (?, ?, ?)",
            ((r.id, r.key, r.value) for r in map(demo_row, range(1, n + 1))),
        )
        return conn.total_changes - before


def plan_next(conn: sqlite3.Connection, position: int, batch: int) -> int | None:
    """The last id of the batch after ``position`` (up to ``batch`` rows), or None if none."""
    row = conn.execute(
        "SELECT max(id) FROM (SELECT id FROM source WHERE id > ? ORDER BY id LIMIT ?)",
        (position, batch),
    ).fetchone()
    return None if row[0] is None else int(row[0])


def rows_between(conn: sqlite3.Connection, after: int, up_to: int) -> list[Row]:
    """The rows with ``after < id <= up_to``, in id order."""
    cursor = conn.execute(
        "SELECT id, key, value FROM source WHERE id > ? AND id <= ? ORDER BY id", (after, up_to)
    )
    return [Row(int(i), str(k), str(v)) for i, k, v in cursor]


def count_upto(conn: sqlite3.Connection, position: int) -> tuple[int, int]:
    """(rows copied, rows in the table) for a saved position."""
    done, total = conn.execute(
        "SELECT (SELECT count(*) FROM source WHERE id <= ?), (SELECT count(*) FROM source)",
        (position,),
    ).fetchone()
    return int(done), int(total)


# -- the checkpoint -----------------------------------------------------------------------------


class Checkpoints:
    """The job's checkpoint row in the source database, keyed by (namespace, topic).

    Every write is one SQLite transaction that also plans the next batch, and is conditional
    on the stored PID generation (``generation <= ?``): the database-side fencing token, so
    a job superseded by a newer incarnation cannot move the checkpoint back.
    """

    def __init__(self, conn: sqlite3.Connection, namespace: str, topic: str, batch: int) -> None:
        self.conn = conn
        self.where = (namespace, topic)
        self.topic = topic
        self.batch = batch

    def load(self) -> Checkpoint | None:
        """The saved checkpoint of this job, if any."""
        row = self.conn.execute(
            "SELECT position, next_end, generation, producer_state FROM copy_checkpoint "
            "WHERE namespace = ? AND topic = ?",
            self.where,
        ).fetchone()
        if row is None:
            return None
        position, next_end, generation, state = row
        saved = fencing.ProducerState.from_json(state)
        return Checkpoint(int(position), next_end, int(generation), saved)

    def create(self, state: fencing.ProducerState) -> Checkpoint:
        """The first checkpoint of a fresh job, saved before its first send (see the top)."""
        with self.conn:
            next_end = plan_next(self.conn, 0, self.batch)
            try:
                self.conn.execute(
                    "INSERT INTO copy_checkpoint "
                    "(namespace, topic, position, next_end, generation, producer_state) "
                    "VALUES (?, ?, 0, ?, ?, ?)",
                    (*self.where, next_end, state.generation, state.to_json()),
                )
            except sqlite3.IntegrityError:
                raise CheckpointFenced(
                    f"another copy job to topic {self.topic!r} saved a checkpoint while this "
                    "one started: run one job per topic; start again to resume from it"
                ) from None
        return Checkpoint(0, next_end, state.generation, state)

    def save(self, position: int, state: fencing.ProducerState) -> Checkpoint:
        """Save the position, the producer state and the next batch's bounds, together."""
        with self.conn:  # one transaction: the position and the producer state move together
            next_end = plan_next(self.conn, position, self.batch)
            cursor = self.conn.execute(
                "UPDATE copy_checkpoint SET position = ?, next_end = ?, generation = ?, "
                "producer_state = ? WHERE namespace = ? AND topic = ? AND generation <= ?",
                (position, next_end, state.generation, state.to_json(), *self.where,
                 state.generation),
            )  # fmt: skip
            self._check_fenced(cursor)
        return Checkpoint(position, next_end, state.generation, state)

    def plan(self, saved: Checkpoint, generation: int) -> Checkpoint:
        """Fix the next batch's bounds when the last save found no rows after it.

        Saved before the send, like every plan, so a resend after a crash is the same batch.
        """
        with self.conn:
            next_end = plan_next(self.conn, saved.position, self.batch)
            cursor = self.conn.execute(
                "UPDATE copy_checkpoint SET next_end = ? "
                "WHERE namespace = ? AND topic = ? AND generation <= ?",
                (next_end, *self.where, generation),
            )
            self._check_fenced(cursor)
        return Checkpoint(saved.position, next_end, saved.generation, saved.state)

    def _check_fenced(self, cursor: sqlite3.Cursor) -> None:
        if cursor.rowcount != 1:
            raise CheckpointFenced(
                f"a newer copy job to topic {self.topic!r} took over (its checkpoint has a "
                "higher PID generation): this one stops; nothing it sent is lost or duplicated"
            )


# -- the job ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one run did."""

    rows_copied: int
    rows_total: int
    batches_sent: int
    batches_already_there: int
    next_offset: int


def say(text: str) -> None:
    """A progress line, flushed at once (a ``--crash-after`` exit skips buffered output)."""
    print(f"copy_job: {text}", flush=True)


def run(
    client: fencing.Client,
    conn: sqlite3.Connection,
    topic_name: str,
    batch: int,
    crash_after: int | None = None,
) -> Outcome:
    """Copy every row after the saved position into the topic; see the module docstring.

    >>> client = fencing.Client.from_url("redis://localhost:6379/0")      # doctest: +SKIP
    >>> run(client, connect(Path("copy.db")), "mirror", batch=50)          # doctest: +SKIP
    Outcome(rows_copied=300, rows_total=300, batches_sent=6, ...)
    """
    checkpoints = Checkpoints(conn, client.namespace, topic_name, batch)
    topic = client.topic(topic_name, partitions=1)
    saved = checkpoints.load()
    if saved is None:
        producer = topic.producer()
        saved = checkpoints.create(producer.state)
        say(f"fresh start: producer id {producer.producer_id}, state saved before the first send")
    else:
        # A new incarnation of the saved PID: fences any older copy of this job still running.
        producer = topic.producer(resume=saved.state)
        say(
            f"resuming after source id {saved.position} as producer id {producer.producer_id}, "
            f"generation {producer.state.generation}"
        )
    # Offsets below this were written before this run: a send that returns one was a batch
    # that had landed before a crash, deduplicated by the server.
    log_end = topic.offsets(PARTITION)[1]
    sent = already = 0
    last_print = 0.0
    try:
        while True:
            if saved.next_end is None:
                saved = checkpoints.plan(saved, producer.state.generation)
                if saved.next_end is None:
                    break  # nothing after the saved position: done
            rows = rows_between(conn, saved.position, saved.next_end)
            if not rows:
                raise sqlite3.DataError(
                    f"source rows {saved.position + 1}..{saved.next_end} vanished: the source "
                    "table must be append-only for an exactly-once copy"
                )
            try:
                mds = producer.send_batch([r.record() for r in rows], partition=PARTITION)
            except fencing.DuplicateSequence as exc:
                if exc.reason != "older-than-window":
                    raise
                # Written before, older than the window: skip it (nothing was written).
                say(f"source ids {rows[0].id}..{rows[-1].id} were copied before: skipped")
                saved = checkpoints.save(rows[-1].id, producer.state)
                continue
            sent += 1
            first, last = mds[0].offset, mds[-1].offset
            was_there = first < log_end
            already += was_there
            now = time.monotonic()
            if was_there or sent == 1 or now - last_print >= _PROGRESS_EVERY:
                last_print = now
                note = " (already there: original offsets returned)" if was_there else ""
                say(f"sent source ids {rows[0].id}..{rows[-1].id} -> offsets {first}..{last}{note}")
            if crash_after is not None and sent == crash_after:
                say(f"crashing after send {sent}, before saving it (--crash-after {crash_after})")
                os._exit(1)  # no cleanup, no save: as if the machine died here
            saved = checkpoints.save(rows[-1].id, producer.state)
    finally:
        producer.close()
    done, total = count_upto(conn, saved.position)
    return Outcome(done, total, sent, already, topic.offsets(PARTITION)[1])


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; see the module docstring."""
    parser = argparse.ArgumentParser(
        description="Copy a SQLite table into a redis-fencing topic exactly once, across crashes."
    )
    parser.add_argument("--db", required=True, type=Path, help="SQLite file (source + checkpoint)")
    parser.add_argument("--topic", required=True, help="destination topic (one partition)")
    parser.add_argument("--url", default=None, help="Redis URL (default: FENCING_REDIS_URL)")
    parser.add_argument("--batch", type=int, default=50, help="rows per batch (default 50)")
    parser.add_argument(
        "--seed-rows",
        type=int,
        default=None,
        metavar="N",
        help="first make sure demo rows 1..N exist in the source table",
    )
    parser.add_argument(
        "--crash-after",
        type=int,
        default=None,
        metavar="K",
        help="exit(1) right after the K-th send of this run, before saving it",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.batch <= 1000:
        parser.error("--batch must be between 1 and 1000 (the library's batch cap)")
    if args.crash_after is not None and args.crash_after < 1:
        parser.error("--crash-after must be >= 1")
    conn = connect(args.db)
    try:
        if args.seed_rows is not None:
            added = seed_rows(conn, args.seed_rows)
            say(f"seeded the source table: {added} rows added ({args.seed_rows} wanted)")
        with fencing.Client.from_url(args.url) as client:
            outcome = run(client, conn, args.topic, args.batch, args.crash_after)
    except (fencing.FencingError, redis.exceptions.RedisError, sqlite3.Error) as exc:
        print(f"copy_job: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        conn.close()
    say(
        f"done: {outcome.rows_copied} of {outcome.rows_total} rows copied to topic "
        f"{args.topic!r}; this run sent {outcome.batches_sent} batches, "
        f"{outcome.batches_already_there} already there; next offset {outcome.next_offset}"
    )
    return 0 if outcome.rows_copied == outcome.rows_total else 2


if __name__ == "__main__":
    sys.exit(main())

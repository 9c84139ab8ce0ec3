"""The reference model of the retries explorer (:mod:`tests.support.retries_explorer`):
copy jobs writing rows once each through producers that lose replies, crash and resume.

A *job* copies its own rows (``j3-r0017``...) into the one partition of a topic, in
batches. Per producer id (PID) the model keeps the batches that consumed its sequences, in
sequence order (``Lineage.landed``): a producer resumed from a saved state resends those
after the state's cursor with the same boundaries, and each resend must be answered with
its original offsets while it is among the PID's last ``window`` batches, else refused as
older than the window; it is never written again. Rows whose batch did not land go back to
the job's ``todo`` and are sent again as new rows. A job may send its rows with their input
position as message id; starting over with no saved state it resends them all, and each id
the partition still knows (the last ``id_window`` appended) is answered as its original: a
row is in the log twice only if its id had left that window when it was resent.

>>> model = Model(window=3, expiry=1.0)
>>> job = model.new_job(named=True)
>>> batch = job.take_new(2)                 # rows j0-r0000, j0-r0001
>>> model.check_log(records)                # after every step         # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import fencing
from fencing.verify import Attempt


class Finding(AssertionError):
    """What the explorer found: an answer or a log the model says is wrong."""


@dataclass
class Batch:
    """Rows sent as one batch; ``offsets`` once known (acked or resolved as landed)."""

    rows: tuple[bytes, ...]
    offsets: list[int] | None = None
    #: Which landed batch of its PID it is (its place in the PID's sequences), or None while
    #: it is new.
    index: int | None = None
    #: When it was last sent (monotonic): when it may have written its PID's state.
    sent_at: float = field(default_factory=time.monotonic)


@dataclass
class Lineage:
    """The batches one PID wrote, in sequence order, and when it last wrote (monotonic)."""

    pid: int
    landed: list[Batch] = field(default_factory=list)
    last_write: float = field(default_factory=time.monotonic)
    #: Landed batches written after the PID was idle for half its expiry or more: its state
    #: may have expired and started anew with them, forgetting the window before them.
    restarts: list[int] = field(default_factory=list)


@dataclass
class Saved:
    """A saved ``ProducerState`` and how many of its PID's landed batches it stands after."""

    state: fencing.ProducerState
    cursor: int


@dataclass
class Job:
    """One copy job: its rows, its producer (None after a crash) and what it saved."""

    number: int
    name: str | None
    todo: deque[bytes] = field(default_factory=deque)
    made: int = 0
    producer: Any = None
    pid: int | None = None
    #: The next of the lineage's landed batches the producer stands at (below: resends).
    cursor: int = 0
    pending: Batch | None = None
    saves: list[Saved] = field(default_factory=list)
    #: Resumed from a state its PID may have outlived (expired, then started anew): its
    #: resends may be refused for any reason, as long as none is written again.
    loose: bool = False
    #: Its rows carry their input position as application message id.
    ids: bool = False

    def records(self, rows: tuple[bytes, ...]) -> list[Any]:
        """What the job sends for ``rows``: with their ids when it has them."""
        if not self.ids:
            return list(rows)
        return [fencing.Record(row, message_id=row.decode()) for row in rows]

    def take_new(self, n: int) -> Batch:
        """The next ``n`` rows not written yet (rows that did not land come first)."""
        while len(self.todo) < n:
            self.todo.append(b"j%d-r%04d" % (self.number, self.made))
            self.made += 1
        return Batch(tuple(self.todo.popleft() for _ in range(n)))


class Model:
    """What every answer and the log must be (see the module doc)."""

    def __init__(self, *, window: int, expiry: float, id_window: int = 10_000) -> None:
        self.window = window
        self.expiry = expiry
        #: How many message ids the partition keeps (the last appended).
        self.id_window = id_window
        #: Rows written again because their id had left the id window when resent: the
        #: offsets of those later copies (the only rows allowed in the log twice).
        self.copies: dict[bytes, list[int]] = {}
        self.jobs: list[Job] = []
        self.lineages: dict[int, Lineage] = {}
        #: Where each row landed, once known.
        self.placed: dict[bytes, int] = {}
        #: What the writers were told, for fencing.verify.
        self.attempts: list[Attempt] = []
        #: Values a fenced producer tried to write: never in the log.
        self.fenced_values: list[bytes] = []

    # -- jobs and lineages ----------------------------------------------------------------

    def new_job(self, *, named: bool, ids: bool = False) -> Job:
        number = len(self.jobs)
        job = Job(number, f"job{number}" if named else None, ids=ids)
        self.jobs.append(job)
        return job

    def lineage(self, pid: int) -> Lineage:
        return self.lineages.setdefault(pid, Lineage(pid))

    def adopt(self, job: Job, pid: int, cursor: int | None = None) -> None:
        """The job's producer writes as ``pid`` from its lineage's ``cursor`` on (its end
        when None: nothing to resend)."""
        lineage = self.lineage(pid)
        job.pid = pid
        job.cursor = len(lineage.landed) if cursor is None else cursor
        job.loose = self.may_have_expired(pid) or any(k >= job.cursor for k in lineage.restarts)

    def resends(self, job: Job) -> list[Batch]:
        """The batches the job's producer must resend before new rows."""
        if job.pid is None:
            return []
        return self.lineage(job.pid).landed[job.cursor :]

    def in_window(self, job: Job, batch: Batch) -> bool:
        """Whether a resend of ``batch`` must be answered from the window: among the PID's
        last ``window`` batches, and no later batch may have started an expired state anew."""
        assert job.pid is not None and batch.index is not None
        lineage = self.lineage(job.pid)
        if any(k > batch.index for k in lineage.restarts):
            return False
        return len(lineage.landed) - batch.index <= self.window

    def outlived(self, saved: Saved) -> bool:
        """Whether the state ``saved`` was saved against may be gone: expired, or expired
        and started anew by a batch written after the save (resuming it is then refused)."""
        pid = saved.state.producer_id
        return self.may_have_expired(pid) or any(
            k >= saved.cursor for k in self.lineage(pid).restarts
        )

    def may_have_expired(self, pid: int | None) -> bool:
        """Whether the PID's state may have expired (its last write half the expiry ago)."""
        if pid is None:
            return False
        return time.monotonic() - self.lineage(pid).last_write >= self.expiry / 2

    # -- outcomes -------------------------------------------------------------------------

    def landed(self, job: Job, batch: Batch, mds: list[fencing.RecordMetadata]) -> None:
        """A batch was answered with ``mds``: a new batch lands in the job's lineage (the
        producer's PID may be a fresh one, its state having expired while idle); a resend
        must be answered with its original offsets."""
        self._acked(batch, mds)
        if batch.index is None and any(md.duplicate for md in mds):
            raise Finding(f"new batch {_show(batch)} answered as a duplicate of {mds}")
        self._landed(job, batch, [m.offset for m in mds])

    def _landed(self, job: Job, batch: Batch, offsets: list[int]) -> None:
        if batch.index is not None:
            if offsets != batch.offsets:
                raise Finding(
                    f"resend of {_show(batch)} answered at {offsets}, not its original "
                    f"offsets {batch.offsets}"
                )
            job.cursor = batch.index + 1
            return
        if offsets != list(range(offsets[0], offsets[0] + len(batch.rows))):
            raise Finding(f"new batch {_show(batch)} answered at {offsets}")
        pid = job.producer.producer_id
        if pid != job.pid or job.cursor != len(self.lineage(pid).landed):
            if pid == job.pid:
                raise Finding(
                    f"new batch {_show(batch)} written with {len(self.resends(job))} "
                    "resends still due: the producer skipped sequences"
                )
            self.adopt(job, pid)  # a fresh PID (the old one's state expired while idle)
        lineage = self.lineage(pid)
        batch.offsets, batch.index = offsets, len(lineage.landed)
        if batch.sent_at - lineage.last_write >= self.expiry / 2:
            lineage.restarts.append(batch.index)
        lineage.landed.append(batch)
        lineage.last_write = max(lineage.last_write, batch.sent_at)
        job.cursor = len(lineage.landed)

    def _acked(self, batch: Batch, mds: list[fencing.RecordMetadata]) -> None:
        for row, md in zip(batch.rows, mds, strict=True):
            self.attempts.append(Attempt(row, 0, "acked", md.offset, md.epoch))
            known = self.placed.setdefault(row, md.offset)
            if known != md.offset:
                raise Finding(f"row {row!r} acked at offset {md.offset}, written at {known}")

    def skipped(self, job: Job, batch: Batch) -> None:
        """A resend refused as older than the window: it must be, and the job goes on."""
        if batch.index is None:
            raise Finding(f"new batch {_show(batch)} refused as older than the window")
        if self.in_window(job, batch) and not job.loose:
            raise Finding(
                f"resend of {_show(batch)} refused as older than the window while "
                f"among the last {self.window} batches of PID {job.pid}"
            )
        job.cursor = batch.index + 1

    def not_landed(self, job: Job, batch: Batch, log: dict[bytes, int]) -> None:
        """A new batch that did not land (refused, or resolved as never landing): none of
        its rows is in the log, and they go first among the job's rows to send."""
        if batch.index is not None:
            raise Finding(
                f"resend of {_show(batch)} resolved as not landed: its records are in the log"
            )
        there = [row for row in batch.rows if row in log]
        if there:
            raise Finding(
                f"batch {_show(batch)} said not to have landed, but {there} are in the log"
            )
        job.todo.extendleft(reversed(batch.rows))

    def unknown(self, job: Job, batch: Batch) -> None:
        """The batch's outcome is unknown: it is pending on the job's producer."""
        self.attempts.extend(Attempt(row, 0, "unknown") for row in batch.rows)
        job.pending = batch

    def reconcile(self, job: Job, log: dict[bytes, int]) -> None:
        """The job's producer is gone with a batch pending: the log says whether it landed."""
        batch, job.pending = job.pending, None
        if batch is None or batch.index is not None:
            return  # a resend: it is still due from the lineage
        if all(row in log for row in batch.rows):
            offsets = [log[row] for row in batch.rows]
            self.placed.update(zip(batch.rows, offsets, strict=True))
            self._landed(job, batch, offsets)
        else:
            self.not_landed(job, batch, log)

    def recovered(self, job: Job, log: dict[bytes, int]) -> None:
        """The job starts over from the log (no saved state it can use): rows of its new
        batches that are not in the log are sent again; nothing is resent."""
        self.reconcile(job, log)
        job.pid = None
        job.cursor = 0

    # -- message ids ----------------------------------------------------------------------

    def known_ids(self, records: list[fencing.Record]) -> dict[bytes, int]:
        """The rows whose id the partition still knows (among the last ``id_window``
        records appended with an id) and the offset of their latest copy."""
        with_ids = [r for r in records if r.message_id is not None]
        return {r.value: r.offset for r in with_ids[max(0, len(with_ids) - self.id_window) :]}

    def resent_by_id(
        self, rows: tuple[bytes, ...], known: dict[bytes, int], log: dict[bytes, int], answer: Any
    ) -> list[int]:
        """Check the answer to ``rows`` resent with their ids by a producer with no state:
        every known id answered with its latest copy's offset (``duplicate`` set), a call
        with some known refused whole (DuplicateMessageId naming exactly those), none known
        written once more - a row already in the log only if its id had left the window.
        Returns the indexes of the rows the call did not settle (to send again)."""
        at = [i for i, row in enumerate(rows) if row in known]
        if isinstance(answer, fencing.DuplicateMessageId):
            if not at or len(at) == len(rows) or sorted(answer.known) != at:
                raise Finding(f"DuplicateMessageId naming {sorted(answer.known)}, known {at}")
            if any(answer.known[i].offset != known[rows[i]] for i in at):
                raise Finding(f"DuplicateMessageId with other offsets than {known}")
            return [i for i in range(len(rows)) if i not in at]
        if not isinstance(answer, list):
            raise Finding(f"a resend by id answered {answer!r}")
        got = [(md.offset, md.duplicate) for md in answer]
        if len(at) == len(rows):
            if got != [(known[row], True) for row in rows]:
                raise Finding(f"resend by id of {rows} answered {got}, known at {known}")
            return []
        first = got[0][0]
        if at or got != [(first + i, False) for i in range(len(rows))]:
            raise Finding(f"resend by id of {rows} ({at} known) answered {got}")
        for row, md in zip(rows, answer, strict=True):
            if row in log:  # its id had left the window: written again, as allowed
                self.copies.setdefault(row, []).append(md.offset)
            else:
                self.placed[row] = md.offset
                self.attempts.append(Attempt(row, 0, "acked", md.offset, md.epoch))
        return []

    # -- the log --------------------------------------------------------------------------

    def check_log(self, records: list[fencing.Record]) -> dict[bytes, int]:
        """Every row at most once, at the offset it was acked at; offsets contiguous from 0;
        no value of a fenced producer. Returns {row: offset}."""
        offsets = [r.offset for r in records]
        if offsets != list(range(len(records))):
            raise Finding(f"log offsets are not 0..{len(records) - 1}: {offsets[:20]}...")
        counts = Counter(r.value for r in records)
        twice = sorted(v for v, n in counts.items() if n > 1 + len(self.copies.get(v, ())))
        if twice:
            raise Finding(
                f"{len(twice)} rows written more than once, first {twice[:6]} "
                f"({len(records)} records for {len(counts)} rows)"
            )
        log: dict[bytes, int] = {}
        for r in records:
            assert r.offset is not None
            log.setdefault(r.value, r.offset)  # (its first copy: a row's original)
        for row, later in self.copies.items():
            if any(records[k].value != row for k in later):
                raise Finding(f"row {row!r} written again at {later}: the log differs")
        for row, offset in self.placed.items():
            if log.get(row) != offset:
                raise Finding(f"row {row!r} acked at offset {offset}, log has {log.get(row)}")
        fenced = [v for v in self.fenced_values if v in log]
        if fenced:
            raise Finding(f"values of fenced sends are in the log: {fenced[:3]}")
        return log

    def check_complete(self, records: list[fencing.Record]) -> None:
        """After the last step: every row any job made is in the log, once."""
        log = self.check_log(records)
        made = {b"j%d-r%04d" % (j.number, i) for j in self.jobs for i in range(j.made)}
        missing = sorted(made - set(log))
        extra = sorted(set(log) - made)
        if missing or extra:
            raise Finding(f"rows missing from the log: {missing[:6]}; unknown rows: {extra[:6]}")


def _show(batch: Batch) -> str:
    first, last = batch.rows[0].decode(), batch.rows[-1].decode()
    return f"[{first}..{last}]" if len(batch.rows) > 1 else f"[{first}]"

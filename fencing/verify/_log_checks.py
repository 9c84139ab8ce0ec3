"""The checks along each partition's log, fed its entries in log order: G6 (every offset
from start to next - 1 once, in order, well formed) and G1 (epochs never decrease, one
writer per epoch, one segment per epoch, none above the current epoch), with G2 for records
of a superseded epoch. Within an epoch the producer id may change (its one writer took a
fresh PID after its state expired while idle) but never come back: that is two writers.

>>> checks = LogChecks(exclusive=True, violations=[])
>>> checks.begin(0, {b"start": b"0", b"next": b"1"}, "hash", b"1")
>>> checks.entry(b"0-1", {b"e": b"1", b"p": b"7", b"v": b"x"})
(0, 1)
>>> checks.end()
>>> checks.segments
[Segment(partition=0, epoch=1, producer_id='7', first_offset=0, last_offset=0, records=1)]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ._model import Segment, Violation
from ._values import entry_offset, offset_field, offsets, to_int


@dataclass
class _Run:
    epoch: int
    producer: str
    first: int
    last: int
    records: int = 1


@dataclass
class _Partition:
    """What the checks hold for the partition being scanned: O(epochs + segments)."""

    index: int
    start: int | None
    next: int | None
    token: int
    expect: int | None
    run: _Run | None = None
    max_epoch: int | None = None
    epoch_first: dict[int, int] = dataclasses.field(default_factory=dict)
    epoch_producers: dict[int, set[str]] = dataclasses.field(default_factory=dict)


class LogChecks:
    """Fed each partition in turn (:meth:`begin`, :meth:`entry` per entry, :meth:`end`);
    appends what is broken to ``violations`` and collects the segments.

    ``exclusive`` says the partitions were written only by exclusive producers (G1 applies).
    """

    def __init__(self, *, exclusive: bool, violations: list[Violation]) -> None:
        self.exclusive = exclusive
        self.violations = violations
        self.segments: list[Segment] = []
        self.records = 0
        self.interleavings = 0
        #: The first retained offset of each partition whose metadata could be read.
        self.starts: dict[int, int] = {}
        self.part: _Partition | None = None

    @property
    def partition(self) -> int:
        """The partition being scanned."""
        assert self.part is not None
        return self.part.index

    def violation(self, guarantee: str, offset: int | None, message: str) -> None:
        """Report a broken guarantee in the partition being scanned."""
        self.violations.append(Violation(guarantee, self.partition, offset, message))

    def begin(
        self, partition: int, meta: dict[bytes, bytes] | None, meta_type: str, token: Any
    ) -> None:
        """Start on ``partition``: its metadata hash (None if it is not a hash, of Redis type
        ``meta_type``) and the producer row's token (its current epoch)."""
        start = nxt = None
        self.part = part = _Partition(partition, None, None, to_int(token) or 0, None)
        if meta is None:
            what = "missing" if meta_type == "none" else f"a Redis {meta_type}, not a hash"
            self.violation("G6", None, f"the partition metadata is {what}: offsets unknown")
        else:
            start, nxt = offset_field(meta, b"start"), offset_field(meta, b"next")
            for field, value in ((b"start", start), (b"next", nxt)):
                if value is None:
                    self.violation(
                        "G6",
                        None,
                        f"partition metadata field {field.decode()!r} is "
                        f"{meta.get(field)!r}, not an offset",
                    )
            if start is not None and nxt is not None and nxt < start:
                self.violation(
                    "G6", None, f"partition metadata says next offset {nxt} < start {start}"
                )
                start = nxt = None
        part.start, part.next, part.expect = start, nxt, start
        if start is not None:
            self.starts[partition] = start

    def entry(self, entry_id: bytes, fields: dict[bytes, bytes]) -> tuple[int | None, int | None]:
        """Check the next entry of the log; returns its (offset, epoch), None where unknown."""
        self.records += 1
        offset = entry_offset(entry_id)
        if offset is None:
            self.violation(
                "G6",
                None,
                f"entry ID {entry_id.decode(errors='replace')} is not of the form "
                "0-N: offsets are stored as entries 0-(offset+1)",
            )
        else:
            self._place(offset)
        e, p, v = fields.get(b"e"), fields.get(b"p"), fields.get(b"v")
        epoch = to_int(e)
        missing = [n for n, f in (("e", e), ("p", p), ("v", v)) if f is None]
        if missing or epoch is None:
            what = f"no field {', '.join(missing)}" if missing else f"epoch field e is {e!r}"
            self.violation(
                "G6", offset, f"malformed entry {entry_id.decode(errors='replace')}: {what}"
            )
        if offset is not None and epoch is not None and p is not None:
            self._writer(offset, epoch, p.decode(errors="replace"))
        return offset, epoch

    def end(self) -> None:
        """The partition's log is over: close its last segment and report a missing tail."""
        part = self.part
        assert part is not None
        if part.run is not None:
            self._close(part.run)
        if part.next is not None and part.expect is not None and part.expect < part.next:
            self._gap(part.expect, part.next - 1)

    def _gap(self, a: int, b: int) -> None:
        part = self.part
        assert part is not None
        first = "" if a != part.start else f"; the first retained offset is {part.start}"
        self.violation("G6", a, f"{offsets(a, b)} missing from the log{first}")

    def _place(self, offset: int) -> None:
        """G6: the entries are exactly offsets start .. next - 1, in order."""
        part = self.part
        assert part is not None
        if part.start is not None and offset < part.start:
            self.violation(
                "G6",
                offset,
                f"entry 0-{offset + 1} is below the first retained offset "
                f"{part.start} (a trim left it behind)",
            )
            return
        if part.expect is None:  # metadata unknown: follow the entries
            part.expect = offset
        if offset > part.expect and (part.next is None or part.expect < part.next):
            self._gap(part.expect, offset - 1 if part.next is None else min(offset, part.next) - 1)
        if part.next is not None and offset >= part.next:
            self.violation(
                "G6",
                offset,
                f"entry 0-{offset + 1} is past the partition's next offset "
                f"{part.next} (written around the append script)",
            )
        part.expect = offset + 1

    def _writer(self, offset: int, epoch: int, producer: str) -> None:
        """G1 (and G2 for records of an older epoch): runs of (epoch, producer)."""
        part = self.part
        assert part is not None
        run = part.run
        if run is not None and run.epoch == epoch and run.producer == producer:
            run.last, run.records = offset, run.records + 1
            return
        if run is not None:
            self._close(run)
        resumed = epoch in part.epoch_first and (run is None or run.epoch != epoch)
        producers = part.epoch_producers.setdefault(epoch, set())
        same_epoch = run is not None and run.epoch == epoch
        if resumed or (same_epoch and producer in producers):
            self.interleavings += 1
        if self.exclusive:
            if part.max_epoch is not None and epoch < part.max_epoch:
                began = part.epoch_first[part.max_epoch]
                self.violation(
                    "G1",
                    offset,
                    f"epoch goes back to {epoch} (producer {producer}) after "
                    f"epoch {part.max_epoch}: epochs must never decrease along the log",
                )
                self.violation(
                    "G2",
                    offset,
                    f"a record of epoch {epoch} (producer {producer}) after "
                    f"epoch {part.max_epoch} began at offset {began}: a superseded producer "
                    "wrote",
                )
            elif resumed:
                assert run is not None
                self.violation(
                    "G1",
                    offset,
                    f"epoch {epoch} resumes after epoch {run.epoch}; it began at "
                    f"offset {part.epoch_first[epoch]}: each epoch must be one segment",
                )
            elif same_epoch and producer in producers:
                # A new PID within an epoch is its writer taking a fresh PID (its state
                # expired while idle, KIP-360): records carry the PID, not the session, and
                # that writer never writes under the old PID again. A PID coming back
                # after another one in the same epoch is two writers interleaving.
                assert run is not None
                self.violation(
                    "G1",
                    offset,
                    f"producer {producer} writes in epoch {epoch} again after producer "
                    f"{run.producer}: two writers interleave in one epoch (one writer per "
                    "epoch; a writer that takes a fresh PID never writes under its old one)",
                )
            if epoch > part.token:
                self.violation(
                    "G1",
                    offset,
                    f"a record of epoch {epoch} (producer {producer}) above the "
                    f"partition's current epoch {part.token} (the producer row's token)",
                )
        producers.add(producer)
        part.epoch_first.setdefault(epoch, offset)
        if part.max_epoch is None or epoch > part.max_epoch:
            part.max_epoch = epoch
        part.run = _Run(epoch, producer, offset, offset)

    def _close(self, run: _Run) -> None:
        assert self.part is not None
        self.segments.append(
            Segment(self.part.index, run.epoch, run.producer, run.first, run.last, run.records)
        )

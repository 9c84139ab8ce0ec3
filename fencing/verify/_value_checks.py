"""The checks over the values of every partition, against what the writers saw: G2 (no value
of a fenced send in the log; an acknowledged record carries the epoch it was acked with) and
G5 (no duplicates; every acknowledged value once, where it was acknowledged).

>>> checks = ValueChecks([Attempt(b"a", 0, "acked", 0, 1)], unique_values=True, violations=[])
>>> checks.seen(b"a", 0, 0, 1)
>>> checks.finish({0: 0})
ValueCounts(duplicates=0, lost=0, fenced_attempts=0, fenced_landed=0)
"""

from __future__ import annotations

from dataclasses import dataclass

from ._model import Attempt, Violation
from ._values import pack, show, unpack, where

_SHOW_LOCATIONS = 5


@dataclass(frozen=True, slots=True)
class ValueCounts:
    """What :meth:`ValueChecks.finish` counted, for the report."""

    duplicates: int
    lost: int
    fenced_attempts: int
    fenced_landed: int


class ValueChecks:
    """Fed every value in the log (:meth:`seen`), then :meth:`finish` once after the last
    partition; appends what is broken to ``violations``.

    ``unique_values`` says every value written is unique (a repeat is a duplicate); without
    it only acknowledged and unknown sends must not repeat. Memory: the values seen.
    """

    def __init__(
        self, attempts: list[Attempt], *, unique_values: bool, violations: list[Violation]
    ) -> None:
        self.attempts = attempts
        self.unique_values = unique_values
        self.violations = violations
        self.fenced = {a.value for a in attempts if a.outcome == "fenced"}
        self.fenced_seen: set[bytes] = set()
        self.acked = {a.value for a in attempts if a.outcome == "acked"}
        # Values that must appear at most once even when unique_values is off.
        self.tracked = self.acked | {a.value for a in attempts if a.outcome == "unknown"}
        self.first: dict[bytes, int] = {}
        self.extra: dict[bytes, list[int]] = {}
        self.epoch_at: dict[int, int] = {}  # location of an acked value -> its record's epoch

    def seen(self, value: bytes, partition: int, offset: int | None, epoch: int | None) -> None:
        """A record's value at (partition, offset), carrying ``epoch`` (None where unknown)."""
        loc = pack(partition, offset)
        if value in self.fenced:
            self.fenced_seen.add(value)
            self.violations.append(
                Violation(
                    "G2",
                    partition,
                    offset,
                    f"value {show(value)} of a send that raised ProducerFenced is in the log",
                )
            )
        if epoch is not None and value in self.acked:
            self.epoch_at[loc] = epoch
        if self.unique_values or value in self.tracked:
            first = self.first.get(value)
            if first is None:
                self.first[value] = loc
            else:
                self.extra.setdefault(value, []).append(loc)

    def finish(self, starts: dict[int, int]) -> ValueCounts:
        """After every partition: report duplicates and every acknowledged send that is lost
        or misplaced. ``starts`` are the partitions' first retained offsets (an acknowledged
        offset below it was trimmed by retention, not lost)."""
        duplicates = 0
        for value, extra in self.extra.items():
            duplicates += len(extra)
            locs = [self.first[value], *extra]
            shown = ", ".join(where(loc) for loc in locs[:_SHOW_LOCATIONS])
            more = "" if len(locs) <= _SHOW_LOCATIONS else f", ... ({len(locs)} in all)"
            self._at(
                "G5", extra[0], f"value {show(value)} appears {len(locs)} times: {shown}{more}"
            )
        lost = 0
        for a in self.attempts:
            if a.outcome == "acked":
                lost += self._acked(a, starts)
        fenced = sum(1 for a in self.attempts if a.outcome == "fenced")
        landed = sum(
            1 for a in self.attempts if a.outcome == "fenced" and a.value in self.fenced_seen
        )
        return ValueCounts(duplicates, lost, fenced, landed)

    def _at(self, guarantee: str, loc: int, message: str) -> None:
        p, o = unpack(loc)
        self.violations.append(Violation(guarantee, p, o, message))

    def _acked(self, a: Attempt, starts: dict[int, int]) -> int:
        """G5 and G2 for one acknowledged send; returns 1 if it is lost."""
        first = self.first.get(a.value)
        acked_at = f"partition {a.partition} offset {a.offset}"
        if first is None:
            start = starts.get(a.partition)
            if a.offset is not None and start is not None and a.offset < start:
                return 0  # trimmed away by retention: not a loss
            self.violations.append(
                Violation(
                    "G5",
                    a.partition,
                    a.offset,
                    f"acknowledged value {show(a.value)} "
                    f"(epoch {a.epoch}) is not in the log: an acknowledged write was lost",
                )
            )
            return 1
        locs = [first, *self.extra.get(a.value, ())]
        mine = pack(a.partition, a.offset)
        if a.offset is None:
            mine = next((loc for loc in locs if unpack(loc)[0] == a.partition), first)
        if mine not in locs:
            mine = first
            self._at(
                "G5",
                first,
                f"value {show(a.value)} was acknowledged at {acked_at} but is at {where(first)}",
            )
        epoch = self.epoch_at.get(mine)
        if a.epoch is not None and epoch is not None and epoch != a.epoch:
            self._at(
                "G2",
                mine,
                f"value {show(a.value)} was acknowledged with epoch {a.epoch} "
                f"but its record carries epoch {epoch}",
            )
        return 0

"""The verifier: fed every partition's entries in log order, runs the checks along the log
and over the values into one list of violations, and builds the report at the end.

>>> check = Verifier("orders", 1, [], exclusive=True, unique_values=True)
>>> check.begin(0, {b"start": b"0", b"next": b"1"}, "hash", b"1")
>>> check.entry(b"0-1", {b"e": b"1", b"p": b"7", b"v": b"x"})
>>> check.end()
>>> check.report().ok
True
"""

from __future__ import annotations

from typing import Any

from ._log_checks import LogChecks
from ._model import GUARANTEES, Attempt, Violation
from ._report import LogReport
from ._value_checks import ValueChecks


class Verifier:
    """Fed the entries of each partition in log order; builds the report at the end."""

    def __init__(
        self,
        topic: str,
        partitions: int,
        attempts: list[Attempt],
        *,
        exclusive: bool,
        unique_values: bool,
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.exclusive = exclusive
        # One list for both checks, in the order found: the report's sort keeps that order
        # among violations at the same place.
        self.violations: list[Violation] = []
        self.log = LogChecks(exclusive=exclusive, violations=self.violations)
        self.values = ValueChecks(attempts, unique_values=unique_values, violations=self.violations)

    def violation(self, guarantee: str, offset: int | None, message: str) -> None:
        """Report a broken guarantee in the partition being scanned."""
        self.log.violation(guarantee, offset, message)

    def begin(
        self, partition: int, meta: dict[bytes, bytes] | None, meta_type: str, token: Any
    ) -> None:
        """Start on ``partition`` (see :meth:`LogChecks.begin`)."""
        self.log.begin(partition, meta, meta_type, token)

    def entry(self, entry_id: bytes, fields: dict[bytes, bytes]) -> None:
        """The next entry of the partition's log."""
        offset, epoch = self.log.entry(entry_id, fields)
        value = fields.get(b"v")
        if value is not None:
            self.values.seen(value, self.log.partition, offset, epoch)

    def end(self) -> None:
        """The partition's log is over."""
        self.log.end()

    def report(self) -> LogReport:
        """After every partition: the value checks' verdict, then the report."""
        counts = self.values.finish(self.log.starts)
        order = {g: i for i, g in enumerate(GUARANTEES)}
        violations = sorted(
            self.violations,
            key=lambda v: (v.partition, -1 if v.offset is None else v.offset, order[v.guarantee]),
        )
        return LogReport(
            topic=self.topic,
            partitions=self.partitions,
            records=self.log.records,
            segments=tuple(self.log.segments),
            duplicates=counts.duplicates,
            interleavings=self.log.interleavings,
            fenced_attempts=counts.fenced_attempts,
            lost=counts.lost,
            violations=tuple(violations),
            fenced_landed=counts.fenced_landed,
            exclusive=self.exclusive,
        )

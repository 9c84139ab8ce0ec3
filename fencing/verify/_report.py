"""The verifier's report: counters, segments and violations, as text or as JSON-ready data.

>>> report = verify_log(client, "orders")                             # doctest: +SKIP
>>> print(report.summary())                                           # doctest: +SKIP
topic orders: 1 partition, 1,234 records
...
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ._model import GUARANTEES, Segment, Violation


def count(n: int, noun: str) -> str:
    """``n`` with thousands separators and ``noun``, plural unless n is 1: '1,234 records'."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class LogReport:
    """What :func:`verify_log` found. ``ok`` when no guarantee was broken.

    >>> report = verify_log(client, "orders")                         # doctest: +SKIP
    >>> report.ok, report.records, report.duplicates                  # doctest: +SKIP
    (True, 1234, 0)
    """

    topic: str
    partitions: int
    records: int
    segments: tuple[Segment, ...]
    duplicates: int
    interleavings: int
    fenced_attempts: int
    lost: int
    violations: tuple[Violation, ...]
    #: Fenced attempts whose value is in the log (each one is also a G2 violation).
    fenced_landed: int = 0
    #: Whether G1 was checked (``exclusive=True``).
    exclusive: bool = True

    @property
    def ok(self) -> bool:
        """True when no violation was found.

        >>> report = verify_log(client, "orders")
        >>> assert report.ok, report.summary()
        """
        return not self.violations

    @property
    def checks(self) -> dict[str, str]:
        """Each guarantee's verdict: "ok", "failed" or "not checked".

        >>> verify_log(client, "orders", exclusive=False).checks         # doctest: +SKIP
        {'G1': 'not checked', 'G2': 'ok', 'G5': 'ok', 'G6': 'ok'}
        """
        failed = {v.guarantee for v in self.violations}
        out = {}
        for g in GUARANTEES:
            if g in failed:
                out[g] = "failed"
            elif g == "G1" and not self.exclusive:
                out[g] = "not checked"
            else:
                out[g] = "ok"
        return out

    def summary(self, max_segments: int = 20, max_violations: int = 100) -> str:
        """A human summary: segments per partition, counters, verdicts, then violations.

        At most ``max_segments`` segment lines per partition and ``max_violations``
        violation lines are printed (:meth:`to_dict` holds them all).

        >>> print(verify_log(client, "orders").summary())               # doctest: +SKIP
        topic orders: 1 partition, 3 records
        ...
        """
        lines = [
            f"topic {self.topic}: {count(self.partitions, 'partition')}, "
            f"{count(self.records, 'record')}"
        ]
        by_partition: dict[int, list[Segment]] = {}
        for s in self.segments:
            by_partition.setdefault(s.partition, []).append(s)
        for p in range(self.partitions):
            segments = by_partition.get(p, [])
            lines.append(f"  partition {p}: {count(len(segments), 'segment')}")
            shown = segments[:max_segments]
            ew = max((len(str(s.epoch)) for s in shown), default=0) + 2
            pw = max((len(s.producer_id) for s in shown), default=0) + 3
            ow = max((len(f"{s.first_offset}..{s.last_offset}") for s in shown), default=0) + 3
            for s in shown:
                lines.append(
                    f"    epoch {s.epoch:<{ew}}producer {s.producer_id:<{pw}}offsets "
                    f"{f'{s.first_offset}..{s.last_offset}':<{ow}}"
                    f"({count(s.records, 'record')})"
                )
            if len(segments) > len(shown):
                lines.append(f"    ... {len(segments) - len(shown):,} more segments")
        landed = "none landed" if not self.fenced_landed else f"{self.fenced_landed:,} landed"
        lines.append(
            f"  duplicates {self.duplicates:,}, interleavings {self.interleavings:,}, "
            f"lost acknowledged {self.lost:,}, fenced attempts {self.fenced_attempts:,} "
            f"({landed})"
        )
        verdicts = {"ok": "ok", "failed": "FAILED", "not checked": "not checked"}
        counts = {g: sum(1 for v in self.violations if v.guarantee == g) for g in GUARANTEES}
        lines.append(
            "  "
            + "  ".join(
                f"{g} {verdicts[c]}" + (f" ({counts[g]:,})" if c == "failed" else "")
                for g, c in self.checks.items()
            )
        )
        if self.violations:
            lines.append(f"  {count(len(self.violations), 'violation')}:")
            lines.extend(f"    {v}" for v in self.violations[:max_violations])
            if len(self.violations) > max_violations:
                lines.append(f"    ... and {len(self.violations) - max_violations:,} more")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """The report as JSON-ready data (for ``--json``): plain str, int, bool, list, dict.

        >>> json.dumps(report.to_dict())                                # doctest: +SKIP
        """
        return {
            "topic": self.topic,
            "partitions": self.partitions,
            "records": self.records,
            "ok": self.ok,
            "checks": self.checks,
            "duplicates": self.duplicates,
            "interleavings": self.interleavings,
            "fenced_attempts": self.fenced_attempts,
            "fenced_landed": self.fenced_landed,
            "lost": self.lost,
            "segments": [dataclasses.asdict(s) for s in self.segments],
            "violations": [dataclasses.asdict(v) for v in self.violations],
        }

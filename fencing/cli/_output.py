"""How the commands print: JSON, bytes as text, durations, leases, times, offsets and
aligned tables. Every duration the commands print goes through :func:`duration`.

>>> lease(1500), lease(-694_122)
('expires in 1.5s', 'lapsed 11m 34s ago')
>>> table(("NAME", "STATE"), [("sched", "live")])
  NAME   STATE
  sched  live
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._inspection import SkippedKey


def print_json(value: Any) -> None:
    """``--json`` output: indented, keys in their order."""
    print(json.dumps(value, indent=2, sort_keys=False))


def warn_skipped(skipped: Sequence[SkippedKey]) -> None:
    """Each key of the wrong type a listing skipped, one line on stderr (so ``--json``
    output stays JSON), naming the key, what it left out and what to do."""
    for k in skipped:
        held = "another Redis type" if k.key_type == "unknown" else f"a Redis {k.key_type}"
        print(
            f"fencing: skipped key {k.key!r} ({k.what}): it holds {held}, not a {k.expected} "
            f"(another program wrote it), so {k.left_out} is not listed; remove that key or "
            "choose another namespace",
            file=sys.stderr,
        )


def show(data: bytes | None) -> str:
    """Bytes as text when they are UTF-8, else as a bytes repr."""
    if data is None:
        return "-"
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return repr(data)


# The units above a second, largest first: (name, seconds, the next smaller unit, its seconds).
_UNITS = (("d", 86_400, "h", 3_600), ("h", 3_600, "m", 60), ("m", 60, "s", 1))


def duration(ms: int) -> str:
    """A duration in ms as people read it: ms under a second, seconds to a tenth under ten,
    whole seconds under a minute, then the two largest units (a zero second one left out).
    Digits are cut, never rounded up, so a duration never shows as the next unit early.

    >>> [duration(ms) for ms in (0, 850, 8_299, 42_000, 694_122, 7_500_000, 273_600_000)]
    ['0ms', '850ms', '8.2s', '42s', '11m 34s', '2h 5m', '3d 4h']
    """
    if ms < 0:
        return "-" + duration(-ms)
    if ms < 1_000:
        return f"{ms}ms"
    if ms < 10_000:
        return f"{ms // 1_000}.{ms % 1_000 // 100}s"
    seconds = ms // 1_000
    for unit, size, smaller, smaller_size in _UNITS:
        if seconds >= size:
            count, rest = divmod(seconds, size)
            part = rest // smaller_size
            return f"{count}{unit}" + (f" {part}{smaller}" if part else "")
    return f"{seconds}s"


def lease(left_ms: int) -> str:
    """A lease by when it expires, or how long ago it lapsed (at or below 0 ms left)."""
    return f"expires in {duration(left_ms)}" if left_ms > 0 else f"lapsed {duration(-left_ms)} ago"


def offsets(start: int, end: int) -> str:
    """What a partition holds, from its first retained offset and its next offset.

    >>> offsets(0, 3)
    'holds offsets 0 to 2 (next offset 3)'
    >>> offsets(4, 5), offsets(5, 5)
    ('holds offset 4 (next offset 5)', 'holds no records (next offset 5)')
    """
    if start == end:
        return f"holds no records (next offset {end})"
    if end == start + 1:
        return f"holds offset {start} (next offset {end})"
    return f"holds offsets {start} to {end - 1} (next offset {end})"


def when(ms: int) -> str:
    """A server time in ms as UTC ISO 8601, to the second."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> None:
    """Print left-aligned columns two spaces apart (the last one is not padded)."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print((indent + line).rstrip())

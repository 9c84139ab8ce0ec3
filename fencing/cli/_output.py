"""How the commands print: JSON, bytes as text, leases, times and aligned tables.

>>> lease(1500), lease(-20)
('1500 ms left', 'lapsed 20 ms ago')
>>> table(("NAME", "STATE"), [("sched", "live")])
  NAME   STATE
  sched  live
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any


def print_json(value: Any) -> None:
    """``--json`` output: indented, keys in their order."""
    print(json.dumps(value, indent=2, sort_keys=False))


def show(data: bytes | None) -> str:
    """Bytes as text when they are UTF-8, else as a bytes repr."""
    if data is None:
        return "-"
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return repr(data)


def lease(left_ms: int) -> str:
    """A lease by what is left of it, or how long ago it lapsed."""
    return f"{left_ms} ms left" if left_ms > 0 else f"lapsed {-left_ms} ms ago"


def when(ms: int) -> str:
    """A server time in ms as UTC ISO 8601, to the second."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> None:
    """Print left-aligned columns two spaces apart (the last one is not padded)."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print((indent + line).rstrip())

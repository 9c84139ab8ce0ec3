"""How the ``fencing`` command prints durations, leases and what a partition holds
(``fencing.cli._output``): exact strings, no server."""

from __future__ import annotations

import pytest

from fencing.cli._output import duration, lease, offsets

SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR


@pytest.mark.parametrize(
    ("ms", "shown"),
    [
        (0, "0ms"),
        (1, "1ms"),
        (850, "850ms"),
        (999, "999ms"),
        (1_000, "1.0s"),
        (1_099, "1.0s"),
        (8_250, "8.2s"),
        (9_999, "9.9s"),  # cut, never rounded up into the next unit
        (10_000, "10s"),
        (42_900, "42s"),
        (59_999, "59s"),
        (MINUTE, "1m"),
        (MINUTE + SECOND, "1m 1s"),
        (694_122, "11m 34s"),
        (HOUR - 1, "59m 59s"),
        (HOUR, "1h"),
        (2 * HOUR + 5 * MINUTE + 59 * SECOND, "2h 5m"),
        (2 * HOUR + 30 * SECOND, "2h"),
        (DAY - 1, "23h 59m"),
        (DAY, "1d"),
        (3 * DAY + 4 * HOUR + 59 * MINUTE, "3d 4h"),
        (400 * DAY + HOUR, "400d 1h"),
        (-8_250, "-8.2s"),
    ],
)
def test_duration(ms: int, shown: str) -> None:
    assert duration(ms) == shown


@pytest.mark.parametrize(
    ("left_ms", "shown"),
    [
        (9_984, "expires in 9.9s"),
        (1, "expires in 1ms"),
        (0, "lapsed 0ms ago"),
        (-20, "lapsed 20ms ago"),
        (-694_122, "lapsed 11m 34s ago"),
        (-(3 * DAY + 4 * HOUR), "lapsed 3d 4h ago"),
    ],
)
def test_lease(left_ms: int, shown: str) -> None:
    assert lease(left_ms) == shown


@pytest.mark.parametrize(
    ("start", "end", "shown"),
    [
        (0, 0, "holds no records (next offset 0)"),
        (7, 7, "holds no records (next offset 7)"),
        (0, 1, "holds offset 0 (next offset 1)"),
        (0, 3, "holds offsets 0 to 2 (next offset 3)"),
        (5, 12, "holds offsets 5 to 11 (next offset 12)"),
    ],
)
def test_offsets(start: int, end: int, shown: str) -> None:
    assert offsets(start, end) == shown

"""Reading a topic partition back from Redis, and checking it holds a list exactly once.

>>> values = read_values(client, "orders", 0)                          # doctest: +SKIP
>>> records = read_records(client, "orders", 0)                        # doctest: +SKIP
>>> check_exactly_once(client, "orders", 0, [b"a", b"b"])              # doctest: +SKIP

Everything goes through :meth:`fencing.Topic.reader` from the first retained offset to the
partition's end, page by page, so the records come back in offset order with their full
metadata (offset, epoch, producer id, ...).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import fencing

__all__ = ["check_exactly_once", "read_records", "read_values"]

#: Records per read while paging through a partition.
PAGE = 10_000


def read_records(client: fencing.Client, topic: str, partition: int) -> list[fencing.Record]:
    """Every retained record of ``topic``'s ``partition``, in offset order."""
    reader = client.topic(topic).reader(partition, "earliest")
    records: list[fencing.Record] = []
    while page := reader.read(max_records=PAGE):
        records.extend(page)
    return records


def read_values(client: fencing.Client, topic: str, partition: int) -> list[bytes]:
    """The values of :func:`read_records`, in offset order."""
    return [r.value for r in read_records(client, topic, partition)]


def check_exactly_once(
    client: fencing.Client, topic: str, partition: int, expected: Sequence[bytes]
) -> list[fencing.Record]:
    """Assert the partition holds ``expected`` exactly: once each, in order, at offsets
    0..len(expected)-1. Returns the records read; the failure message says where the log
    first differs, and which values are missing or repeated."""
    records = read_records(client, topic, partition)
    got = [(r.offset, r.value) for r in records]
    want = list(enumerate(expected))
    if got == want:
        return records
    at = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), None)
    if at is None:
        at = min(len(got), len(want))
    counts = Counter(r.value for r in records)
    repeated = sorted(v for v, n in counts.items() if n > 1)
    missing = [v for v in expected if v not in counts]
    raise AssertionError(
        f"topic {topic!r} partition {partition}: {len(got)} records, expected "
        f"{len(want)} exactly once in order; first difference at index {at}: "
        f"got {got[at] if at < len(got) else 'nothing'}, "
        f"expected {want[at] if at < len(want) else 'nothing'}; "
        f"{len(missing)} missing (first {missing[:3]}), "
        f"{len(repeated)} repeated (first {repeated[:3]})"
    )

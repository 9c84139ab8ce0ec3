"""Reading a topic partition back from Redis, checking what it holds, and filling one.

>>> values = read_values(client, "orders", 0)                          # doctest: +SKIP
>>> records = records_of(topic, 0)                                     # doctest: +SKIP
>>> log = log_of(topic, 0)                        # {offset: value}    # doctest: +SKIP
>>> records = await records_of_async(topic, 0)    # either flavour     # doctest: +SKIP
>>> check_exactly_once(client, "orders", 0, [b"a", b"b"])              # doctest: +SKIP
>>> verified(url, namespace, "orders", attempts, exclusive=True)       # doctest: +SKIP
>>> fill(topic, 10, partition=1)                  # v000..v009         # doctest: +SKIP

Everything goes through the topic's reader from the first retained offset to the
partition's end, page by page, so the records come back in offset order with their full
metadata (offset, epoch, producer id, ...).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import fencing
from fencing.verify import Attempt, verify_log

__all__ = [
    "check_exactly_once",
    "fill",
    "log_of",
    "log_of_async",
    "read_records",
    "read_values",
    "records_of",
    "records_of_async",
    "topic_values",
    "values_of",
    "verified",
]

#: Records per read while paging through a partition.
PAGE = 10_000


def records_of(topic: fencing.Topic, partition: int = 0) -> list[fencing.Record]:
    """Every retained record of ``topic``'s ``partition``, in offset order."""
    reader = topic.reader(partition, "earliest")
    records: list[fencing.Record] = []
    while page := reader.read(max_records=PAGE):
        records.extend(page)
    return records


def values_of(topic: fencing.Topic, partition: int = 0) -> list[bytes]:
    """The values of :func:`records_of`, in offset order."""
    return [r.value for r in records_of(topic, partition)]


def log_of(topic: fencing.Topic, partition: int = 0) -> dict[int, bytes]:
    """The partition as ``{offset: value}``."""
    return {r.offset: r.value for r in records_of(topic, partition) if r.offset is not None}


async def records_of_async(topic: Any, partition: int = 0) -> list[fencing.Record]:
    """:func:`records_of` for a topic of either flavour, from a test written for both."""
    reader = await topic.reader(partition, "earliest")
    records: list[fencing.Record] = []
    while page := list(await reader.read(max_records=PAGE)):
        records += page
    return records


async def log_of_async(topic: Any, partition: int = 0) -> dict[int, bytes]:
    """:func:`log_of` for a topic of either flavour."""
    records = await records_of_async(topic, partition)
    return {r.offset: r.value for r in records if r.offset is not None}


def read_records(client: fencing.Client, topic: str, partition: int) -> list[fencing.Record]:
    """Every retained record of ``topic``'s ``partition``, in offset order."""
    return records_of(client.topic(topic), partition)


def read_values(client: fencing.Client, topic: str, partition: int) -> list[bytes]:
    """The values of :func:`read_records`, in offset order."""
    return [r.value for r in read_records(client, topic, partition)]


def topic_values(client: fencing.Client, topic: str) -> list[bytes]:
    """Every value of every partition of ``topic``, partition by partition."""
    t = client.topic(topic)
    return [v for p in range(t.partitions) for v in values_of(t, p)]


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


def verified(
    url: str,
    namespace: str,
    topic: str,
    attempts: Sequence[Attempt],
    *,
    exclusive: bool = True,
    note: str = "",
) -> None:
    """Assert :func:`fencing.verify.verify_log` finds the whole log of ``topic`` sound and
    consistent with what the writers were told (``attempts``); ``note`` prefixes the
    failure message (a random seed, say)."""
    with fencing.Client.from_url(url, namespace=namespace) as checker:
        report = verify_log(checker, topic, attempts=list(attempts), exclusive=exclusive)
    assert report.ok, f"{note}{': ' if note else ''}{report.summary()}"


def fill(topic: fencing.Topic, n: int, partition: int = 0) -> None:
    """Append ``n`` records ``v000``, ``v001``... to ``topic``'s ``partition`` (one batch,
    by a producer opened and closed for it)."""
    with topic.producer() as p:
        p.send_batch([fencing.Record(value=b"v%03d" % i) for i in range(n)], partition=partition)

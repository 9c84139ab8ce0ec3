"""The Spark source's executor side: read one planned range of a partition as Arrow
record batches.

Runs inside Spark tasks. Each Python worker keeps one :class:`~fencing.Client` per (url,
namespace), made on first use and reused by later tasks. A page is the library's own read
(:func:`fencing._protocol.reads.read`: the partition's metadata, XRANGE and the
incarnation again, in one pipeline, decoded by the reader's code), plain commands only.
Every page checks the partition against the plan (G9): deleted, recreated (another
incarnation) or gone back in history raises :class:`~fencing.StateLost`, never reads
another history; offsets trimmed since the plan raise :class:`~fencing.OffsetOutOfRange`,
or with ``failOnTrim`` off are skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import _protocol as protocol
from .._record import Record
from .._sync.client import Client
from .._sync.context import context_of
from ..errors import OffsetOutOfRange, StateLost
from .plan import Range

if TYPE_CHECKING:
    import pyarrow as pa

#: Records per page: the first page (small: records may be as large as the topic allows,
#: a megabyte by default), and the most of any page (read_limits caps a read at 10,000);
#: later pages are sized to about PAGE_BYTES of values by the page before.
FIRST_PAGE = 16
MAX_PAGE = 5_000
PAGE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ScanConfig:
    """What every task of one read shares: where the topic is, and what to do on a trim."""

    url: str
    namespace: str
    topic: str
    fail_on_trim: bool


_lock = threading.Lock()
_clients: dict[tuple[str, str], Client] = {}


def scan_client(config: ScanConfig) -> Client:
    """This process's client for ``config``'s server and namespace (made on first use)."""
    key = (config.url, config.namespace)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = Client.from_url(config.url, namespace=config.namespace)
        return client


def arrow_schema() -> pa.Schema:
    """The Arrow schema of the rows, as Spark converts the source's schema (UTC
    timestamps; map entries named key and value, keys not null)."""
    import pyarrow as pa  # noqa: PLC0415 - on executors, with the spark extra

    return pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("headers", pa.map_(pa.field("key", pa.string(), nullable=False), pa.binary())),
            ("epoch", pa.int64()),
            ("producer_id", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("message_id", pa.string()),
        ]
    )


def to_batch(records: Sequence[Record], schema: pa.Schema) -> pa.RecordBatch:
    """Records as one Arrow record batch of the rows' schema."""
    import pyarrow as pa  # noqa: PLC0415

    n = len(records)
    offsets = [0]
    names: list[str] = []
    values: list[bytes] = []
    for r in records:
        if r.headers:
            names.extend(r.headers.keys())
            values.extend(r.headers.values())
        offsets.append(len(names))
    headers = pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.array(names, pa.string()),
        pa.array(values, pa.binary()),
    ).cast(schema.field("headers").type)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([records[0].topic] * n, pa.string()),
            pa.array([r.partition for r in records], pa.int32()),
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            headers,
            pa.array([r.epoch for r in records], pa.int64()),
            pa.array([r.producer_id for r in records], pa.int64()),
            pa.array(
                [(r.timestamp_ms or 0) * 1000 for r in records], schema.field("timestamp").type
            ),
            pa.array([r.message_id for r in records], pa.string()),
        ],
        schema=schema,
    )


def read_range(config: ScanConfig, part: Range) -> Iterator[pa.RecordBatch]:
    """The records of ``part`` as Arrow batches, one per page, checked against the plan."""
    schema = arrow_schema()
    for records in read_records(config, part):
        yield to_batch(records, schema)


def read_records(config: ScanConfig, part: Range) -> Iterator[list[Record]]:
    """The records of ``part``, page by page (each page non-empty)."""
    context = context_of(scan_client(config))
    pk = context.keys.partition(config.topic, part.partition)
    driver = context.driver(context.settings.socket_timeout)
    budget = context.budget_default()
    where = f"partition {part.partition} of topic {config.topic!r}"
    position, end, count = part.start, part.end, FIRST_PAGE
    while position < end:
        call = protocol.reads.read(pk, position, min(count, end - position))
        batch = driver.read(call, budget)
        info = batch.partition
        if info is None or batch.incarnation_after is None:
            raise _lost(where, pk.meta, "missing")
        if part.incarnation != info.incarnation or part.incarnation != batch.incarnation_after:
            raise _lost(where, pk.meta, "incarnation")
        if info.next_offset < end:
            raise _lost(where, pk.meta, "offset")
        records = [r for r in batch.records if r.offset < end]  # type: ignore[operator]
        first = records[0].offset if records else info.next_offset
        if first != position:
            # Trimmed since the plan (or removed by someone other than trim()).
            resume = max(info.start_offset, first if first is not None else position)
            if config.fail_on_trim:
                raise OffsetOutOfRange(
                    f"offsets {position} to {min(resume, end) - 1} of {where} were trimmed "
                    f"after the read was planned: its first retained offset is now "
                    f"{info.start_offset}. Read again (a batch read: load() again), or set "
                    "failOnTrim to 'false' to skip ahead",
                    requested=position,
                    start=info.start_offset,
                    end=info.next_offset,
                    topic=config.topic,
                    partition=part.partition,
                )
            position = resume
            continue
        yield records
        position = records[-1].offset + 1  # type: ignore[operator]
        sample = len(records[0].value) + len(records[-1].value)
        count = max(1, min(MAX_PAGE, PAGE_BYTES * 2 // max(1, sample)))


def _lost(where: str, key: str, reason: str) -> StateLost:
    what = {
        "missing": "was deleted",
        "incarnation": "was made again (another incarnation of the topic)",
        "offset": "went back in history (the Redis server lost writes)",
    }[reason]
    return StateLost(
        f"{where} {what} after the read was planned: nothing of another history is read. "
        "Load the DataFrame again (a stream: start the query with a new checkpoint location) "
        "to read the topic as it is now",
        reason=reason,
        key=key,
    )

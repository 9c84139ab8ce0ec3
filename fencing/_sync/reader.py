# GENERATED from fencing/_async/reader.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""Readers: ``topic.reader(partition, start_offset)``. Read a partition by offset.

A read is one round trip: the partition's metadata and the records, pipelined. The
metadata proves the log is the one the reader opened (G9): a recreated or rewound
partition raises :class:`~fencing.StateLost` instead of silently reading another history.
Iterating a reader tails the partition with blocking reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Literal

from .. import _protocol as protocol
from .._record import Record
from .._validate import MAX_OFFSET, check_int, read_limits
from ..errors import InvalidArgument, StateLost
from .metadata import TopicFace, metadata_of

#: Where a reader starts: an offset, "earliest" (the first retained record) or "latest".
StartOffset = int | Literal["earliest", "latest"]
#: Where a reader stops (exclusive): an offset, "latest" (the end when the reader was
#: made), or None (never: it tails).
EndOffset = int | Literal["latest"] | None

_TAIL_BLOCK_MS = 1_000
#: The most records one read of an iterated reader asks for (records of 4 KiB or less).
ITER_RECORDS = 1000
#: About the most bytes of values one read of an iterated reader fetches: the pages of
#: larger records hold fewer of them (like Kafka's max.partition.fetch.bytes), judged by
#: the values of the page before. The first page holds at most _ITER_FIRST records.
_ITER_BYTES = 4 * 1024 * 1024
_ITER_FIRST = 100


class Reader:
    """Reads one partition from an offset. It holds nothing on the server: closing it only
    ends its use (a read after raises :class:`~fencing.InvalidArgument`, iterating ends).

    >>> reader = topic.reader(partition=0, start_offset="earliest")
    >>> for record in reader.read(max_records=100, block_ms=1000):
    ...     print(record.offset, record.value)
    >>> for record in reader:                # tails with blocking reads until closed
    ...     handle(record)
    >>> with topic.reader(0, "earliest") as reader:
    ...     records = reader.read()
    """

    def __init__(self, topic: TopicFace, partition: int) -> None:
        #: The topic it reads.
        self.topic = topic
        self._meta = metadata_of(topic)
        self._pk = self._meta.partition_keys(partition)
        self.partition = self._pk.partition
        self._position = 0
        self._end: int | None = None
        self._closed = False
        #: The partition's next offset as the last read's own reply told (None before).
        self.last_next: int | None = None

    def _start(self, start_offset: StartOffset, end_offset: EndOffset = None) -> None:
        """Place the reader at ``start_offset``, stopping before ``end_offset`` (made by
        :meth:`Topic.reader`)."""
        if end_offset is not None and end_offset != "latest":
            if isinstance(end_offset, str):
                raise InvalidArgument(
                    f"end_offset must be an int, 'latest' or None, got {end_offset!r}"
                )
            if check_int("end_offset", end_offset) > MAX_OFFSET:
                raise InvalidArgument(
                    f"end_offset={end_offset} is past the largest offset a partition can "
                    f"reach ({MAX_OFFSET}): pass an offset, 'latest', or None to tail"
                )
        start, end = self._meta.offsets(self.partition)
        if start_offset == "earliest":
            position = start
        elif start_offset == "latest":
            position = end
        elif isinstance(start_offset, str):
            raise InvalidArgument(
                f"start_offset must be an int, 'earliest' or 'latest', got {start_offset!r}"
            )
        else:
            position = check_int("start_offset", start_offset)
            if not start <= position <= end:
                raise protocol.partition_errors.out_of_range(self._pk, position, start, end)
        stop = end if end_offset == "latest" else end_offset
        if stop is not None and stop < position:
            raise InvalidArgument(
                f"end_offset {stop} is before where the reader starts ({position}): pass an "
                "end at or after the start, or None to tail"
            )
        self._position = position
        self._end = stop

    @property
    def position(self) -> int:
        """The offset the next read starts at.

        >>> reader = topic.reader(0, start_offset=10)
        >>> reader.position
        10
        """
        return self._position

    @property
    def end_offset(self) -> int | None:
        """Where this reader stops (exclusive), or None if it tails.

        >>> (topic.reader(0, "earliest", end_offset=100)).end_offset   # doctest: +SKIP
        100
        """
        return self._end

    @property
    def at_end(self) -> bool:
        """Whether a reader with an ``end_offset`` has read up to it (always False for a
        tailing reader).

        >>> while not reader.at_end:
        ...     records = reader.read(max_records=1000)
        """
        return self._end is not None and self._position >= self._end

    def seek(self, offset: int) -> None:
        """Move to ``offset``: checked now against the partition's range (one read).

        Raises :class:`~fencing.OffsetOutOfRange` below the first retained record or past
        the next offset.

        >>> reader.seek(0)
        """
        self._ready()
        position = check_int("offset", offset)
        start, end = self._meta.offsets(self.partition)
        if not start <= position <= end:
            raise protocol.partition_errors.out_of_range(self._pk, position, start, end)
        self._position = position

    def seek_unchecked(self, offset: int) -> None:
        """Put the position back to an offset this reader already read from (no I/O).

        >>> mark = reader.position
        >>> records = reader.read()
        >>> reader.seek_unchecked(mark)               # read the same records again
        """
        self._position = offset

    def read(self, max_records: int = 100, block_ms: int | None = None) -> list[Record]:
        """Up to ``max_records`` records from the current position. ``max_records`` is
        capped at 10,000 per read (a larger value raises :class:`~fencing.InvalidArgument`):
        page through a longer log, or iterate the reader.

        With ``block_ms``, waits up to that long for records when none are there yet.
        A reader with an ``end_offset`` never reads past it: at the end, this returns
        ``[]`` at once. Raises :class:`~fencing.OffsetOutOfRange` if the position was
        trimmed away.

        >>> records = reader.read(max_records=500, block_ms=1000)
        >>> [(r.offset, r.value) for r in records]                       # doctest: +SKIP
        [(0, b'hello')]
        """
        self._ready()
        count, block = read_limits(max_records, block_ms)
        if self._end is not None:
            count = min(count, self._end - self._position)
            if count <= 0:
                # At the end: nothing to read, but the partition is still checked (G9), so a
                # deleted or recreated topic is reported here as on any other read.
                self._meta.offsets(self.partition)
                return []
        records = self._fetch(count, 0)
        if not records and block > 0:
            # Blocks in steps shorter than the socket timeout, so a blocking read uses the
            # topic's own connections (no pool per block_ms) and a dead server is noticed
            # within one step; each step re-checks the partition (G9).
            step_ms = max(1, int(self._meta.budget.timeout * 500))
            deadline = time.monotonic() + block / 1000.0
            while not records:
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    break
                records = self._fetch(count, min(step_ms, left_ms))
        if records:
            self._position = records[-1].offset + 1  # type: ignore[operator]
        return records

    def _fetch(self, count: int, block_ms: int) -> list[Record]:
        topic = self._meta
        call = protocol.reads.read(self._pk, self._position, count, block_ms=block_ms)
        seen = topic.seen_next(self.partition)
        batch = topic.driver().read(call, topic.budget)
        try:
            topic.check_partition(self._pk, batch.partition, seen)
            if batch.incarnation_after != topic.incarnation_of(self.partition):
                raise StateLost(
                    f"partition {self.partition} of topic {topic.name!r} was recreated while "
                    "it was being read (the Redis server lost its state); nothing read was "
                    "returned. Open the topic again to read the new history",
                    reason="incarnation",
                    key=self._pk.meta,
                )
        except StateLost as lost:
            raise topic.explain(self._pk, lost) from None
        info = batch.partition
        assert info is not None
        self.last_next = info.next_offset
        if self._position < info.start_offset or self._position > info.next_offset:
            raise protocol.partition_errors.out_of_range(
                self._pk, self._position, info.start_offset, info.next_offset
            )
        records = batch.records
        if records:
            topic.saw_next(self.partition, records[-1].offset + 1)  # type: ignore[operator]
        if records and records[0].offset != self._position:
            # Records below the start were removed by someone other than trim().
            raise protocol.partition_errors.out_of_range(
                self._pk, self._position, records[0].offset or 0, info.next_offset
            )
        return records

    def close(self) -> None:
        """End this reader's use: a read after raises :class:`~fencing.InvalidArgument`, and
        iterating it ends (once the records already fetched are handed out). Idempotent; it
        holds nothing on the server, so nothing is released.

        >>> reader.close()          # or leave ``with topic.reader(0) as reader``
        """
        self._closed = True

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ready(self) -> None:
        if self._closed:
            raise InvalidArgument("this reader is closed: open a new one with topic.reader(...)")

    def __iter__(self) -> Iterator[Record]:
        """Tail the partition: every record from the position on, waiting for new ones,
        until the reader is closed (or, with an ``end_offset``, up to it).

        The position follows the records handed out (not the pages fetched), so a loop
        that breaks out leaves the reader at the record after the last one it got."""
        count = _ITER_FIRST
        while not self._closed and not self.at_end:
            records = self.read(max_records=count, block_ms=_TAIL_BLOCK_MS)
            if not records:
                continue
            # Size the next page by this one's values (first and last: no pass over all).
            sample = len(records[0].value) + len(records[-1].value)
            count = max(1, min(ITER_RECORDS, _ITER_BYTES * 2 // max(1, sample)))
            for record in records:
                self._position = record.offset + 1  # type: ignore[operator]
                yield record

    def __repr__(self) -> str:
        return (
            f"<fencing.Reader topic={self.topic.name!r} partition={self.partition} "
            f"position={self._position}>"
        )


def open_reader(
    topic: TopicFace, partition: int, start_offset: StartOffset, end_offset: EndOffset = None
) -> Reader:
    """A reader of ``partition`` placed at ``start_offset``, stopping before ``end_offset``
    (what :meth:`Topic.reader` returns; the topic is open)."""
    reader = Reader(topic, partition)
    reader._start(start_offset, end_offset)
    return reader

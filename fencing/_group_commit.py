"""Group commit: sends queued on one partition, merged into one fenced append (no I/O).

While a script call is in flight on a partition, later sends to it wait in the partition's
queue; whoever next holds the partition's lock takes the queue's head as one batch (up to the
topic's limits, never refusing a caller: what does not fit goes in the next call), sends it
once, all or nothing, under one sequence range, and gives every caller its own slice of the
metadata or the batch's error. A send with ``expected_offset`` keeps its own meaning: it is
never merged, and goes alone in its turn. Shared by the sync and asyncio producers.

>>> queue = deque([encode_one(b"a", None, None, limits), Entry.of(encode_batch(...))])
>>> group = take_group(queue, limits, claim)     # doctest: +SKIP
>>> merged = merge_batches(group)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ._protocol.topic import EncodedBatch, batch_digest, encode_batch
from ._record import Limits, Record, RecordMetadata, check_message_id, placed, to_bytes


class Entry:
    """One caller's batch in a partition's queue, and its answer once settled.

    A plain send waits on ``event`` (set once it is answered, or to have its caller send
    the queue's head itself) and reads ``result`` / ``error``; a ``send_async`` record has
    a ``future`` instead (its caller does not wait)."""

    __slots__ = (
        "abandoned",
        "checksum",
        "count",
        "duplicate",
        "error",
        "event",
        "expected_offset",
        "future",
        "ids",
        "layout",
        "leading",
        "parts",
        "result",
        "size",
        "then",
    )

    def __init__(
        self,
        count: int,
        layout: str,
        parts: Sequence[bytes],
        size: int,
        expected_offset: int | None = None,
        *,
        event: Any = None,
        future: Any = None,
        ids: bool = False,
    ) -> None:
        #: The batch, as an EncodedBatch holds it (without a checksum: merge_batches
        #: gives the call's batch one).
        self.count = count
        #: Its records carry message ids: the call is answered by them, or refused, as a
        #: unit of its own.
        self.ids = ids
        self.layout = layout
        self.parts = parts
        self.checksum = ""
        self.size = size
        self.expected_offset = expected_offset
        self.event = event
        self.future = future
        self.result: list[RecordMetadata] | None = None
        self.error: BaseException | None = None
        #: Its caller gave up (interrupted, cancelled) before it was taken: never sent.
        self.abandoned = False
        #: Its records had landed before (a resend answered from the duplicate window).
        self.duplicate = False
        #: Its caller is the one sending (it needs no wake-up).
        self.leading = False
        #: The next answered caller to wake once this one's caller is awake (a chain:
        #: see :func:`settle`).
        self.then: Any = None

    @classmethod
    def of(
        cls,
        batch: EncodedBatch,
        expected_offset: int | None = None,
        *,
        event: Any = None,
        future: Any = None,
    ) -> Entry:
        """The entry of an encoded batch (``send_batch``)."""
        size = sum(map(len, batch.parts))
        return cls(
            batch.count,
            batch.layout,
            batch.parts,
            size,
            expected_offset,
            event=event,
            future=future,
            ids=bool(batch.units),
        )

    @property
    def done(self) -> bool:
        """Whether the entry was answered."""
        return self.result is not None or self.error is not None

    def answer(self) -> list[RecordMetadata]:
        """The metadata of its records, or its error raised."""
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class ChainEnd:
    """What the last caller of a chain wakes (its ``then``): whoever waits for the chain
    to have run. ``event`` is a Signal."""

    __slots__ = ("event", "then")

    def __init__(self, event: Any) -> None:
        self.event = event
        self.then = None


def encode_one(
    value: object,
    key: object,
    headers: object,
    limits: Limits,
    expected_offset: int | None = None,
    *,
    event: Any = None,
    future: Any = None,
    message_id: object = None,
) -> Entry:
    """The queue entry of one record (no checksum: the merged batch gets one), checked
    against ``limits`` before any I/O: what ``encode_batch`` makes of the record, without
    building a :class:`Record` or a batch when it has no headers or id (this runs per
    send)."""
    if headers is not None:
        raw_key = None if key is None else to_bytes("key", key)
        record = Record(
            to_bytes("value", value),
            raw_key,
            headers,  # type: ignore[arg-type]
            message_id=message_id,  # type: ignore[arg-type]
        )
        batch = encode_batch((record,), limits, checksum=False)
        return Entry.of(batch, expected_offset, event=event, future=future)
    raw = value if type(value) is bytes else to_bytes("value", value)
    # A tuple of bytes: the garbage collector stops tracking it at its first pass (a list
    # stays tracked, one more object per queued record for every collection to go over).
    parts: tuple[bytes, ...]
    if key is None:
        size = len(raw)
        layout, parts = "0", (raw,)
    else:
        raw_key = key if type(key) is bytes else to_bytes("key", key)
        size = len(raw) + len(raw_key)
        layout, parts = "1", (raw, raw_key)
    if message_id is not None:
        # (The shapes encode_batch gives a record with an id: 4 or 5, the id last.)
        raw_id = check_message_id(message_id).encode("utf-8")
        size += len(raw_id)
        layout, parts = "45"[len(parts) - 1], (*parts, raw_id)
    if size > limits.max_record_bytes:
        limits.check_record(size)
    if size > limits.max_batch_bytes:
        limits.check_batch(1, size)
    return Entry(
        1, layout, parts, size, expected_offset, event=event, future=future,
        ids=message_id is not None,
    )  # fmt: skip


def take_group(
    queue: deque[Entry],
    limits: Limits,
    claim: Callable[[Any], bool],
    *,
    into: list[Entry] | None = None,
) -> list[Entry]:
    """Take the next call's entries off the head of ``queue``: one entry with an
    ``expected_offset``, or as many others as fit in ``limits``. Abandoned entries, ones
    already answered, and futures cancelled before they were taken (``claim`` returns
    False), are dropped.

    Each entry is appended to the group (``into``, if given) before it leaves the queue:
    an interrupt midway leaves every entry in one of them, at worst in both (and the
    caller putting the group back skips what the queue still holds)."""
    group: list[Entry] = [] if into is None else into
    count = size = 0
    while queue:
        entry = queue[0]
        if entry.abandoned or entry.done:
            queue.popleft()
            continue
        if entry.expected_offset is not None and group:
            break
        n = entry.count
        if group and (
            count + n > limits.max_batch_records or size + entry.size > limits.max_batch_bytes
        ):
            break
        if entry.future is not None and not claim(entry.future):
            queue.popleft()
            continue  # cancelled just now: never sent
        group.append(entry)
        queue.popleft()
        if entry.expected_offset is not None:
            break
        count += n
        size += entry.size
    return group


class _Batch(Protocol):
    """What :func:`merge_batches` reads of a batch (an EncodedBatch, or an Entry)."""

    @property
    def layout(self) -> str: ...
    @property
    def parts(self) -> Sequence[bytes]: ...
    @property
    def checksum(self) -> str: ...


def merge_batches(batches: Sequence[_Batch]) -> EncodedBatch:
    """One batch made of ``batches`` (encoded batches, or queue entries) in order: the
    very batch ``encode_batch`` makes of all their records (same layout, parts and
    checksum; a batch encoded without its checksum gets it here). Where records carry
    message ids, each of ``batches`` is a unit of its own (``units``)."""
    if len(batches) == 1:
        one = batches[0]
        if one.checksum and isinstance(one, EncodedBatch):
            return one
        layout, parts = one.layout, list(one.parts)
    else:
        layout = "".join([b.layout for b in batches])
        parts = [part for b in batches for part in b.parts]
    units = ""
    if any([_has_ids(b) for b in batches]):
        units = ",".join([str(len(b.layout)) for b in batches])
    return EncodedBatch(len(layout), layout, parts, batch_digest(layout, parts), units)


def _has_ids(batch: _Batch) -> bool:
    if isinstance(batch, Entry):
        return batch.ids
    return bool(getattr(batch, "units", ""))


#: What answers futures: the futures of a group and their results or errors, in one call.
Give = Callable[[list[Any], list[object]], None]

#: The ``result`` of a send_async() entry once answered: its answer went to its future.
_GIVEN: list[RecordMetadata] = []


def answered(
    count: int,
    *,
    topic: str,
    partition: int,
    first_offset: int,
    epoch: int,
    answers: dict[int, tuple[int, int]] | None,
    duplicate: bool = False,
) -> list[RecordMetadata]:
    """The metadata of a call's ``count`` records: those ``answers`` names (answered by
    their message ids) get their original's, marked duplicate; the others were written, in
    order, from ``first_offset`` on (with ``duplicate``, by an earlier send: a resend
    answered from the duplicate window, every record marked so).

    >>> [(m.offset, m.duplicate) for m in answered(3, topic="t", partition=0,
    ...     first_offset=10, epoch=2, answers={1: (4, 1)})]
    [(10, False), (4, True), (11, False)]
    """
    if not answers and not duplicate:
        return placed(topic, partition, first_offset, epoch, count)
    answers = answers or {}
    out: list[RecordMetadata] = []
    offset = first_offset
    for i in range(count):
        original = answers.get(i)
        if original is None:
            out.append(RecordMetadata(topic, partition, offset, epoch, duplicate))
            offset += 1
        else:
            out.append(RecordMetadata(topic, partition, original[0], original[1], True))
    return out


def settle(
    group: Sequence[Entry],
    metadata: list[RecordMetadata],
    *,
    give: Give,
    chain: bool = False,
) -> Entry | None:
    """Answer each entry of a group with its own records' slice of ``metadata`` (the
    group's, in order: see :func:`answered`; ``give`` settles the futures, all in one
    call).

    Waiting callers are woken at once, or with ``chain`` one after the other: the first
    is returned, not woken (its sender wakes it when it suits, see :func:`wake`), and each
    wakes the next (``then``) once it runs. A caller that gave up is never in a chain. With
    ``chain``, call this and :func:`pass_on` under one lock (the queue's guard): a caller
    that gives up as its group is answered is then either left out, or passes the chain
    on as it leaves. Threads share one interpreter lock: woken all
    at once, all but one would wake only to sleep again on it, twice the context switches
    of a chain."""
    futures: list[Any] = []
    results: list[object] = []
    head: Entry | None = None
    last: Entry | None = None
    at = 0
    for entry in group:
        n = entry.count
        if entry.future is not None:
            entry.result = _GIVEN
            futures.append(entry.future)
            results.append(metadata[at])  # send_async: one record
        else:
            entry.result = metadata[at : at + n]
            if entry.event is not None and not entry.leading and not entry.abandoned:
                if not chain:
                    entry.event.set()
                elif last is None:
                    head = last = entry
                else:
                    last.then = last = entry
        at += n
    if futures:
        give(futures, results)
    return head


def wake(entry: Entry | None) -> None:
    """Wake the caller of ``entry`` (the head of a chain :func:`settle` returned, or the
    ``then`` of an entry whose caller is awake); the chain goes on from there."""
    if entry is not None:
        entry.event.set()


def pass_on(entry: Entry) -> None:
    """Called by an answered caller once awake: wake the next one of its chain."""
    then = entry.then
    if then is not None:
        entry.then = None
        then.event.set()


def fail(group: Sequence[Entry], error: BaseException, give: Give) -> None:
    """Answer each entry with ``error`` (``give`` fails the futures, all in one call)."""
    futures: list[Any] = []
    for entry in group:
        entry.error = error
        if entry.future is not None:
            futures.append(entry.future)
        elif entry.event is not None and not entry.leading:
            entry.event.set()
    if futures:
        give(futures, [error] * len(futures))

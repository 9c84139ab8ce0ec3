"""Reads of a partition: plain commands in one pipeline, no script (G6, G9). No I/O.

A read fetches the partition's metadata, the records from an offset (XRANGE, or XREAD
when it may block), and the incarnation again after the fetch, so a log recreated while
a blocking read waited is never returned as the old one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._keys import PartitionKeys
from .._record import EMPTY_HEADERS, Record, decode_headers
from .._text import text
from .base import Command, ReadCall
from .topic import PartitionInfo


@dataclass(frozen=True, slots=True)
class Batch:
    """A read's reply: the partition as it was before the fetch, the records from the asked
    offset, and the partition's incarnation right after the fetch (G9: a log recreated
    while a blocking read waited must not be returned as the old one)."""

    partition: PartitionInfo | None
    records: list[Record]
    incarnation_after: str | None


def offset_id(offset: int) -> str:
    """The stream ID of an offset (G6: offset o is entry 0-(o+1))."""
    return f"0-{offset + 1}"


def read(pk: PartitionKeys, offset: int, count: int, *, block_ms: int = 0) -> ReadCall[Batch]:
    """Read up to ``count`` records from ``offset``; with ``block_ms``, wait for new ones."""
    meta: Command = ("HMGET", pk.meta, "inc", "next", "start")
    fetch: Command
    if block_ms > 0:
        # Entries with an ID above 0-offset are the records at offsets >= offset.
        fetch = ("XREAD", "COUNT", count, "BLOCK", block_ms, "STREAMS", pk.stream, f"0-{offset}")
    else:
        fetch = ("XRANGE", pk.stream, offset_id(offset), "+", "COUNT", count)

    def parse(replies: list[Any]) -> Batch:
        inc, nxt, start = replies[0]
        info = None if inc is None else PartitionInfo(text(inc), int(nxt), int(start))
        entries = replies[1]
        if block_ms > 0:
            entries = _xread_entries(entries)
        after = replies[2]
        return Batch(info, _records(pk, entries), None if after is None else text(after))

    after: Command = ("HGET", pk.meta, "inc")
    return ReadCall(commands=(meta, fetch, after), parse=parse, blocking_ms=block_ms)


def partition_info(pk: PartitionKeys) -> ReadCall[PartitionInfo | None]:
    """Read a partition's metadata (None when missing)."""

    def parse(replies: list[Any]) -> PartitionInfo | None:
        inc, nxt, start, max_len = replies[0]
        if inc is None:
            return None
        return PartitionInfo(text(inc), int(nxt), int(start), int(max_len or 0))

    return ReadCall(commands=(("HMGET", pk.meta, "inc", "next", "start", "maxlen"),), parse=parse)


def _xread_entries(reply: Any) -> list[Any]:
    """The entries of a one-stream XREAD reply: RESP3 ``{stream: entries}`` or RESP2
    ``[[stream, entries]]``."""
    if not reply:
        return []
    entries = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
    return list(entries)


def _records(pk: PartitionKeys, entries: list[Any]) -> list[Record]:
    """Stream entries as Records; ``entries`` is consumed (left empty). Hot when reading
    (about half of a read's client time):

    - numbers a batch shares (timestamp, epoch, producer id) are converted once per run of
      equal values, not once per record;
    - offsets: when the first and last IDs are 0-a and 0-b with b - a = len - 1, the entries
      are exactly 0-a .. 0-b (IDs strictly increase), so no other ID is parsed;
    - fields: an entry in the append script's own layouts (t, e, p, v, then at most one
      of k or m: key or message id, which the script writes last) is unpacked by
      position; any other (headers, key and message id, RESP3 maps) goes through a dict;
    - each entry is taken out of the reply as its record is made, so the reply's lists
      are freed one by one, not all at the end: the collector's youngest generation then
      does not fill up, and get scanned, while the records are built (this halves a
      page's client time);
    - each Record is built as a :class:`_Building` (same slots, not frozen: plain attribute
      stores) whose class is then set to Record, without Record.__init__ (a frozen
      dataclass sets each field through object.__setattr__ and re-checks types): the
      values come from our own entries.
    """
    count = len(entries)
    if not count:
        return []
    topic, partition = pk.topic, pk.partition
    first = _entry_offset(entries[0][0])
    offsets: range | list[int]
    if first is not None and _entry_offset(entries[-1][0]) == first + count - 1:
        offsets = range(first, first + count)
    else:
        offsets = [_any_entry_offset(entry[0]) for entry in entries]
    out = []
    new, building, record_class = object.__new__, _Building, Record
    record: Any
    empty = EMPTY_HEADERS
    last_t = last_e = last_p = None
    ts = epoch = 0
    pid: int | None = None
    entries.reverse()  # (consumed: taken from the end)
    take = entries.pop
    for offset in offsets:
        raw_fields = take()[1]
        size = len(raw_fields) if type(raw_fields) is list else 0
        key, headers, message_id = None, empty, None
        if size == 8:
            tn, t, en, e, pn, p, vn, value = raw_fields
            own = tn == b"t" and en == b"e" and pn == b"p" and vn == b"v"
        elif size == 10:
            tn, t, en, e, pn, p, vn, value, xn, x = raw_fields
            own = tn == b"t" and en == b"e" and pn == b"p" and vn == b"v"
            if xn == b"k":
                key = x
            elif xn == b"m":
                message_id = x.decode() if type(x) is bytes else text(x)
            else:
                own = False
        else:
            own = False
        if not own:
            t, e, p, value, key, headers = _fields(raw_fields)
            message_id = _message_id(raw_fields)
        if t != last_t:
            ts, last_t = int(t), t
        if e != last_e:
            epoch, last_e = int(e), e
        if p != last_p:
            pid, last_p = (int(p) if p else None), p
        record = new(building)
        record.value = value
        record.key = key
        record.headers = headers
        record.topic = topic
        record.partition = partition
        record.offset = offset
        record.epoch = epoch
        record.producer_id = pid
        record.timestamp_ms = ts
        record.message_id = message_id
        record.__class__ = record_class
        out.append(record)
    return out


def _fields(raw_fields: Any) -> tuple[bytes, bytes, bytes | None, bytes, Any, Any]:
    """Timestamp, epoch, producer id, value, key and headers of an entry in any layout
    (a flat list of names and values, or a RESP3 map)."""
    fields = (
        raw_fields
        if isinstance(raw_fields, dict)
        else dict(zip(raw_fields[::2], raw_fields[1::2], strict=True))
    )
    get = fields.get
    headers = get(b"h")
    return (
        get(b"t", b"0"),
        get(b"e", b"0"),
        get(b"p"),
        get(b"v", b""),
        get(b"k"),
        decode_headers(headers) if headers else EMPTY_HEADERS,
    )


def _message_id(raw_fields: Any) -> str | None:
    """The message id of an entry in any layout (field ``m``), or None."""
    if isinstance(raw_fields, dict):
        raw = raw_fields.get(b"m")
    else:
        # The append script writes it last.
        raw = raw_fields[-1] if len(raw_fields) >= 2 and raw_fields[-2] == b"m" else None
    return None if raw is None else text(raw)


def _entry_offset(entry_id: Any) -> int | None:
    """The offset of an entry ID 0-(o+1) as bytes, else None (G6)."""
    if type(entry_id) is bytes and entry_id[:2] == b"0-":
        return int(entry_id[2:]) - 1
    return None


def _any_entry_offset(entry_id: Any) -> int:
    """The offset of any entry ID (bytes or str): its sequence part, minus one."""
    sid = entry_id if isinstance(entry_id, bytes) else entry_id.encode()
    return int(sid[sid.index(b"-") + 1 :]) - 1


class _Building:
    """A Record under construction: the same slots, in the same order, and not frozen.

    :func:`_records` fills one with plain attribute stores, then sets its class to
    :class:`Record` (allowed: the two layouts are the same, checked below at import)."""

    __slots__ = tuple(Record.__slots__)
    value: Any
    key: Any
    headers: Any
    topic: Any
    partition: Any
    offset: Any
    epoch: Any
    producer_id: Any
    timestamp_ms: Any
    message_id: Any


def _check_building() -> None:
    probe: Any = object.__new__(_Building)
    probe.__class__ = Record  # a TypeError if the layouts differ
    assert type(probe) is Record


_check_building()

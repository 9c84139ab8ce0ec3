"""Stored fields and entry IDs decoded, a value's place packed in one int, and both shown in
one-line messages.

>>> entry_offset(b"0-42")
41
>>> where(pack(3, 41))
'partition 3 offset 41'
"""

from __future__ import annotations

from typing import Any

# A value's place in the log packed in one int: (offset + 1) << 17 | partition, 0 meaning
# "no offset" (an entry whose ID is not 0-N). Millions of tuples would cost far more.
_PARTITION_BITS = 17  # topics have at most 100,000 partitions
#: The highest partition number a packed place can hold.
PARTITION_MASK = (1 << _PARTITION_BITS) - 1


def to_int(value: bytes | None) -> int | None:
    """A stored field as an int; None when it is missing or not a number."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def offset_field(meta: dict[bytes, bytes], name: bytes) -> int | None:
    """An offset field of the partition metadata; None unless it is an int >= 0."""
    value = to_int(meta.get(name))
    return None if value is None or value < 0 else value


def entry_offset(entry_id: bytes) -> int | None:
    """The offset an entry ID encodes (G6: 0-(offset+1)); None for any other shape."""
    ms, sep, seq = entry_id.partition(b"-")
    if sep and ms == b"0" and seq.isdigit() and int(seq) >= 1:
        return int(seq) - 1
    return None


def as_bytes(value: Any) -> bytes:
    """A reply element as bytes (the client's connections never decode; str is encoded)."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def pack(partition: int, offset: int | None) -> int:
    """A value's place (partition, offset or None) as one int."""
    return ((0 if offset is None else offset + 1) << _PARTITION_BITS) | partition


def unpack(loc: int) -> tuple[int, int | None]:
    """The (partition, offset or None) of a place made by :func:`pack`."""
    offset = (loc >> _PARTITION_BITS) - 1
    return loc & PARTITION_MASK, None if offset < 0 else offset


def where(loc: int) -> str:
    """A packed place for a message: 'partition P offset O'."""
    p, o = unpack(loc)
    return f"partition {p} " + ("(entry without an offset)" if o is None else f"offset {o}")


def show(value: bytes) -> str:
    """A value for a one-line message: its text when printable, else hex; long ones cut."""
    try:
        decoded = value.decode("utf-8")
    except UnicodeDecodeError:
        decoded = None
    if decoded is not None and decoded.isprintable():
        return repr(decoded) if len(decoded) <= 40 else repr(decoded[:40]) + "..."
    return "0x" + value[:20].hex() + ("..." if len(value) > 20 else "")


def offsets(a: int, b: int) -> str:
    """Offsets a..b and the entry IDs that hold them, for a message."""
    if a == b:
        return f"offset {a} (entry 0-{a + 1})"
    return f"offsets {a}..{b} (entries 0-{a + 1}..0-{b + 1})"

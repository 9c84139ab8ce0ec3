"""Records, their metadata, and the size limits of batches.

Records and metadata are slotted frozen dataclasses (no pydantic on the hot path). Values
and keys are bytes; a ``str`` is encoded as UTF-8 when the record is made. Headers are a
mapping of ``str`` to bytes (or str), stored in one compact binary field.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .errors import InvalidArgument, InvalidArgumentType, RecordTooLarge

EMPTY_HEADERS: Mapping[str, bytes] = MappingProxyType({})
_EMPTY = EMPTY_HEADERS
MAX_HEADERS = 1024
MAX_HEADER_NAME = 1024
#: The longest message id, in UTF-8 bytes.
MAX_MESSAGE_ID = 1024


def to_bytes(what: str, value: object) -> bytes:
    """``value`` as bytes: bytes as is, str as UTF-8, anything else refused."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgumentType(
        f"{what} must be bytes or str, got {type(value).__name__}: encode it first "
        "(json.dumps(x).encode(), say)"
    )


def _headers(headers: object) -> Mapping[str, bytes]:
    if headers is None:
        return _EMPTY
    if not isinstance(headers, Mapping):
        raise InvalidArgumentType(
            f"headers must be a mapping of str to bytes, got {type(headers).__name__}"
        )
    out: dict[str, bytes] = {}
    if len(headers) > MAX_HEADERS:
        raise RecordTooLarge(f"{len(headers)} headers; a record takes at most {MAX_HEADERS}")
    for name, value in headers.items():
        if not isinstance(name, str):
            raise InvalidArgumentType(f"header names must be non-empty str, got {name!r}")
        if not name:
            raise InvalidArgument("header names must be non-empty str, got '': name the header")
        if len(name.encode("utf-8")) > MAX_HEADER_NAME:
            raise RecordTooLarge(f"header name {name[:40]!r}... is over {MAX_HEADER_NAME} bytes")
        out[name] = to_bytes(f"header {name!r}", value)
    return MappingProxyType(out) if out else _EMPTY


def check_message_id(message_id: object) -> str:
    """A message id as given, checked: a non-empty ``str`` of at most
    :data:`MAX_MESSAGE_ID` UTF-8 bytes."""
    if type(message_id) is not str:
        raise InvalidArgumentType(
            f"message_id must be a str, got {type(message_id).__name__}: the application's "
            "own id of the record (its input position, an order id), as text"
        )
    if not message_id:
        raise InvalidArgument("message_id must be non-empty: pass None for a record without one")
    if len(message_id) > MAX_MESSAGE_ID // 4 and len(message_id.encode("utf-8")) > MAX_MESSAGE_ID:
        raise RecordTooLarge(
            f"message_id {message_id[:40]!r}... is over {MAX_MESSAGE_ID} bytes: use a shorter "
            "id (a digest of a long one, say)"
        )
    return message_id


@dataclass(frozen=True, slots=True)
class Record:
    """One record: what you send, and what a reader returns (then with its position).

    >>> Record(b"hello", key="user-1").key
    b'user-1'
    >>> Record("héllo").value
    b'h\\xc3\\xa9llo'

    On records read back, ``topic``, ``partition``, ``offset``, ``epoch``, ``producer_id``
    and ``timestamp_ms`` (server time of the append) are set.

    ``message_id`` is the application's own id of the record: a record whose id was already
    appended to its partition within the topic's id window is not appended again (its send
    returns the original's metadata, with ``duplicate`` set).

    >>> Record(b"row 41", message_id="input-0/41").message_id
    'input-0/41'
    """

    value: bytes
    key: bytes | None = None
    headers: Mapping[str, bytes] = field(default_factory=lambda: _EMPTY)
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    epoch: int | None = None
    producer_id: int | None = None
    timestamp_ms: int | None = None
    message_id: str | None = None

    def __post_init__(self) -> None:
        if type(self.value) is not bytes:
            object.__setattr__(self, "value", to_bytes("value", self.value))
        if self.key is not None and type(self.key) is not bytes:
            object.__setattr__(self, "key", to_bytes("key", self.key))
        if self.headers is not _EMPTY:
            object.__setattr__(self, "headers", _headers(self.headers))
        if self.message_id is not None:
            check_message_id(self.message_id)

    @property
    def size(self) -> int:
        """Bytes this record counts against the limits (value, key, encoded headers,
        message id).

        >>> fencing.Record(b"hello", key=b"k", headers={"h": b"v"}).size
        16
        """
        size = len(self.value) + len(self.key or b"") + len(encode_headers(self.headers))
        return size + len(self.message_id.encode("utf-8")) if self.message_id else size


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an appended record landed.

    ``duplicate`` is True for a record this send did not append because it had landed
    before: its ``message_id`` was appended before, or the send resent an idempotent
    producer's batch that landed before. The offset and epoch are the original's. It is
    not part of equality: a record's metadata is where it is.

    >>> RecordMetadata("orders", 0, 41, 3).offset
    41
    """

    topic: str
    partition: int
    offset: int
    epoch: int
    duplicate: bool = field(default=False, compare=False)


class _Placing:
    """A RecordMetadata under construction: the same slots, in the same order, not frozen
    (:func:`placed` fills one with plain stores, then makes it a RecordMetadata; the two
    layouts are checked to match at import)."""

    __slots__ = tuple(RecordMetadata.__slots__)
    topic: Any
    partition: Any
    offset: Any
    epoch: Any
    duplicate: Any


def placed(
    topic: str, partition: int, first_offset: int, epoch: int, n: int
) -> list[RecordMetadata]:
    """The metadata of ``n`` records appended at ``first_offset`` onwards: equal to
    ``[RecordMetadata(topic, partition, first_offset + i, epoch) for i in range(n)]``,
    built without the frozen dataclass's ``__init__`` (this runs for every record sent).

    >>> placed("orders", 0, 41, 3, 2)[1]
    RecordMetadata(topic='orders', partition=0, offset=42, epoch=3)
    """
    out: list[RecordMetadata] = []
    new = object.__new__
    for offset in range(first_offset, first_offset + n):
        md: Any = new(_Placing)
        md.topic = topic
        md.partition = partition
        md.offset = offset
        md.epoch = epoch
        md.duplicate = False
        md.__class__ = RecordMetadata
        out.append(md)
    return out


def _check_placing() -> None:
    probe: Any = object.__new__(_Placing)
    probe.__class__ = RecordMetadata  # a TypeError if the layouts differ
    assert type(probe) is RecordMetadata


_check_placing()


@dataclass(frozen=True, slots=True)
class Limits:
    """Size limits, checked before any I/O (bounded work per script: none may stall Redis).

    >>> Limits().max_batch_records
    1000
    """

    max_record_bytes: int = 1024 * 1024
    max_batch_records: int = 1000
    max_batch_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("max_record_bytes", "max_batch_records", "max_batch_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"{name} must be a positive int, got {value!r}")

    def check_batch(self, count: int, total: int) -> None:
        """Refuse a batch over the limits."""
        if count == 0:
            raise InvalidArgument("a batch needs at least one record")
        if count > self.max_batch_records:
            raise RecordTooLarge(
                f"a batch of {count} records is over the limit of {self.max_batch_records}: "
                "split it, or raise max_batch_records on the topic"
            )
        if total > self.max_batch_bytes:
            raise RecordTooLarge(
                f"a batch of {total} bytes is over the limit of {self.max_batch_bytes}: "
                "split it, or raise max_batch_bytes on the topic"
            )

    def check_record(self, size: int) -> None:
        """Refuse a record over the limit."""
        if size > self.max_record_bytes:
            raise RecordTooLarge(
                f"a record of {size} bytes is over the limit of {self.max_record_bytes}: "
                "store large payloads elsewhere and send a reference, or raise "
                "max_record_bytes on the topic"
            )


DEFAULT_LIMITS = Limits()

_COUNT = struct.Struct(">H")
_NAME = struct.Struct(">H")
_VALUE = struct.Struct(">I")


def encode_headers(headers: Mapping[str, bytes]) -> bytes:
    """Headers as one binary field: count, then (name length, name, value length, value)."""
    if not headers:
        return b""
    parts = [_COUNT.pack(len(headers))]
    for name, value in headers.items():
        raw = name.encode("utf-8")
        parts += [_NAME.pack(len(raw)), raw, _VALUE.pack(len(value)), value]
    return b"".join(parts)


def decode_headers(data: bytes) -> Mapping[str, bytes]:
    """Invert :func:`encode_headers`."""
    if not data:
        return _EMPTY
    (count,) = _COUNT.unpack_from(data, 0)
    pos = _COUNT.size
    out: dict[str, bytes] = {}
    for _ in range(count):
        (n,) = _NAME.unpack_from(data, pos)
        pos += _NAME.size
        name = data[pos : pos + n].decode("utf-8")
        pos += n
        (m,) = _VALUE.unpack_from(data, pos)
        pos += _VALUE.size
        out[name] = data[pos : pos + m]
        pos += m
    return MappingProxyType(out)

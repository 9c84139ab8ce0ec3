"""Records from whole Arrow columns: partitions, encodings and chain framings computed once
per Arrow batch in Arrow and numpy, so that a task's remaining per-row Python work is the
chain hash and the call's lists. Needs pyarrow and numpy (the spark extra).

Only batches of the common layout go this way (:func:`.rows.plain_layout`: a string or
binary value, at most a string or binary key, no nulls in the value); every other batch
becomes Python rows. Every result here equals, row for row, what :func:`.rows.encode_row` and
:func:`fencing._protocol.sink.chain` make of the same rows: the sink's dedupe depends on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._partitioner import _M, _SEED
from .rows import RowLayout

if TYPE_CHECKING:
    from numpy.typing import NDArray

_BINARY = (pa.binary(), pa.string())
_LARGE = (pa.large_binary(), pa.large_string())


def murmur2_array(offsets: NDArray[Any], data: NDArray[np.uint8]) -> NDArray[np.int32]:
    """Kafka's murmur2 (:func:`fencing._partitioner.murmur2`) of every item of a binary
    column given as its ``offsets`` (one more than items) and its ``data`` bytes.

    One pass per 4-byte block over the items that still have one (the longest first), then
    the tails and the final mix over all: numpy's uint32 products wrap as murmur2's do.

    >>> import numpy as np
    >>> murmur2_array(np.array([0, 2, 8]), np.frombuffer(b"21foobar", np.uint8)).tolist()
    [-973932308, -790332482]
    """
    starts = offsets[:-1].astype(np.int64)
    lengths = offsets[1:].astype(np.int64) - starts
    m = np.uint32(_M)
    h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
    blocks = lengths // 4
    if len(blocks) and blocks.max() > 0:
        order = np.argsort(-blocks, kind="stable")
        hs = h[order]
        firsts = starts[order]
        # Items with more than j blocks: a prefix of the longest-first order.
        counts = np.searchsorted(-blocks[order], -np.arange(int(blocks.max())), side="left")
        for j, c in enumerate(counts.tolist()):
            p = firsts[:c] + 4 * j
            k = (
                data[p].astype(np.uint32)
                | (data[p + 1].astype(np.uint32) << 8)
                | (data[p + 2].astype(np.uint32) << 16)
                | (data[p + 3].astype(np.uint32) << 24)
            )
            k *= m
            k ^= k >> 24
            k *= m
            head = hs[:c]
            head *= m
            head ^= k
        h[order] = hs
    rest = lengths % 4
    end = starts + blocks * 4
    for n, shift in ((3, 16), (2, 8)):
        at = rest >= n
        h[at] ^= data[end[at] + n - 1].astype(np.uint32) << shift
    at = rest >= 1
    h[at] ^= data[end[at]].astype(np.uint32)
    h[at] *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h.view(np.int32)


def _buffers(column: pa.Array) -> tuple[NDArray[Any], NDArray[np.uint8]]:
    """(offsets, data) of a binary column (its slice)."""
    _, offsets, data = column.buffers()
    wide = np.int64 if column.type in _LARGE else np.int32
    o = np.frombuffer(offsets, wide)[column.offset : column.offset + len(column) + 1]
    d = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return o, d


def partitions_of_keys(keys: pa.Array, partitions: int) -> NDArray[np.int64]:
    """Kafka's ``toPositive(murmur2(key)) % partitions`` of every key (nulls: any value)."""
    offsets, data = _buffers(keys)
    return (murmur2_array(offsets, data).view(np.uint32) & 0x7FFFFFFF).astype(np.int64) % partitions


def _as_binary(column: pa.Array) -> pa.Array:
    """A string or binary column as binary (the same bytes: UTF-8)."""
    return column.cast(pa.large_binary() if column.type in _LARGE else pa.binary())


def plain_columns(
    batch: pa.RecordBatch, layout: RowLayout
) -> tuple[pa.Array, pa.Array | None] | None:
    """The value and key columns of ``batch`` as binary, or None when a row of it needs
    :func:`.rows.encode_row` (a null value, a column of another type)."""
    assert layout.value is not None
    value = batch.column(layout.value)
    if value.type not in _BINARY + _LARGE or value.null_count:
        return None
    key = None if layout.key is None else batch.column(layout.key)
    if key is not None and key.type not in _BINARY + _LARGE:
        if key.null_count != len(key):
            return None
        key = None  # all null: no key, whatever the column's type
    return _as_binary(value), None if key is None else _as_binary(key)


def encoded_columns(
    value: pa.Array,
    key: pa.Array | None,
    first_index: int,
    keyless: int,
    partitions: int,
) -> Iterator[tuple[bytes, bytes | None, int, int, bytes]]:
    """(value, key, topic partition, size, chain framing) of each row: the framing is what
    :func:`fencing._protocol.sink.chain` hashes after the previous hash (the row's index
    being ``first_index`` onwards, its headers empty)."""
    n = len(value)
    index = pa.array(np.arange(first_index, first_index + n, dtype=np.int64)).cast(pa.string())
    vlen = pc.binary_length(value)
    colon = pa.scalar(b":", pa.binary())
    no_headers = pa.scalar(b"\0\0\0\0", pa.binary())
    if key is None or key.null_count == len(key):
        klen = np.zeros(n, np.int64)
        framed_key: Any = pa.scalar(b"\xff", pa.binary())
        targets = [keyless] * n
        keys: list[bytes | None] = [None] * n
    else:
        klen_or_null = pc.binary_length(key).cast(pa.int64())
        klen = klen_or_null.fill_null(0).to_numpy()
        be = klen.astype(">u4").tobytes()
        four = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), n, [None, pa.py_buffer(be)])
        framed_key = pc.if_else(
            key.is_null(),
            pa.scalar(b"\xff", pa.binary()),
            pc.binary_join_element_wise(four.cast(pa.binary()), key.cast(pa.binary()), b""),
        )
        found = partitions_of_keys(key, partitions)
        if key.null_count:
            found[key.is_null().to_numpy(zero_copy_only=False)] = keyless
        targets = found.tolist()
        keys = key.to_pylist()
    framing = pc.binary_join_element_wise(
        index.cast(pa.binary()),
        colon,
        vlen.cast(pa.string()).cast(pa.binary()),
        colon,
        value.cast(pa.binary()),
        framed_key,
        no_headers,
        pa.scalar(b"", pa.binary()),
    )
    sizes = (vlen.cast(pa.int64()).to_numpy() + klen).tolist()
    return zip(value.to_pylist(), keys, targets, sizes, framing.to_pylist(), strict=True)

"""Script calls of the Spark sink: begin, enlist a worker's producer, append a chunk,
finish a micro-batch. No I/O.

A micro-batch is identified by its :class:`Lineage` (app id, query id, batch id and the
batch's Spark partition count). Each row carries its index within its Spark partition and a
chain hash (:func:`chain`) over its index, its bytes and the hash of the row routed to the
same topic partition before it: what a retried or replayed attempt reproduces exactly when
the batch is deterministic, and what differs when it is not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._keys import PartitionKeys
from .._lua_loader import script
from .._text import text
from ..errors import CheckpointReset, FencingError, NondeterministicBatch, SinkError
from .base import ErrorReply, ScriptCall
from .partition_errors import partition_errors
from .producer import producer_errors
from .topic import EncodedBatch, Writer

#: How a refused query starts a new lineage, in a CheckpointReset's message (the data
#: source sink names its own option instead).
NEW_LINEAGE_HINT = "pass a new app_id, or new_lineage=True once"

#: The chain hash before the first row of a chain.
CHAIN_START = b""
#: Hex characters per chain hash in a script call (8 bytes of BLAKE2b).
HASH_HEX = 16


def chain(previous: bytes, index: int, value: bytes, key: bytes | None, headers: bytes) -> bytes:
    """The chain hash after a row: BLAKE2b-64 over the previous hash, the row's index and
    its parts with their lengths (so no two rows of other bytes share a framing).

    >>> chain(CHAIN_START, 0, b"v", None, b"").hex()
    '64fad467d3b7c4ea'
    """
    return chain_after(previous, chain_framing(index, value, key, headers))


def chain_framing(index: int, value: bytes, key: bytes | None, headers: bytes) -> bytes:
    """What :func:`chain` hashes after the previous hash: the row's index and its parts
    with their lengths (a sink task may build it for many rows at once).

    >>> chain_framing(3, b"v", b"k", b"")
    b'3:1:v\\x00\\x00\\x00\\x01k\\x00\\x00\\x00\\x00'
    """
    k = b"\xff" if key is None else len(key).to_bytes(4, "big") + key
    return b"%d:%d:%b%b%b%b" % (
        index,
        len(value),
        value,
        k,
        len(headers).to_bytes(4, "big"),
        headers,
    )


def chain_after(previous: bytes, framing: bytes) -> bytes:
    """The chain hash after a row whose :func:`chain_framing` is ``framing``."""
    return hashlib.blake2b(previous + framing, digest_size=8).digest()


@dataclass(frozen=True, slots=True)
class Lineage:
    """Which micro-batch a call belongs to."""

    app_id: str
    query_id: str
    batch_id: int
    partitions: int


@dataclass(frozen=True, slots=True)
class Begun:
    """A sink_begin reply: ``status`` is ``fresh``, ``lineage`` (a new lineage replaced
    ``stored_query``), ``replay`` (begun before, not finished) or ``done`` (finished before:
    ``rows`` were written to this partition). ``previous`` is the query id the caller's
    lineage took over from on this partition ('' if it took over none)."""

    status: str
    stored_query: str
    stored_batch: int
    rows: int
    previous: str = ""


@dataclass(frozen=True, slots=True)
class Chunk:
    """Rows of one Spark partition routed to one topic partition, ready to append.

    ``indexes`` ascend; ``hashes`` is the chain hash after each row, concatenated;
    ``prev_index`` / ``prev_hash`` are those of the row routed there just before the chunk
    (-1 / ``CHAIN_START`` when none)."""

    spark_partition: int
    prev_index: int
    prev_hash: bytes
    indexes: Sequence[int]
    hashes: bytes
    batch: EncodedBatch


@dataclass(frozen=True, slots=True)
class SinkWritten:
    """A sink_append reply: ``written`` records landed at ``first_offset`` onwards (-1 when
    none); ``skipped`` were written by an earlier attempt."""

    first_offset: int
    written: int
    skipped: int
    timestamp_ms: int


def source_of(namespace: str, topic: str, incarnation: str, partition: int) -> str:
    """A source partition's identity, as the sink records positions under it: the rows read
    from it name it, so that another history of the topic never matches.

    >>> source_of("fencing", "orders", "3f2a", 1)
    'fencing/orders/3f2a/1'
    """
    return f"{namespace}/{topic}/{incarnation}/{partition}"


def source_message_id(source: str, offset: int, occurrence: int) -> str:
    """The message id of a row made from the record at ``offset`` of ``source``
    (:func:`source_of`); ``occurrence`` counts the rows made from that record before it
    (a row exploded into several keeps them apart).

    >>> source_message_id("fencing/orders/3f2a/1", 41, 0)
    'src:fencing/orders/3f2a/1:41'
    >>> source_message_id("fencing/orders/3f2a/1", 41, 2)
    'src:fencing/orders/3f2a/1:41.2'
    """
    return f"src:{source}:{offset}" + (f".{occurrence}" if occurrence else "")


def sink_errors(pk: PartitionKeys, lineage: Lineage) -> Any:
    """Error mapping of the sink's calls on one partition."""
    fallback = producer_errors(pk)
    app, query, batch = lineage.app_id, lineage.query_id, lineage.batch_id

    def convert(reply: ErrorReply) -> FencingError:
        f = reply.fields
        if reply.code == "SINK_LINEAGE":
            finished = f["finished_batch"]
            done = f"finished batches up to {finished}" if finished != "-1" else "began"
            holder = f"app_id {app!r} belongs to streaming query {f['stored_query']} (it {done}"
            if f.get("took_over_from") == query:
                return CheckpointReset(
                    f"{holder}, last began batch {f['stored_batch']}), which took it over from "
                    f"this query {query} as a new lineage: this query's checkpoint is intact, "
                    "but its rows are now written by the other query. Nothing was written. "
                    "Stop this query; to write from it again instead, stop the other one "
                    f"first and start this one with {NEW_LINEAGE_HINT}",
                    app_id=app,
                    query_id=query,
                    batch_id=batch,
                )
            return CheckpointReset(
                f"{holder}, last began batch {f['stored_batch']}), but this is query {query}: "
                "the checkpoint was deleted or reset (its batch ids start again), or another "
                "query runs under this app_id. Nothing was written. Restore the checkpoint; "
                f"or, to write this query's rows as a new lineage, {NEW_LINEAGE_HINT}, with "
                'its source started after what the old query wrote (see the how-to "my '
                'checkpoint is gone"), or the rows it reads again are written again',
                app_id=app,
                query_id=query,
                batch_id=batch,
            )
        if reply.code == "SINK_PARTITIONING":
            return NondeterministicBatch(
                f"micro-batch {batch} of query {query} (app_id {app!r}) was first written "
                f"with {f['stored']} Spark partitions and is replayed with {f['found']}: its "
                "rows cannot be matched to those already written, so nothing more was "
                "written. Make the batch deterministic (the same source offsets, partitioning "
                "and row order within a partition) - for example restore the repartition() "
                "that ran when the batch was first written",
                app_id=app,
                query_id=query,
                batch_id=batch,
            )
        if reply.code == "SINK_MISMATCH":
            return NondeterministicBatch(
                f"micro-batch {batch} of query {query} (app_id {app!r}): Spark partition "
                f"{f['spark_partition']} holds other rows, or rows in another order, than the "
                f"attempt that wrote its rows up to index {f['stored_index']} to partition "
                f"{pk.partition} of topic {pk.topic!r}; nothing more of it was written. The "
                "batch is not deterministic: keep the source, partitioning and row order "
                "within a partition the same across attempts (sort within partitions before "
                "the sink if the order can vary)",
                app_id=app,
                query_id=query,
                batch_id=batch,
            )
        if reply.code == "SINK_STALE":
            return SinkError(
                f"micro-batch {batch} of query {query} (app_id {app!r}) is not the batch the "
                f"sink's driver began on partition {pk.partition} of topic {pk.topic!r} "
                f"(query {f['stored_query']}, batch {f['stored_batch']}): a task of an older "
                "batch or of another driver of this app_id. Nothing was written",
                app_id=app,
                query_id=query,
                batch_id=batch,
            )
        error: FencingError = fallback(reply)
        return error

    return convert


def begin(
    pk: PartitionKeys, lineage: Lineage, *, incarnation: str, new_lineage: bool
) -> ScriptCall[Begun]:
    """Begin (or replay) a micro-batch on one partition."""

    def parse(reply: list[Any]) -> Begun:
        status, query, batch, rows, previous = reply
        return Begun(text(status), text(query), int(batch), int(rows), text(previous))

    return ScriptCall(
        script=script("sink_begin"),
        keys=(pk.meta, pk.sink(lineage.app_id)),
        args=(
            incarnation,
            lineage.query_id,
            lineage.batch_id,
            lineage.partitions,
            "1" if new_lineage else "0",
        ),
        parse=parse,
        error=sink_errors(pk, lineage),
    )


def finish(
    pk: PartitionKeys,
    lineage: Lineage,
    *,
    incarnation: str,
    rows: int,
    written: int = 0,
    skipped: int = 0,
    positions: Mapping[str, int] | None = None,
) -> ScriptCall[int]:
    """Mark a micro-batch finished on one partition (every task succeeded): ``written`` and
    ``skipped`` are its rows here, added to the app's totals; ``positions`` the highest
    source offset the batch wrote per source (:func:`source_of`), kept at their highest.
    The app's task producers (:func:`enlist`) whose lease lapsed are removed there."""
    args: list[str | int] = [
        incarnation,
        lineage.query_id,
        lineage.batch_id,
        rows,
        written,
        skipped,
    ]
    for source, offset in sorted((positions or {}).items()):
        args.extend((source, offset))
    return ScriptCall(
        script=script("sink_commit"),
        keys=(pk.meta, pk.sink(lineage.app_id), pk.shared),
        args=tuple(args),
        parse=int,
        error=sink_errors(pk, lineage),
    )


def enlist(
    pk: PartitionKeys, app_id: str, *, incarnation: str, session: str, producer_id: str
) -> ScriptCall[bool]:
    """Record a worker's shared producer as a task producer of ``app_id`` on one partition
    (False: no batch of the app begun there, or the producer not registered there)."""
    return ScriptCall(
        script=script("sink_enlist"),
        keys=(pk.meta, pk.sink(app_id), pk.shared),
        args=(incarnation, session, producer_id),
        parse=lambda reply: int(reply) == 1,
        error=partition_errors(pk),
    )


def append(
    pk: PartitionKeys,
    lineage: Lineage,
    chunk: Chunk,
    *,
    incarnation: str,
    seen_next: int,
    writer: Writer,
    errors: Any = None,
) -> ScriptCall[SinkWritten]:
    """Append a chunk exactly once: rows an earlier attempt wrote are skipped, and a chunk
    whose chain does not pass through the stored state is refused."""

    def parse(reply: list[Any]) -> SinkWritten:
        first, written, skipped, ts = reply
        return SinkWritten(int(first), int(written), int(skipped), int(ts))

    args: list[str | int | bytes] = [
        incarnation,
        seen_next,
        writer.producer_id,
        writer.epoch,
        writer.session,
        writer.row_incarnation,
        lineage.query_id,
        lineage.batch_id,
        lineage.partitions,
        chunk.spark_partition,
        chunk.prev_index,
        chunk.prev_hash.hex(),
        " ".join(map(str, chunk.indexes)),
        chunk.hashes.hex(),
        chunk.batch.layout,
    ]
    args.extend(chunk.batch.parts)
    return ScriptCall(
        script=script("sink_append"),
        keys=(
            pk.meta,
            pk.stream,
            pk.owner,
            pk.sink(lineage.app_id),
            pk.message_ids,
            pk.message_id_queue,
        ),
        args=tuple(args),
        parse=parse,
        error=errors or sink_errors(pk, lineage),
        # A resend is deduplicated on the rows' indexes like any other attempt.
        resend_safe=True,
    )


__all__ = [
    "CHAIN_START",
    "HASH_HEX",
    "Begun",
    "Chunk",
    "Lineage",
    "SinkWritten",
    "append",
    "begin",
    "chain",
    "chain_after",
    "chain_framing",
    "enlist",
    "finish",
    "source_message_id",
    "source_of",
]

"""The Spark sink's executor side: write one Spark partition's rows, or verify them.

Runs inside Spark tasks, never on the driver's rows: each Python worker keeps one
:class:`~fencing.Client` and one SHARED producer per (url, namespace, topic), made on first
use and reused by every later task of that worker until it is idle (:mod:`.producers`). The
functions here take only picklable arguments (:class:`SinkConfig`,
:class:`~fencing._protocol.sink.Lineage`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import _protocol as protocol
from .._keys import Keys
from .._partitioner import partition_for_key
from .._protocol.sink import (
    CHAIN_START,
    Begun,
    Chunk,
    Lineage,
    chain,
    chain_framing,
    source_message_id,
    source_of,
)
from .._protocol.topic import EncodedBatch
from .._sync.metadata import metadata_of
from .._sync.producer import Producer, fenced_call
from .._sync.topic import Topic
from .._text import text
from ..errors import CheckpointReset, InvalidArgument
from . import producers
from .rows import RowLayout, arrow_rows, encode_row, plain_layout

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("fencing.spark.sink")


@dataclass(frozen=True, slots=True)
class SinkConfig:
    """What a task needs to write: where, and how rows become records."""

    url: str | None
    namespace: str | None
    topic: str
    layout: RowLayout
    chunk_records: int
    chunk_bytes: int
    lease_ttl: float
    #: The namespace of the topics the rows' source columns name (None: ``namespace``).
    source_namespace: str | None = None


@dataclass(slots=True)
class PartitionResult:
    """What one task did: rows seen, written and skipped (written by an earlier attempt),
    rows per topic partition (all, written, skipped), and with source columns the highest
    source offset of its rows per source (:func:`~fencing._protocol.sink.source_of`)."""

    spark_partition: int
    rows: int = 0
    written: int = 0
    skipped: int = 0
    per_target: dict[int, int] = field(default_factory=dict)
    written_to: dict[int, int] = field(default_factory=dict)
    skipped_to: dict[int, int] = field(default_factory=dict)
    positions: dict[str, int] = field(default_factory=dict)


class _Sources:
    """The message ids of rows that name their source position: the source partition's
    identity (read once per task: its incarnation) and the record's offset, numbered when
    several consecutive rows come from one record."""

    __slots__ = ("client_topic", "incarnations", "last", "layout", "namespace", "positions")

    def __init__(self, topic: Topic, layout: RowLayout, namespace: str) -> None:
        self.client_topic = topic
        self.layout = layout
        self.namespace = namespace
        self.incarnations: dict[tuple[str, int], str] = {}
        self.last: dict[str, tuple[int, int]] = {}  # source -> (offset, rows made from it)
        self.positions: dict[str, int] = {}

    def _incarnation(self, topic: str, partition: int) -> str:
        found = self.incarnations.get((topic, partition))
        if found is None:
            meta_key = Keys(self.namespace).partition(topic, partition).meta
            call = protocol.base.ReadCall(
                commands=(("HGET", meta_key, "inc"),), parse=lambda replies: replies[0]
            )
            context = metadata_of(self.client_topic).context
            raw = context.driver(context.settings.socket_timeout).read(
                call, context.budget_default()
            )
            if raw is None:
                raise InvalidArgument(
                    f"the rows name source partition {partition} of topic {topic!r} in "
                    f"namespace {self.namespace!r}, which does not exist: the sourceColumns "
                    "must be the topic, partition and offset columns of a fencing source "
                    "(and sourceNamespace its namespace)"
                )
            found = self.incarnations[(topic, partition)] = text(raw)
        return found

    def message_id(self, row: Any, index: int) -> str:
        """The row's message id; keeps the highest offset per source."""
        assert self.layout.source is not None
        ti, pi, oi = self.layout.source
        topic, partition, offset = row[ti], row[pi], row[oi]
        if not isinstance(topic, str) or type(partition) is not int or type(offset) is not int:
            names = ", ".join(self.layout.columns[i] for i in self.layout.source)
            raise InvalidArgument(
                f"row {index}: the source columns ({names}) hold {topic!r}, {partition!r}, "
                f"{offset!r}: each row needs its source topic, partition and offset (filter "
                "out rows without them, or drop the sourceColumns option)"
            )
        source = source_of(self.namespace, topic, self._incarnation(topic, partition), partition)
        last = self.last.get(source)
        occurrence = last[1] + 1 if last is not None and last[0] == offset else 0
        self.last[source] = (offset, occurrence)
        if offset > self.positions.get(source, -1):
            self.positions[source] = offset
        return source_message_id(source, offset, occurrence)


@dataclass(slots=True)
class BatchTotals:
    """A batch's task results summed per topic partition, and its highest source
    positions."""

    rows: dict[int, int] = field(default_factory=dict)
    written: dict[int, int] = field(default_factory=dict)
    skipped: dict[int, int] = field(default_factory=dict)
    positions: dict[str, int] = field(default_factory=dict)


def batch_totals(results: Iterable[Any]) -> BatchTotals:
    """The totals of task results (:class:`PartitionResult` or the data source's commit
    messages: the same fields)."""
    out = BatchTotals()
    for r in results:
        for into, found in (
            (out.rows, r.per_target),
            (out.written, r.written_to),
            (out.skipped, r.skipped_to),
        ):
            for t, n in found.items():
                into[t] = into.get(t, 0) + n
        for source, offset in r.positions.items():
            out.positions[source] = max(offset, out.positions.get(source, -1))
    return out


def shared_producer(config: SinkConfig) -> tuple[Topic, Producer]:
    """This worker's topic and shared producer for ``config`` (see :mod:`.producers`)."""
    return producers.shared_producer(config.url, config.namespace, config.topic, config.lease_ttl)


def enlist(topic: Topic, producer: Producer, app_id: str) -> None:
    """Record this worker's producer as a task producer of ``app_id`` on every partition of
    ``topic``, once per producer: its shared entry is then told apart by ``fencing status``
    and removed by the finishing of a batch once its lease lapsed, also on the partitions
    its tasks never wrote (a shared producer registers on all of them)."""
    if producers.enlisted(producer, app_id):
        return
    meta = metadata_of(topic)
    for t in range(topic.partitions):
        pk, inc = meta.partition_keys(t), meta.incarnation_of(t)
        fenced_call(
            producer,
            t,
            lambda writer, pk=pk, inc=inc: protocol.sink.enlist(  # type: ignore[misc]
                pk, app_id, incarnation=inc, session=writer.session, producer_id=writer.producer_id
            ),
        )
    producers.mark_enlisted(producer, app_id)


def forget(config: SinkConfig) -> None:
    """Drop this worker's topic and producer for ``config`` (the topic was deleted or made
    again): the next task opens it anew."""
    producers.forget(config.url, config.namespace, config.topic)


class _Target:
    """The chunk being filled for one topic partition, and the chain's last point there."""

    __slots__ = ("hashes", "head", "indexes", "layout", "parts", "prev_hash", "prev_index", "size")

    def __init__(self) -> None:
        self.prev_index = -1
        self.prev_hash = CHAIN_START
        self.head = CHAIN_START  # the chain hash after the last row routed here
        self.indexes: list[int] = []
        self.hashes: list[bytes] = []
        self.layout: list[str] = []
        self.parts: list[bytes] = []
        self.size = 0


def _chains(
    config: SinkConfig, spark_partition: int, rows: Iterable[Any], partitions: int
) -> Iterator[tuple[int, int, bytes, bytes, bytes | None, bytes]]:
    """(topic partition, index, chain hash, value, key, headers) per row, in order."""
    heads: dict[int, bytes] = {}
    layout = config.layout
    for index, row in enumerate(rows):
        value, key, headers, target = encode_row(layout, row, spark_partition, index, partitions)
        h = chain(heads.get(target, CHAIN_START), index, value, key, headers)
        heads[target] = h
        yield target, index, h, value, key, headers


#: One record ready for its chunk: value, key, encoded headers, topic partition, size,
#: message id, and its chain framing (:func:`~fencing._protocol.sink.chain_framing`).
_Encoded = tuple[bytes, "bytes | None", bytes, int, int, "str | None", bytes]


def _encoded_rows(
    config: SinkConfig,
    spark_partition: int,
    rows: Iterable[Any],
    *,
    first_index: int,
    partitions: int,
    sources: _Sources | None,
) -> Iterator[_Encoded]:
    """The records of Python rows, the first of them at ``first_index``."""
    layout = config.layout
    # A value and at most a key, both str or bytes: encoded here, row by row, without
    # encode_row's generality (same bytes, same partition); any other row goes through it.
    plain = plain_layout(layout)
    vi, ki = layout.value, layout.key
    keyless = spark_partition % partitions
    for index, row in enumerate(rows, first_index):
        if plain:
            value = row[vi]
            key = None if ki is None else row[ki]
            tv = type(value)
            tk = type(key)
            if (tv is str or tv is bytes) and (key is None or tk is str or tk is bytes):
                if tv is str:
                    value = value.encode("utf-8")
                if key is None:
                    t = keyless
                    size = len(value)
                else:
                    if tk is str:
                        key = key.encode("utf-8")
                    t = partition_for_key(key, partitions)
                    size = len(value) + len(key)
                headers = b""
            else:
                value, key, headers, t = encode_row(layout, row, spark_partition, index, partitions)
                size = len(value) + (0 if key is None else len(key)) + len(headers)
        else:
            value, key, headers, t = encode_row(layout, row, spark_partition, index, partitions)
            size = len(value) + (0 if key is None else len(key)) + len(headers)
        message_id = None if sources is None else sources.message_id(row, index)
        yield value, key, headers, t, size, message_id, chain_framing(index, value, key, headers)


def _encoded_batches(
    config: SinkConfig,
    spark_partition: int,
    batches: Iterable[pa.RecordBatch],
    partitions: int,
    sources: _Sources | None,
) -> Iterator[_Encoded]:
    """The records of Arrow batches: a batch of the plain layout from its whole columns
    (:mod:`.arrow`), any other as Python rows."""
    from . import arrow  # noqa: PLC0415 - numpy and pyarrow: the spark extra

    plain = plain_layout(config.layout)
    keyless = spark_partition % partitions
    first = 0
    for batch in batches:
        columns = arrow.plain_columns(batch, config.layout) if plain else None
        if columns is None:
            yield from _encoded_rows(
                config,
                spark_partition,
                arrow_rows([batch]),
                first_index=first,
                partitions=partitions,
                sources=sources,
            )
        else:
            for value, key, t, size, framing in arrow.encoded_columns(
                *columns, first, keyless, partitions
            ):
                yield value, key, b"", t, size, None, framing
        first += batch.num_rows


def write_partition(
    config: SinkConfig, lineage: Lineage, spark_partition: int, rows: Iterable[Any]
) -> Iterator[PartitionResult]:
    """Write one Spark partition's rows in chunks per topic partition; yields one result.

    The end of ``rows`` does not prove the partition complete (a failure upstream of the
    sink ends the iterator early, and Spark fails the task after): nothing here depends on
    it. Every chunk is deduplicated on the rows' indexes by the script.
    """
    return _write(
        config,
        lineage,
        spark_partition,
        lambda partitions, sources: _encoded_rows(
            config, spark_partition, rows, first_index=0, partitions=partitions, sources=sources
        ),
    )


def write_batches(
    config: SinkConfig, lineage: Lineage, spark_partition: int, batches: Iterable[pa.RecordBatch]
) -> Iterator[PartitionResult]:
    """:func:`write_partition` of the rows of Arrow batches: the same calls, with the
    routing and encoding of the common layout done over whole columns."""
    return _write(
        config,
        lineage,
        spark_partition,
        lambda partitions, sources: _encoded_batches(
            config, spark_partition, batches, partitions, sources
        ),
    )


def _write(
    config: SinkConfig,
    lineage: Lineage,
    spark_partition: int,
    encode: Callable[[int, _Sources | None], Iterator[_Encoded]],
) -> Iterator[PartitionResult]:
    topic, producer = shared_producer(config)
    enlist(topic, producer, lineage.app_id)
    meta = metadata_of(topic)
    limits = topic.limits
    max_records = min(config.chunk_records, limits.max_batch_records)
    max_bytes = min(config.chunk_bytes, limits.max_batch_bytes)
    targets: dict[int, _Target] = {}
    result = PartitionResult(spark_partition)
    rows_seen = 0

    def flush(t: int, target: _Target) -> None:
        if not target.indexes:
            return
        chunk = Chunk(
            spark_partition=spark_partition,
            prev_index=target.prev_index,
            prev_hash=target.prev_hash,
            indexes=target.indexes,
            hashes=b"".join(target.hashes),
            batch=EncodedBatch(len(target.layout), "".join(target.layout), target.parts, ""),
        )
        pk = meta.partition_keys(t)
        done = fenced_call(
            producer,
            t,
            lambda writer: protocol.sink.append(
                pk,
                lineage,
                chunk,
                incarnation=meta.incarnation_of(t),
                seen_next=meta.seen_next(t),
                writer=writer,
            ),
        )
        if done.written:
            meta.saw_next(t, done.first_offset + done.written)
        result.written += done.written
        result.skipped += done.skipped
        result.written_to[t] = result.written_to.get(t, 0) + done.written
        result.skipped_to[t] = result.skipped_to.get(t, 0) + done.skipped
        result.per_target[t] = result.per_target.get(t, 0) + len(target.indexes)
        target.prev_index = target.indexes[-1]
        target.prev_hash = target.hashes[-1]
        target.indexes, target.hashes, target.layout, target.parts = [], [], [], []
        target.size = 0

    layout = config.layout
    sources = (
        None
        if layout.source is None
        else _Sources(topic, layout, config.source_namespace or meta.context.keys.namespace)
    )
    max_record = limits.max_record_bytes
    blake2b = hashlib.blake2b
    for index, (value, key, headers, t, size, message_id, framing) in enumerate(
        encode(topic.partitions, sources)
    ):
        if size > max_record:
            limits.check_record(size)
        target = targets.get(t)
        if target is None:
            target = targets[t] = _Target()
        elif target.size + size > max_bytes:
            flush(t, target)
        # chain_after, inline: once per row.
        h = target.head = blake2b(target.head + framing, digest_size=8).digest()
        target.indexes.append(index)
        target.hashes.append(h)
        parts = target.parts
        parts.append(value)
        if key is None:
            shape = 0
        else:
            parts.append(key)
            shape = 1
        if headers:
            parts.append(headers)
            shape += 2
        if message_id is not None:
            parts.append(message_id.encode("utf-8"))
            shape += 4
        target.layout.append("01234567"[shape])
        target.size += size
        if len(target.indexes) >= max_records:
            flush(t, target)
        rows_seen += 1
    result.rows = rows_seen
    for t, target in targets.items():
        flush(t, target)
    if sources is not None:
        result.positions = sources.positions
    yield result


def begin_batch(topic: Topic, lineage: Lineage, *, new_lineage: bool) -> list[Begun]:
    """Begin (or replay) ``lineage``'s micro-batch on every partition of ``topic``; the
    replies in partition order. Idempotent: beginning a batch begun already replays it.

    A lineage that this query already started on some partition (a ``new_lineage`` run
    that died between partitions) is completed on the others, even once the flag was
    removed; otherwise a partition owned by another query raises
    :class:`~fencing.CheckpointReset`.
    """
    meta = metadata_of(topic)
    context = meta.context
    driver = context.driver(context.settings.socket_timeout)

    def begin(t: int, new: bool) -> Begun:
        call = protocol.sink.begin(
            meta.partition_keys(t), lineage, incarnation=meta.incarnation_of(t), new_lineage=new
        )
        begun: Begun = driver.execute(call, context.budget_default())
        return begun

    found: dict[int, Begun] = {}
    refused: dict[int, CheckpointReset] = {}
    for t in range(topic.partitions):
        try:
            found[t] = begin(t, new_lineage)
        except CheckpointReset as exc:
            refused[t] = exc
    if refused:
        # Ours on some partitions, another query's on others: this query's new lineage
        # died between partitions only if the others still hold the query it took over
        # from. Otherwise another query took this app id over since: refused.
        took_over_from = {
            b.previous for b in found.values() if b.stored_query == lineage.query_id and b.previous
        }
        holders = _holders(topic, lineage, sorted(refused))
        if not took_over_from or not set(holders.values()) <= took_over_from:
            raise next(iter(refused.values()))
        log.warning(
            "redis-fencing spark sink: app_id %r: query %s began a new lineage on some "
            "partitions before; completing it on partitions %s",
            lineage.app_id,
            lineage.query_id,
            sorted(refused),
        )
        for t in refused:
            found[t] = begin(t, True)
    return [found[t] for t in range(topic.partitions)]


def _holders(topic: Topic, lineage: Lineage, partitions: list[int]) -> dict[int, str]:
    """The query id that holds ``lineage``'s app id on each of ``partitions``."""
    meta = metadata_of(topic)
    keys = [meta.partition_keys(t).sink(lineage.app_id) for t in partitions]
    call = protocol.base.ReadCall(
        commands=tuple(("HGET", k, "q") for k in keys),
        parse=lambda replies: {
            t: (r.decode() if isinstance(r, bytes) else str(r))
            for t, r in zip(partitions, replies, strict=True)
        },
    )
    context = meta.context
    holders: dict[int, str] = context.driver(context.settings.socket_timeout).read(
        call, context.budget_default()
    )
    return holders


def stored_points(config: SinkConfig, lineage: Lineage, spark_partition: int) -> dict[int, str]:
    """The stored chain point ("<hw> <hh>") of a Spark partition on every topic partition
    that has one."""
    topic, _ = shared_producer(config)
    meta = metadata_of(topic)
    keys = [meta.partition_keys(t).sink(lineage.app_id) for t in range(topic.partitions)]
    call = protocol.base.ReadCall(
        commands=tuple(("HGET", k, f"s{spark_partition}") for k in keys),
        parse=lambda replies: {
            t: (r.decode() if isinstance(r, bytes) else str(r))
            for t, r in enumerate(replies)
            if r is not None
        },
    )
    context = meta.context
    points: dict[int, str] = context.driver(context.settings.socket_timeout).read(
        call, context.budget_default()
    )
    return points


def verify_partition(
    config: SinkConfig, lineage: Lineage, spark_partition: int, rows: Iterable[Any]
) -> Iterator[tuple[int, int, str]]:
    """Before a replay writes anything: check that this Spark partition's rows pass through
    every chain point an earlier attempt stored. Yields (spark partition, topic partition,
    reason) per point missed."""
    points: dict[int, tuple[int, bytes]] = {}
    for t, stored in stored_points(config, lineage, spark_partition).items():
        index_text, _, hash_hex = stored.partition(" ")
        points[t] = (int(index_text), bytes.fromhex(hash_hex))
    if not points:
        return
    topic, _ = shared_producer(config)
    passed: set[int] = set()
    for t, index, h, _v, _k, _h in _chains(config, spark_partition, rows, topic.partitions):
        point = points.get(t)
        if point is None or t in passed:
            continue
        if index == point[0]:
            if h != point[1]:
                yield spark_partition, t, f"row {index} differs"
            passed.add(t)
        elif index > point[0]:
            yield spark_partition, t, f"no row {point[0]} routed there"
            passed.add(t)
    for t, (stored_index, _) in points.items():
        if t not in passed:
            yield spark_partition, t, f"fewer rows: none at index {stored_index}"

"""Script calls and reads of topics and partitions (G3, G4, G6, G9). No I/O."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._keys import PartitionKeys
from .._lua_loader import script
from .._record import DEFAULT_LIMITS, Limits, Record, encode_headers
from .._text import text
from ..errors import (
    DuplicateSequence,
    InvalidArgument,
    OutOfOrderSequence,
)
from .base import ScriptArg, ScriptCall
from .partition_errors import parse_answers, partition_errors, topic_errors

#: Producer state expiry of topics created before it was kept in their metadata (the Lua
#: side's DEFAULT_PID_EXPIRY_MS): 7 days, like Kafka's producer.id.expiration.ms.
DEFAULT_PID_EXPIRY_MS = 604_800_000
#: Duplicate window (batches per producer and partition) of topics created before it was
#: kept, and the default of new ones: Kafka's 5.
DEFAULT_DEDUP_WINDOW = 5
#: The largest duplicate window a topic may have (Redis 8.6's XADD IDMP keeps up to 10,000
#: ids per producer).
MAX_DEDUP_WINDOW = 10_000
#: Message id window of topics created before it was kept, and the default of new ones: the
#: ids of the last 10,000 records per partition, for an hour (by server time).
DEFAULT_MESSAGE_ID_WINDOW = 10_000
DEFAULT_MESSAGE_ID_TTL_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic_open reply."""

    incarnation: str
    partitions: int
    ready: bool
    created: bool
    #: Producer state expiry of the topic (ms), fixed when it was created.
    pid_expiry_ms: int = DEFAULT_PID_EXPIRY_MS
    #: Duplicate window of the topic (batches), fixed when it was created.
    dedup_window: int = DEFAULT_DEDUP_WINDOW
    #: Message id window of the topic, by count and by age (ms), fixed when it was created.
    message_id_window: int = DEFAULT_MESSAGE_ID_WINDOW
    message_id_ttl_ms: int = DEFAULT_MESSAGE_ID_TTL_MS


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition_open reply, or what a read saw of the partition."""

    incarnation: str
    next_offset: int
    start_offset: int
    max_len: int = 0
    pid_expiry_ms: int = DEFAULT_PID_EXPIRY_MS
    dedup_window: int = DEFAULT_DEDUP_WINDOW
    message_id_window: int = DEFAULT_MESSAGE_ID_WINDOW
    message_id_ttl_ms: int = DEFAULT_MESSAGE_ID_TTL_MS


@dataclass(frozen=True, slots=True)
class Appended:
    """An append reply: offsets first .. first + count - 1, at server time timestamp_ms.

    ``duplicate`` is True when this exact batch had landed before: nothing was written and
    the offsets are the ones it got the first time (G5).

    ``answers`` holds the records that callers' calls answered by their message ids, by
    index in the batch: their original (offset, epoch). They were not written; the batch's
    other records took the offsets from ``first_offset`` on, in order.
    """

    first_offset: int
    timestamp_ms: int
    start_offset: int
    duplicate: bool = False
    #: The epoch the records carry (for a duplicate, the one they were first written in;
    #: -1 when retention removed them since).
    epoch: int = -1
    answers: dict[int, tuple[int, int]] | None = None


@dataclass(frozen=True, slots=True)
class Sequenced:
    """A batch's producer identity: PID generation and name (checked for every producer),
    and for idempotent producers the first sequence (None for a producer that is not
    idempotent). ``checksum`` None takes the encoded batch's own. ``fresh`` says the
    producer knows no copy of the batch was ever sent (the first attempt of sequences past
    all it saw written): only such a batch may start a PID's state afresh, and every resend
    of the call goes without it."""

    pid_generation: int
    first_sequence: int | None
    checksum: str | None
    name: str
    fresh: bool = True
    #: How long after the first attempt a resend is still fresh: while a state that attempt
    #: wrote, had it landed, could not have expired and been dropped yet (half the topic's
    #: expiry), no state means it has not landed (yet: a late copy then finds the resend's
    #: state and is answered as its duplicate). 0: no resend is fresh.
    fresh_for: float = 0.0


def topic_open(
    key: str,
    topic: str,
    *,
    partitions: int | None,
    new_incarnation: str,
    seen: str,
    pid_expiry_ms: int,
    dedup_window: int = DEFAULT_DEDUP_WINDOW,
    message_id_window: int = DEFAULT_MESSAGE_ID_WINDOW,
    message_id_ttl_ms: int = DEFAULT_MESSAGE_ID_TTL_MS,
) -> ScriptCall[TopicInfo]:
    """Open (and on first use create, with ``pid_expiry_ms``, ``dedup_window`` and the
    message id window) a topic's metadata."""

    def parse(reply: list[Any]) -> TopicInfo:
        inc, n, ready, created, pidexp, window, id_window, id_ttl = reply
        return TopicInfo(
            text(inc),
            int(n),
            int(ready) == 1,
            int(created) == 1,
            int(pidexp),
            int(window),
            int(id_window),
            int(id_ttl),
        )

    return ScriptCall(
        script=script("topic_open"),
        keys=(key,),
        args=(
            "" if partitions is None else partitions,
            new_incarnation,
            seen,
            pid_expiry_ms,
            dedup_window,
            message_id_window,
            message_id_ttl_ms,
        ),
        parse=parse,
        error=topic_errors(topic, key),
    )


def topic_ready(key: str, topic: str, incarnation: str) -> ScriptCall[bool]:
    """Mark a topic whose partitions are all initialised."""
    return ScriptCall(
        script=script("topic_ready"),
        keys=(key,),
        args=(incarnation,),
        parse=lambda reply: int(reply) == 1,
        error=topic_errors(topic, key),
    )


def partition_open(
    pk: PartitionKeys,
    *,
    topic_incarnation: str,
    new_incarnation: str,
    create: bool,
    seen: str,
    max_len: int | None,
    pid_expiry_ms: int,
    dedup_window: int = DEFAULT_DEDUP_WINDOW,
    message_id_window: int = DEFAULT_MESSAGE_ID_WINDOW,
    message_id_ttl_ms: int = DEFAULT_MESSAGE_ID_TTL_MS,
) -> ScriptCall[PartitionInfo]:
    """Open (and while the topic is being created, create) a partition's metadata."""

    def parse(reply: list[Any]) -> PartitionInfo:
        inc, nxt, start, max_len, pidexp, window, id_window, id_ttl = reply
        return PartitionInfo(
            text(inc),
            int(nxt),
            int(start),
            int(max_len),
            int(pidexp),
            int(window),
            int(id_window),
            int(id_ttl),
        )

    return ScriptCall(
        script=script("partition_open"),
        keys=(pk.meta, pk.stream),
        args=(
            topic_incarnation,
            new_incarnation,
            1 if create else 0,
            seen,
            "" if max_len is None else max_len,
            pid_expiry_ms,
            dedup_window,
            message_id_window,
            message_id_ttl_ms,
        ),
        parse=parse,
        error=partition_errors(pk),
    )


@dataclass(frozen=True, slots=True)
class Writer:
    """Who appends: a producer's id, session and standing on one partition."""

    producer_id: str
    session: str
    mode: str  # "x" exclusive holder, "s" shared producer
    epoch: int
    ttl_ms: int
    row_incarnation: str


@dataclass(frozen=True, slots=True)
class EncodedBatch:
    """A batch encoded once for the append script: the layout (one shape character per
    record), the parts in layout order, and the checksum that identifies the records.

    ``units`` is set when records carry message ids: the record count of each caller's call
    in the batch, comma-separated (each call is answered by its ids, or refused, on its
    own); empty otherwise."""

    count: int
    layout: str
    parts: list[bytes]
    checksum: str
    units: str = ""


def encode_batch(
    records: Sequence[Record], limits: Limits, *, checksum: bool = True
) -> EncodedBatch:
    """Encode a batch in one pass, refusing it before any I/O if it is over ``limits``.

    The checksum is the records' digest (:func:`batch_digest`). ``checksum=False``
    leaves it empty: a send queued for group commit gets the merged batch's
    (:func:`fencing._group_commit.merge_batches`).
    """
    layout: list[str] = []
    parts: list[bytes] = []
    total = 0
    max_record = limits.max_record_bytes
    ids: set[str] | None = None
    for record in records:
        value, key, headers = record.value, record.key, record.headers
        size = len(value)
        parts.append(value)
        shape = 0
        if key is not None:
            parts.append(key)
            size += len(key)
            shape = 1
        if headers:
            encoded = encode_headers(headers)
            parts.append(encoded)
            size += len(encoded)
            shape += 2
        message_id = record.message_id
        if message_id is not None:
            if ids is None:
                ids = set()
            if message_id in ids:
                raise InvalidArgument(
                    f"message_id {message_id!r} appears twice in one call: each record of a "
                    "call needs its own id (nothing was sent)"
                )
            ids.add(message_id)
            raw_id = message_id.encode("utf-8")
            parts.append(raw_id)
            size += len(raw_id)
            shape += 4
        if size > max_record:
            limits.check_record(size)
        total += size
        layout.append("01234567"[shape])
    limits.check_batch(len(layout), total)
    shape_str = "".join(layout)
    units = "" if ids is None else str(len(layout))
    if not checksum:
        return EncodedBatch(len(layout), shape_str, parts, "", units)
    return EncodedBatch(len(layout), shape_str, parts, batch_digest(shape_str, parts), units)


def batch_digest(layout: str, parts: Sequence[bytes]) -> str:
    """The identity of a batch's records: a 96-bit BLAKE2b digest over the layout, every
    part's length and the parts (so two batches with the same bytes split differently never
    share one), as 16 URL-safe base64 characters. A changed resend matches it with odds of
    2**-96, where a 32-bit checksum would be matched by forging four bytes."""
    head = (layout + ":" + ",".join([str(len(part)) for part in parts]) + ":").encode()
    digest = hashlib.blake2b(head, digest_size=12)
    digest.update(b"".join(parts))
    return base64.urlsafe_b64encode(digest.digest()).decode("ascii")


def append(
    pk: PartitionKeys,
    batch: EncodedBatch | Sequence[Record],
    *,
    incarnation: str,
    seen_next: int,
    expected_offset: int | None,
    writer: Writer,
    sequenced: Sequenced | None = None,
    errors: Any = None,
) -> ScriptCall[Appended]:
    """Append a batch to one partition, all or nothing, fenced by the writer's epoch, and
    exactly once when ``sequenced`` (idempotent producers)."""
    if not isinstance(batch, EncodedBatch):
        batch = encode_batch(batch, DEFAULT_LIMITS)
    crc = first = name = ""
    generation = 0
    fresh = False
    fresh_for = 0.0
    if sequenced is not None:
        generation, name = sequenced.pid_generation, sequenced.name
        if sequenced.first_sequence is not None:
            crc = sequenced.checksum or batch.checksum
            first = str(sequenced.first_sequence)
            fresh, fresh_for = sequenced.fresh, sequenced.fresh_for
    # The short arguments in one (see lua/append-9.lua): each argument costs the server more
    # than the capture that splits it off. Integers and ids hold no space.
    head = f"{seen_next} {writer.epoch} {writer.ttl_ms} {generation} {first} "
    tail = (
        f" {'' if expected_offset is None else expected_offset} {writer.mode} "
        f"{writer.producer_id} {name}"
    )
    header = head + ("1" if fresh else "0") + tail
    args: list[ScriptArg] = [
        incarnation,
        header,
        writer.session,
        writer.row_incarnation,
        crc,
        f"{batch.layout}|{batch.units}" if batch.units else batch.layout,
    ]
    args.extend(batch.parts)
    call_args = tuple(args)
    return ScriptCall(
        script=script("append"),
        keys=(
            pk.meta,
            pk.stream,
            pk.owner,
            pk.pids,
            pk.pid_expiry,
            pk.names,
            pk.window,
            pk.message_ids,
            pk.message_id_queue,
        ),
        args=call_args,
        # A resend may find the batch landed and its state expired since: never fresh.
        resent_args=(call_args[0], head + "0" + tail, *call_args[2:]) if fresh else None,
        resent_after=fresh_for,
        # (Had an earlier attempt landed, the resend would be answered as its duplicate.)
        unapplied_refusals=(DuplicateSequence, OutOfOrderSequence),
        parse=_appended,
        error=errors or partition_errors(pk),
        ambiguous_after_retry=True,
        # Without a sequence nothing can tell a resend from a new batch (G5), unless every
        # record carries a message id: a resend of those is answered by its ids.
        resend_safe=bool(crc) or (bool(batch.units) and all_ids(batch.layout)),
    )


def all_ids(layout: str) -> bool:
    """Whether every record of a layout carries a message id (shapes 4 to 7)."""
    return all(shape >= "4" for shape in layout)


def _appended(reply: bytes) -> Appended:
    # "<first> <timestamp_ms> <start> <duplicate> <epoch>[ <answers>]": one string, cheaper
    # for the server to send than a table.
    fields = reply.split()
    if len(fields) == 5:
        first, ts, start, duplicate, epoch = fields
        return Appended(int(first), int(ts), int(start), int(duplicate) == 1, int(epoch))
    first, ts, start, duplicate, epoch, answers = fields
    return Appended(
        int(first),
        int(ts),
        int(start),
        int(duplicate) == 1,
        int(epoch),
        parse_answers(answers.decode("ascii")),
    )


def checksum(records: Sequence[Record]) -> str:
    """The checksum of a batch, as :func:`encode_batch` computes it."""
    return encode_batch(records, DEFAULT_LIMITS).checksum


def trim(pk: PartitionKeys, *, incarnation: str, before_offset: int) -> ScriptCall[PartitionInfo]:
    """Drop records before an offset (retention)."""

    def parse(reply: list[Any]) -> PartitionInfo:
        start, nxt = reply
        return PartitionInfo(incarnation, int(nxt), int(start))

    return ScriptCall(
        script=script("trim"),
        keys=(pk.meta, pk.stream),
        args=(incarnation, before_offset),
        parse=parse,
        error=partition_errors(pk),
    )

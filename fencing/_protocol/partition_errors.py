"""How a call on a topic or one of its partitions reports failure: the typed errors of its
error replies (G3, G5, G6, G9), each saying what happened and what to do. No I/O."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .._keys import PartitionKeys
from .._record import RecordMetadata
from ..errors import (
    DuplicateMessageId,
    FencingError,
    InvalidArgument,
    OffsetMismatch,
    OffsetOutOfRange,
    StateLost,
    UnknownTopic,
)
from .base import ErrorReply, generic_error


def state_lost(where: str, key: str, reply: ErrorReply) -> StateLost:
    reason = reply.fields["reason"]
    what = {
        "missing": "is gone",
        "incarnation": "was recreated (another incarnation)",
        "offset": (
            f"went backwards (next offset {reply.fields['found']}, this handle saw "
            f"{reply.fields['seen']})"
        ),
        "stream": "lost its records (the stream key is gone)",
        "topic": "belongs to another incarnation of its topic",
        "deleted": "was deleted (client.delete_topic)",
        "pid-reused": (
            f"has live state for producer id {reply.fields['seen']} (generation "
            f"{reply.fields['found']}) owned by another producer object: two producers were "
            "handed the same producer id, so the namespace's producer-id counter went "
            "backwards"
        ),
        "pid-state": (
            f"holds a producer state for producer id {reply.fields['seen']} that this version "
            "of redis-fencing cannot read (written by another version, or damaged); it was "
            "left as it is"
        ),
    }.get(reason, reason)
    if reason == "pid-sequence":
        found = reply.fields["found"]
        kept = (
            "keeps no trace of this producer id"
            if found == "-1"
            else f"keeps this producer id's writes only up to sequence {int(found) - 1}"
        )
        what = (
            f"{kept}, though the saved state's next sequence is {reply.fields['seen']}: it "
            "was saved after writes this store no longer has"
        )
    if reason == "pid-state":
        return StateLost(
            f"{where} {what}. Nothing was written. Run one version of redis-fencing per "
            f"namespace; to start that producer afresh, delete field {reply.fields['seen']} "
            f"of {reply.fields['found']} (its duplicate window and fence go with it)",
            reason=reason,
            key=reply.fields["found"],
        )
    return StateLost(
        f"{where} {what}: the Redis server lost writes (FLUSHALL, restart without "
        "persistence, eviction or a failover). Nothing was written. Check persistence and "
        "maxmemory-policy noeviction, then open the topic again",
        reason=reason,
        key=key,
    )


def deleted_partition(resource: str, key: str, deleted_ms: int) -> StateLost:
    """The StateLost of a call on a partition an operator deleted (its incarnation is in
    the delete's mark): not lost writes, so not the text that sends one to persistence."""
    topic, _, partition = resource.rpartition("/")
    when = datetime.fromtimestamp(deleted_ms / 1000, UTC).isoformat(timespec="milliseconds")
    return StateLost(
        f"partition {partition} of topic {topic!r} was deleted by an operator at {when} "
        "(client.delete_topic or 'fencing delete-topic' with force). Nothing was written; "
        "this handle cannot continue: close it, and open the topic again if it is meant to "
        "exist (a topic made anew under that name starts afresh)",
        reason="deleted",
        key=key,
    )


def parse_answers(raw: str) -> dict[int, tuple[int, int]]:
    """Records answered by their message ids, ``"i:offset:epoch,..."``, as
    ``{i: (offset, epoch)}``.

    >>> parse_answers("0:41:3,2:7:1")
    {0: (41, 3), 2: (7, 1)}
    """
    out: dict[int, tuple[int, int]] = {}
    for item in raw.split(","):
        i, offset, epoch = item.split(":")
        out[int(i)] = (int(offset), int(epoch))
    return out


def topic_errors(topic: str, key: str) -> Any:
    def convert(reply: ErrorReply) -> FencingError:
        if reply.code == "UNKNOWN_TOPIC":
            return UnknownTopic(
                f"topic {topic!r} does not exist: create it with "
                f"client.topic({topic!r}, partitions=N)",
                topic=topic,
            )
        if reply.code == "TOPIC_DELETING":
            return UnknownTopic(
                f"topic {topic!r} is being deleted (client.delete_topic has not finished): "
                "open or create it once the delete returns; if the delete was cut short, run "
                f"client.delete_topic({topic!r}) again to finish it",
                topic=topic,
                deleting=True,
            )
        if reply.code == "PARTITIONS_MISMATCH":
            return InvalidArgument(
                f"topic {topic!r} exists with {reply.fields['stored']} partitions, not "
                f"{reply.fields['requested']}: the count is fixed at creation; pass "
                f"partitions={reply.fields['stored']} or None"
            )
        if reply.code == "STATE_LOST":
            return state_lost(f"topic {topic!r}", key, reply)
        return generic_error(reply)

    return convert


def partition_errors(pk: PartitionKeys) -> Any:
    """Error mapping of calls on one partition."""
    where = f"partition {pk.partition} of topic {pk.topic!r}"

    def convert(reply: ErrorReply) -> FencingError:
        if reply.code == "OFFSET_MISMATCH":
            expected, actual = reply.int("expected"), reply.int("actual")
            return OffsetMismatch(
                f"{where}: expected offset {expected} but the next offset is {actual}; "
                "nothing was written. Read up to the end, then retry with "
                f"expected_offset={actual} if the batch still applies",
                expected=expected,
                actual=actual,
                topic=pk.topic,
                partition=pk.partition,
            )
        if reply.code == "OFFSET_OUT_OF_RANGE":
            return out_of_range(pk, reply.int("requested"), reply.int("start"), reply.int("end"))
        if reply.code == "DUPLICATE_MESSAGE_ID":
            return duplicate_ids(pk, parse_answers(reply.fields["known"]))
        if reply.code == "STATE_LOST":
            return state_lost(where, pk.meta, reply)
        return generic_error(reply)

    return convert


def duplicate_ids(
    pk: PartitionKeys, known: dict[int, tuple[int, int]], count: int | None = None
) -> DuplicateMessageId:
    """The DuplicateMessageId of a call (``count`` records, if known) whose message ids
    are partly known: ``known`` by index in the call, their (offset, epoch)."""
    metadata = {
        i: RecordMetadata(pk.topic, pk.partition, offset, epoch, True)
        for i, (offset, epoch) in sorted(known.items())
    }
    which = ", ".join(f"record {i} (offset {md.offset})" for i, md in list(metadata.items())[:5])
    more = f" and {len(metadata) - 5} more" if len(metadata) > 5 else ""
    of = f" of {count}" if count is not None else ""
    return DuplicateMessageId(
        f"partition {pk.partition} of topic {pk.topic!r}: {len(metadata)}{of} records of this "
        f"call carry message ids appended before ({which}{more}), the others do not; nothing "
        "was written. A call is answered by its ids only when every id is known: send the "
        "records whose ids are not in exc.known again, alone",
        known=metadata,
        topic=pk.topic,
        partition=pk.partition,
    )


def out_of_range(pk: PartitionKeys, requested: int, start: int, end: int) -> OffsetOutOfRange:
    """The OffsetOutOfRange error of a partition."""
    if start == end:
        held = f"it holds no records (next offset {end}); use 'earliest' or 'latest'"
    else:
        which = f"offset {start}" if end == start + 1 else f"offsets {start} to {end - 1}"
        held = (
            f"it holds {which} (next offset {end}); use 'earliest', 'latest' or an offset "
            "in that range"
        )
    return OffsetOutOfRange(
        f"offset {requested} is out of range for partition {pk.partition} of topic "
        f"{pk.topic!r}: {held}",
        requested=requested,
        start=start,
        end=end,
        topic=pk.topic,
        partition=pk.partition,
    )

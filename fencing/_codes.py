"""The one table of error codes shared by the Lua scripts and Python.

A script fails with ``redis.error_reply("<CODE> <field> <field> ...")``, naming the code as
``E.FENCED``. The loader replaces each ``E.<CODE>`` with the string literal ``'FENCED'`` and
refuses to load a script that names a code missing from :data:`CODES`, so the two sides
cannot drift. :mod:`fencing._protocol` turns a reply back into the exception named here,
with the fields as attributes.

Fields are separated by single spaces; the last field of a code takes the rest of the
message, so it may hold free text (an owner label).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CodeSpec:
    """One error code: the fields its reply carries, in order."""

    code: str
    fields: tuple[str, ...]
    summary: str


CODES: dict[str, CodeSpec] = {
    spec.code: spec
    for spec in (
        CodeSpec(
            "CONFLICT",
            ("holder_token", "remaining_ms", "holder_label"),
            "another live session holds the resource",
        ),
        CodeSpec(
            "STALE_GENERATION",
            ("current_generation", "requested_generation"),
            "the stored generation is higher than the one requested",
        ),
        CodeSpec(
            "FENCED",
            ("token", "holder_token", "holder_label"),
            "another session was granted the resource after this one",
        ),
        CodeSpec(
            "LEASE_EXPIRED",
            ("token", "expired_ms_ago"),
            "the lease lapsed by server time and nobody else claimed it yet",
        ),
        CodeSpec(
            "STATE_LOST",
            ("reason", "seen", "found"),
            "coordination state is missing or went backwards",
        ),
        CodeSpec(
            "PRODUCER_BUSY",
            ("reason", "remaining_ms", "holder_label"),
            "the access mode cannot be had: an exclusive holder, shared producers or waiters",
        ),
        CodeSpec(
            "PRODUCER_FENCED",
            ("epoch", "current_epoch", "reason"),
            "the producer was superseded on this partition",
        ),
        CodeSpec(
            "GUARDED",
            ("election", "reason", "epoch"),
            "an election guards the topic: only its leaders open producers there",
        ),
        CodeSpec(
            "DUPLICATE_SEQUENCE",
            ("pid", "first_seq", "last_seq", "reason"),
            "a sequence range already used by other records, or older than the window",
        ),
        CodeSpec(
            "DUPLICATE_MESSAGE_ID",
            ("known",),
            "a call whose message ids are partly known: nothing was written",
        ),
        CodeSpec(
            "OUT_OF_ORDER_SEQUENCE",
            ("pid", "expected_seq", "first_seq"),
            "a gap in the producer's sequence",
        ),
        CodeSpec(
            "UNKNOWN_PRODUCER_ID",
            ("pid", "reason"),
            "the producer's state expired while a batch was pending, or resume= named it",
        ),
        CodeSpec(
            "UNKNOWN_TOPIC",
            ("topic",),
            "the topic does not exist and no partition count was given to create it",
        ),
        CodeSpec(
            "TOPIC_DELETING",
            ("key",),
            "the topic is being deleted: opens are refused until the delete finishes",
        ),
        CodeSpec(
            "PARTITIONS_MISMATCH",
            ("stored", "requested"),
            "the topic exists with another partition count",
        ),
        CodeSpec(
            "OFFSET_MISMATCH",
            ("expected", "actual"),
            "expected_offset is not the partition's next offset",
        ),
        CodeSpec(
            "OFFSET_OUT_OF_RANGE",
            ("requested", "start", "end"),
            "an offset before the first retained record or past the end",
        ),
        CodeSpec(
            "SINK_LINEAGE",
            ("stored_query", "stored_batch", "finished_batch", "took_over_from"),
            "another streaming query id owns the Spark sink's app id: a reset checkpoint, or "
            "a takeover by another query (took_over_from: the query it replaced, '' if none)",
        ),
        CodeSpec(
            "SINK_PARTITIONING",
            ("batch", "stored", "found"),
            "a micro-batch replayed with another Spark partition count",
        ),
        CodeSpec(
            "SINK_MISMATCH",
            ("spark_partition", "stored_index", "found_index"),
            "a Spark partition's rows differ from those an earlier attempt wrote",
        ),
        CodeSpec(
            "SINK_STALE",
            ("stored_query", "stored_batch", "batch"),
            "a micro-batch that is not the one the sink's driver began last",
        ),
        CodeSpec(
            "WRONG_TYPE",
            ("key_type", "key"),
            "a key the library owns holds another Redis type",
        ),
        CodeSpec(
            "BAD_ARGUMENT",
            ("argument", "value"),
            "a script argument failed validation (a library bug if it reaches a user)",
        ),
    )
}

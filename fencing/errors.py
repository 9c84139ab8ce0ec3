"""Exceptions raised by redis-fencing.

Every exception says what happened and what to do next, and carries its context as
attributes. The tree::

    FencingError
    ├── InvalidArgument (ValueError)        bad input, refused before any I/O
    │   ├── InvalidArgumentType (TypeError)  an argument of the wrong type
    │   ├── InvalidName                      a topic, group, namespace or resource name
    │   ├── UnknownTopic                     a topic that does not exist (and is not created)
    │   └── RecordTooLarge                   a record or batch over the configured limits
    ├── ConfigurationError                   an unsafe server or client setup (eviction, retries)
    │                                        or Spark executors that cannot import the library
    ├── ProcessBoundError                    a handle used from a forked child, or pickled
    ├── WrongKeyType                         a key the library owns holds another Redis type
    ├── OwnershipConflict                    another live session holds the resource
    ├── StaleGeneration                      the stored generation is above the one requested
    ├── Fenced                               another session was granted after this one
    │   └── ProducerFenced                   ... for a producer: permanent for that object
    ├── LeaseExpired                         the lease lapsed; renew() before writing again
    ├── StateLost                            coordination state vanished or went backwards (G9)
    ├── ProducerBusy                         the access mode cannot be had right now
    ├── OffsetMismatch                       expected_offset was not the next offset (G3)
    ├── OffsetOutOfRange                     an offset before the log start or past its end
    ├── DuplicateSequence                    a sequence range reused by other records (G5)
    ├── DuplicateMessageId                   a call whose message ids are partly known (G5)
    ├── OutOfOrderSequence                   a gap in a producer's sequence (G5)
    ├── UnknownProducerId                    producer state expired while a batch was pending
    ├── SinkError                            the Spark sink refused a micro-batch
    │   ├── CheckpointReset                  another query id owns the sink's app id
    │   └── NondeterministicBatch            a replayed batch differs from its first attempt
    └── Unavailable                          the server could not be reached in the retry budget
        └── OutcomeUnknown                   ... after a request that may have been applied
            └── NotEnoughReplicas            ... applied, but not replicated/fsynced in time

Every class is importable from :mod:`fencing`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._grant import Grant
    from ._record import RecordMetadata

__all__ = [
    "CheckpointReset",
    "ConfigurationError",
    "DuplicateMessageId",
    "DuplicateSequence",
    "Fenced",
    "FencingError",
    "InvalidArgument",
    "InvalidArgumentType",
    "InvalidName",
    "LeaseExpired",
    "NondeterministicBatch",
    "NotEnoughReplicas",
    "OffsetMismatch",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "OutcomeUnknown",
    "OwnershipConflict",
    "ProcessBoundError",
    "ProducerBusy",
    "ProducerFenced",
    "RecordTooLarge",
    "SinkError",
    "StaleGeneration",
    "StateLost",
    "Unavailable",
    "UnknownProducerId",
    "UnknownTopic",
    "WrongKeyType",
]


class FencingError(Exception):
    """Base class of every error raised by redis-fencing.

    >>> try:
    ...     producer.send(b"v")
    ... except fencing.FencingError as exc:   # every error of the library
    ...     log.error("send failed: %s", exc)
    """


class InvalidArgument(FencingError, ValueError):
    """An argument was refused before any I/O; nothing was written.

    >>> reader.read(max_records=0)
    Traceback (most recent call last):
    fencing.errors.InvalidArgument: ...
    """


class InvalidArgumentType(InvalidArgument, TypeError):
    """An argument had the wrong type; nothing was written.

    >>> producer.send(42)
    Traceback (most recent call last):
    fencing.errors.InvalidArgumentType: ...
    """


class InvalidName(InvalidArgument):
    """A topic, group, namespace or resource name was refused; nothing was written.

    >>> client.topic("no spaces", partitions=1)
    Traceback (most recent call last):
    fencing.errors.InvalidName: ...
    """


class RecordTooLarge(InvalidArgument):
    """A record or a batch is over the configured size limits; nothing was written.

    >>> topic = client.topic("orders", partitions=1, max_record_bytes=1024)
    >>> topic.producer().send(b"x" * 2048)
    Traceback (most recent call last):
    fencing.errors.RecordTooLarge: ...
    """


class ConfigurationError(FencingError):
    """The server or client is set up in a way that would break the guarantees.

    >>> client.topic("orders", partitions=1).open()   # a server with allkeys-lru eviction
    Traceback (most recent call last):
    fencing.errors.ConfigurationError: ...
    """


class ProcessBoundError(FencingError):
    """A handle was used from another process (after fork) or pickled.

    A handle's identity is its session: sharing it would let two processes act as one
    holder. Open a new handle in the child instead.

    >>> if os.fork() == 0:
    ...     producer.send(b"v")                       # the parent's producer
    Traceback (most recent call last):
    fencing.errors.ProcessBoundError: ...
    """


class WrongKeyType(FencingError):
    """A key the library owns holds another Redis type; nothing was written.

    >>> try:
    ...     client.topic("orders", partitions=1).open()
    ... except fencing.WrongKeyType as exc:
    ...     print(exc.key, exc.key_type)                             # doctest: +SKIP
    app:{orders}:topic string
    """

    def __init__(self, message: str, *, key: str, key_type: str) -> None:
        super().__init__(message)
        self.key = key
        self.key_type = key_type


class _ResourceError(FencingError):
    """An error about one (group, resource) of the ownership table."""

    def __init__(self, message: str, *, group: str, resource: str) -> None:
        super().__init__(message)
        self.group = group
        self.resource = resource


class OwnershipConflict(_ResourceError):
    """Another live session holds the resource.

    ``holder_token`` is the holder's fencing token and ``remaining`` the seconds left on its
    lease by server time (the earliest moment a claim can succeed without a notification).

    >>> try:
    ...     owner.claim(["orders/0"])
    ... except fencing.OwnershipConflict as exc:
    ...     time.sleep(exc.remaining)                 # or claim(..., wait=True)
    """

    def __init__(
        self,
        message: str,
        *,
        group: str,
        resource: str,
        holder_label: str,
        holder_token: int,
        remaining: float,
    ) -> None:
        super().__init__(message, group=group, resource=resource)
        self.holder_label = holder_label
        self.holder_token = holder_token
        self.remaining = remaining


class StaleGeneration(_ResourceError):
    """The stored generation of ``resource`` is ``current``, above the ``requested`` one.

    Raised by a claim, it also gives the claim's result per resource. ``refused`` maps
    every resource refused as stale to its own StaleGeneration (this one, of the first in
    hash-slot order, included). ``granted`` maps every resource the call was granted to its
    :class:`~fencing.Grant`: the handle keeps those (they are in ``grants``), since a grant
    with a generation already severed the holder and set the generation, which giving it
    back would not undo. A claim checks every generation before it severs anyone, so
    ``granted`` is empty unless another session raised a generation while the claim ran;
    resources in neither map were left as they were.

    >>> try:
    ...     owner.claim(["orders/0"], generation=3)
    ... except fencing.StaleGeneration as exc:
    ...     exc.current, exc.requested                               # doctest: +SKIP
    (5, 3)
    """

    def __init__(
        self,
        message: str,
        *,
        group: str,
        resource: str,
        current: int,
        requested: int,
        granted: Mapping[str, Grant] | None = None,
        refused: Mapping[str, FencingError] | None = None,
    ) -> None:
        super().__init__(message, group=group, resource=resource)
        self.current = current
        self.requested = requested
        self.granted: dict[str, Grant] = dict(granted or {})
        self.refused: dict[str, FencingError] = (
            {resource: self} if refused is None else dict(refused)
        )


class Fenced(_ResourceError):
    """Another session was granted the resource after this handle's grant.

    Permanent for that grant: the handle may only claim again, which is a new grant with a
    new token.

    >>> try:
    ...     owner.check("orders/0")
    ... except fencing.Fenced as exc:                 # stop writing with this token
    ...     exc.token, exc.holder_token                              # doctest: +SKIP
    (4, 5)
    """

    def __init__(
        self,
        message: str,
        *,
        group: str,
        resource: str,
        token: int,
        holder_token: int,
        holder_label: str,
    ) -> None:
        super().__init__(message, group=group, resource=resource)
        self.token = token
        self.holder_token = holder_token
        self.holder_label = holder_label


class ProducerFenced(Fenced):
    """The producer was superseded on a partition (a later epoch was granted there).

    Permanent: every later send on this producer object fails at once, without a round
    trip. ``epoch`` is the producer's, ``current_epoch`` the partition's now. Open a new
    producer (which waits for or takes the partition) to write again.

    >>> try:
    ...     producer.send(b"v", partition=0)
    ... except fencing.ProducerFenced as exc:
    ...     producer = topic.producer(access_mode=fencing.AccessMode.WAIT_FOR_EXCLUSIVE)
    """

    def __init__(
        self, message: str, *, topic: str, partition: int, epoch: int, current_epoch: int
    ) -> None:
        super().__init__(
            message,
            group="__producer__",
            resource=f"{topic}/{partition}",
            token=epoch,
            holder_token=current_epoch,
            holder_label="",
        )
        self.topic = topic
        self.partition = partition
        self.epoch = epoch
        self.current_epoch = current_epoch


class LeaseExpired(_ResourceError):
    """The lease lapsed by server time and nobody else has claimed the resource yet.

    Call ``renew()``: it keeps the generation and the token.

    >>> try:
    ...     owner.check("orders/0")
    ... except fencing.LeaseExpired:
    ...     owner.renew("orders/0")                   # same generation, same token
    """

    def __init__(
        self, message: str, *, group: str, resource: str, token: int, expired_ago: float
    ) -> None:
        super().__init__(message, group=group, resource=resource)
        self.token = token
        self.expired_ago = expired_ago


class StateLost(FencingError):
    """Coordination state is missing, of another incarnation, or went backwards (G9).

    The store lost writes (FLUSHALL, a restart without persistence, eviction, a failover
    that lost acknowledged writes). Nothing was written; the handle cannot continue. Check
    the server's persistence and eviction settings, then open new handles.

    >>> try:
    ...     producer.send(b"v")
    ... except fencing.StateLost as exc:              # check persistence, then reopen
    ...     exc.reason                                               # doctest: +SKIP
    'missing'
    """

    def __init__(self, message: str, *, reason: str, key: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.key = key


class ProducerBusy(FencingError):
    """The requested access mode cannot be had while other producers live.

    ``reason`` names what is in the way: ``"exclusive"`` (a live exclusive holder, labelled
    ``holder_label``), ``"shared"`` (live shared producers) or ``"waiting"`` (queued
    WAIT_FOR_EXCLUSIVE producers); ``remaining`` is how long, by server time, the lease in
    the way lasts at most unless renewed.

    >>> try:
    ...     topic.producer(access_mode=fencing.AccessMode.EXCLUSIVE)
    ... except fencing.ProducerBusy as exc:
    ...     exc.reason, exc.holder_label                             # doctest: +SKIP
    ('exclusive', 'host-a')
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        partition: int,
        reason: str,
        remaining: float,
        holder_label: str = "",
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.reason = reason
        self.remaining = remaining
        self.holder_label = holder_label


class OffsetMismatch(FencingError):
    """``expected_offset`` was not the partition's next offset; nothing was written.

    ``expected`` is what the send asked for, ``actual`` the partition's next offset;
    ``topic`` and ``partition`` say where.

    >>> try:
    ...     producer.send(b"v", partition=0, expected_offset=10)
    ... except fencing.OffsetMismatch as exc:
    ...     exc.expected, exc.actual                                 # doctest: +SKIP
    (10, 12)
    """

    def __init__(
        self, message: str, *, expected: int, actual: int, topic: str = "", partition: int = -1
    ) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual
        self.topic = topic
        self.partition = partition


class OffsetOutOfRange(FencingError):
    """An offset before the first retained record or past the end of the partition.

    ``start`` is the first retained offset and ``end`` the next offset to be written;
    ``topic`` and ``partition`` say where.

    >>> try:
    ...     topic.reader(0, start_offset=10**9)
    ... except fencing.OffsetOutOfRange as exc:
    ...     reader = topic.reader(0, start_offset=exc.start)
    """

    def __init__(
        self,
        message: str,
        *,
        requested: int,
        start: int,
        end: int,
        topic: str = "",
        partition: int = -1,
    ) -> None:
        super().__init__(message)
        self.requested = requested
        self.start = start
        self.end = end
        self.topic = topic
        self.partition = partition


class UnknownTopic(InvalidArgument):
    """The topic does not exist; pass ``partitions=`` to create it. ``deleting`` is True
    when it is being deleted (``client.delete_topic`` has not finished).

    >>> client.topic("nope").open()
    Traceback (most recent call last):
    fencing.errors.UnknownTopic: ...
    """

    def __init__(self, message: str, *, topic: str, deleting: bool = False) -> None:
        super().__init__(message)
        self.topic = topic
        self.deleting = deleting


class DuplicateSequence(FencingError):
    """A resend that cannot be answered from the duplicate window; nothing was written.

    ``reason`` says why: ``older-than-window`` (those sequences were written longer ago
    than the window: the records are in the log, skip them), ``other-records`` (other
    records were written under those sequences) or ``straddles`` (the batch starts at or
    below the last sequence written and ends past it: resend with the batch boundaries
    used before). ``topic`` and
    ``partition`` say where.

    >>> try:
    ...     producer.send_batch(batch, partition=0)   # a resend after resuming
    ... except fencing.DuplicateSequence as exc:
    ...     exc.reason                                               # doctest: +SKIP
    'older-than-window'
    """

    def __init__(
        self,
        message: str,
        *,
        pid: int,
        first_sequence: int,
        last_sequence: int,
        reason: str = "",
        topic: str = "",
        partition: int = -1,
    ) -> None:
        super().__init__(message)
        self.pid = pid
        self.first_sequence = first_sequence
        self.last_sequence = last_sequence
        self.reason = reason
        self.topic = topic
        self.partition = partition


class DuplicateMessageId(FencingError):
    """Some of a call's message ids were appended before and others were not; nothing of
    the call was written.

    A call (``send``, ``send_batch``, ``send_async``) is answered by its message ids only
    when every record's id is known: then its records are not appended again and each gets
    its original's metadata (``duplicate`` set). ``known`` maps the index of each record
    of the call whose id is known to that original's metadata; send the others again.

    >>> try:
    ...     producer.send_batch(records, partition=0)
    ... except fencing.DuplicateMessageId as exc:
    ...     rest = [r for i, r in enumerate(records) if i not in exc.known]  # doctest: +SKIP
    """

    def __init__(
        self,
        message: str,
        *,
        known: Mapping[int, RecordMetadata],
        topic: str = "",
        partition: int = -1,
    ) -> None:
        super().__init__(message)
        self.known = dict(known)
        self.topic = topic
        self.partition = partition


class OutOfOrderSequence(FencingError):
    """A batch left a gap in the producer's sequence; nothing was written (``topic`` and
    ``partition`` say where).

    >>> try:
    ...     producer.send(b"v", partition=0)
    ... except fencing.OutOfOrderSequence as exc:
    ...     exc.expected_sequence, exc.sequence                      # doctest: +SKIP
    (10, 12)
    """

    def __init__(
        self,
        message: str,
        *,
        pid: int,
        expected_sequence: int,
        sequence: int,
        topic: str = "",
        partition: int = -1,
    ) -> None:
        super().__init__(message)
        self.pid = pid
        self.expected_sequence = expected_sequence
        self.sequence = sequence
        self.topic = topic
        self.partition = partition


class UnknownProducerId(FencingError):
    """The producer's state expired while a batch was pending or ``resume=`` named it.

    ``reason`` says which: ``pending-expired``, ``resume-expired``, ``expired`` (an
    incarnation above the first that nothing vouches for any more) or ``idle`` (a plain
    producer past its first batch: it takes a fresh PID and sends again by itself, so this
    reaches only a caller of the raw script).

    >>> try:
    ...     producer = topic.producer(resume=saved_state)
    ... except fencing.UnknownProducerId as exc:
    ...     exc.reason                                               # doctest: +SKIP
    'resume-expired'
    """

    def __init__(
        self, message: str, *, pid: int, reason: str = "", topic: str = "", partition: int = -1
    ) -> None:
        super().__init__(message)
        self.pid = pid
        self.reason = reason
        self.topic = topic
        self.partition = partition


class SinkError(FencingError):
    """The Spark sink refused a micro-batch before writing any of it (or the rest of it).

    Raised on the driver, or in a Spark task (and then reported by Spark's job failure).
    ``app_id``, ``query_id`` and ``batch_id`` say which batch.

    >>> try:
    ...     query.awaitTermination()                                 # doctest: +SKIP
    ... except Exception as exc:                      # Spark wraps the executor's error
    ...     log.error("batch refused: %s", exc)
    """

    def __init__(
        self, message: str, *, app_id: str = "", query_id: str = "", batch_id: int = -1
    ) -> None:
        super().__init__(message)
        self.app_id = app_id
        self.query_id = query_id
        self.batch_id = batch_id


class CheckpointReset(SinkError):
    """Another streaming query id already wrote under this app id: the checkpoint was
    deleted or reset (a new checkpoint gets a new query id, and batch ids start again at 0).

    Writing on would drop or duplicate rows silently (Delta Lake ignores such batches); use a
    new ``app_id``, or pass ``new_lineage=True`` once to start a new lineage.

    >>> sink = ForeachBatchSink(url, "events", app_id="etl", new_lineage=True)  # once
    """


class NondeterministicBatch(SinkError):
    """A micro-batch replayed after a failure differs from its first attempt: another Spark
    partition count, or other rows (or another order) in a Spark partition than the rows
    already written. Nothing more of the batch was written.

    >>> df = spark.readStream.table("events").orderBy("id")          # doctest: +SKIP
    """


class Unavailable(FencingError):
    """The server could not be reached within the call's retry budget.

    >>> try:
    ...     owner.renew()
    ... except fencing.Unavailable:                   # nothing was applied: retry later
    ...     time.sleep(1)
    """


class OutcomeUnknown(Unavailable):
    """A state-changing request may or may not have been applied.

    Every state-changing call of the ownership table is idempotent for its handle, so the
    same call can be made again once the server is reachable.

    >>> try:
    ...     producer.send(b"v", partition=0)
    ... except fencing.OutcomeUnknown:
    ...     producer.resolve(0)                       # its metadata, or None
    """


class NotEnoughReplicas(OutcomeUnknown):
    """A write was applied on the primary, but the durability its handle asked for
    (``acks="replicated"``: a replica's copy; ``acks="fsync"``: the primary's fsync) was not
    confirmed in time. It may not survive a failover. An idempotent resend is safe (it is
    deduplicated); a producer settles it before its next send on that partition.

    >>> producer = topic.producer(acks="replicated")
    >>> try:
    ...     producer.send(b"v", partition=0)
    ... except fencing.NotEnoughReplicas as exc:
    ...     exc.wanted, exc.confirmed                                # doctest: +SKIP
    (1, 0)
    """

    def __init__(self, message: str, *, acks: str, wanted: int, confirmed: int) -> None:
        super().__init__(message)
        self.acks = acks
        self.wanted = wanted
        self.confirmed = confirmed

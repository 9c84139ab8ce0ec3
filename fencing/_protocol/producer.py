"""Script calls of producers on a partition: access modes, epochs, leases (the access modes).
No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._keys import PartitionKeys
from .._lua_loader import script
from .._text import text
from ..errors import (
    DuplicateSequence,
    FencingError,
    OutOfOrderSequence,
    ProducerBusy,
    ProducerFenced,
    StateLost,
    UnknownProducerId,
)
from .base import ErrorReply, ScriptCall, generic_error, parse_error_reply
from .guarded import guarded_error
from .partition_errors import parse_answers, partition_errors, topic_errors
from .topic import DEFAULT_DEDUP_WINDOW


@dataclass(frozen=True, slots=True)
class PidState:
    """An idempotent producer's state on one partition, as the scripts keep it.

    ``batches`` counts the batches its window recorded; ``window`` holds the last of them
    (at most the topic's duplicate window), oldest first, as ``(first_sequence,
    last_sequence, digest, first_offset)`` when the window's slots were given to
    :func:`decode_pid_state`; ``owner`` is the session of the producer object that owns the
    PID ("" in states written before owners were kept).
    """

    generation: int
    last_sequence: int
    last_write_ms: int
    window: tuple[tuple[int, int, str, int], ...]
    owner: str = ""
    batches: int = 0


def decode_pid_state(
    raw: bytes | str,
    slots: dict[Any, Any] | None = None,
    *,
    pid: int | str | None = None,
    size: int = DEFAULT_DEDUP_WINDOW,
) -> PidState:
    """Parse a state as ``lua/include/pid_state.lua`` writes it, ``"<g> <s> <t> <x>
    <owner>;<batches>"`` (a state of an older version, ``"<g> <s> <t> <x> <owner>|..."``,
    reads with an empty window), and its window from ``slots`` (the partition's window
    hash, ``"<pid>:<slot>" -> "<first> <last> <digest> <offset>"``; ``pid`` says whose).

    >>> decode_pid_state("2 9 1700000000000 1700000000000 ab12;2",
    ...                  {"7:0": "5 7 q83vEjRWeJq8 37", "7:1": "8 9 AAECAwQFBgcI 40"}, pid=7)
    PidState(generation=2, last_sequence=9, last_write_ms=1700000000000, window=((5, 7, \
'q83vEjRWeJq8', 37), (8, 9, 'AAECAwQFBgcI', 40)), owner='ab12', batches=2)
    """
    state = text(raw)
    if ";" in state:
        head, count = state.rsplit(";", 1)
        batches = int(count)
    else:
        head, batches = state.split("|", 1)[0], 0
    g, s, t, _x, *owner = head.split(" ")
    window = []
    if slots and pid is not None:
        found = {text(k): text(v) for k, v in slots.items()}
        for k in range(max(0, batches - size), batches):
            entry = found.get(f"{pid}:{k % size}")
            if entry is not None:
                first, last, digest, offset = entry.split(" ")
                window.append((int(first), int(last), digest, int(offset)))
    return PidState(
        int(g), int(s), int(t), tuple(window), owner[0] if owner and owner[0] else "", batches
    )


#: The access modes as the producer_open script names them.
OPEN_MODES = {
    "SHARED": "shared",
    "EXCLUSIVE": "exclusive",
    "WAIT_FOR_EXCLUSIVE": "wait",
    "EXCLUSIVE_WITH_FENCING": "fence",
}


@dataclass(frozen=True, slots=True)
class Opened:
    """A producer_open reply.

    ``status`` is ``granted`` (exclusive: ``epoch`` is new), ``shared`` (registered under
    ``epoch``) or ``waiting`` (queued at ``position``; try again within ``remaining_ms``).
    """

    status: str
    epoch: int
    expires_ms: int
    remaining_ms: int
    position: int
    incarnation: str
    wgen: int


def producer_errors(pk: PartitionKeys) -> Any:
    """Error mapping of producer calls on one partition (falls back to partition errors)."""
    fallback = partition_errors(pk)
    where = f"partition {pk.partition} of topic {pk.topic!r}"

    def convert(reply: ErrorReply) -> FencingError:
        if reply.code == "PRODUCER_FENCED":
            epoch, current = reply.int("epoch"), reply.int("current_epoch")
            why = {
                "fenced-waiter": f"the queue it waited in at epoch {epoch} was fenced while "
                "it waited (an EXCLUSIVE_WITH_FENCING producer took over, or an operator ran "
                "'fencing release --producer --evict-waiters')",
                "pid-generation": f"it is incarnation {epoch} of its producer id, and "
                f"incarnation {current} (resume= or the same name) was opened since",
                "name": f"it is incarnation {epoch} of its name, and incarnation {current} was "
                "opened since",
                "incarnation": f"it is open number {epoch} of its name (or saved state), and "
                f"open number {current}, made at the same time, opened this partition first",
                "term-ended": f"the term of token {epoch} ended: the term of token {current} "
                "fenced the partition when it was granted",
            }.get(
                reply.fields["reason"],
                f"it holds epoch {epoch} but epoch {current} was granted to another producer since",
            )
            return ProducerFenced(
                f"producer fenced on {where}: {why}. This producer can never write again; "
                "open a new one",
                topic=pk.topic,
                partition=pk.partition,
                epoch=epoch,
                current_epoch=current,
            )
        if reply.code == "GUARDED":
            return guarded_error(pk.topic, pk.partition, reply)
        if reply.code == "PRODUCER_BUSY":
            reason = reply.fields["reason"]
            remaining = reply.int("remaining_ms") / 1000.0
            label = reply.fields["holder_label"]
            what = {
                "exclusive": f"an exclusive producer ({label or 'unnamed'}) holds it",
                "shared": "shared producers are writing to it",
                "waiting": "WAIT_FOR_EXCLUSIVE producers are queued for it",
            }.get(reason, reason)
            return ProducerBusy(
                f"{where} is busy: {what} (their lease runs at most {remaining:.3f}s more). "
                "Use AccessMode.WAIT_FOR_EXCLUSIVE to queue, or EXCLUSIVE_WITH_FENCING to "
                "take over",
                topic=pk.topic,
                partition=pk.partition,
                reason=reason,
                remaining=remaining,
                holder_label=label,
            )
        if reply.code == "DUPLICATE_SEQUENCE":
            first, last = reply.int("first_seq"), reply.int("last_seq")
            what = {
                "other-records": "was used by other records; nothing was written. The "
                "records written under those sequences are in the log: the producer goes on "
                "after them",
                "straddles": "start at or below the last sequence written and end past it; "
                "nothing was written. Resend with the batch boundaries used before (a resend "
                "is answered only as the very batch it repeats)",
            }.get(
                reply.fields["reason"],
                "were written before but are older than the topic's duplicate window, so "
                "their offsets are not kept; nothing was written. They are in the log: skip "
                "them, and the producer goes on with the records after them",
            )
            return DuplicateSequence(
                f"{where}: producer {reply.fields['pid']} sequences {first}..{last} {what}",
                pid=int(reply.fields["pid"]),
                first_sequence=first,
                last_sequence=last,
                reason=reply.fields["reason"],
                topic=pk.topic,
                partition=pk.partition,
            )
        if reply.code == "OUT_OF_ORDER_SEQUENCE":
            expected, got = reply.int("expected_seq"), reply.int("first_seq")
            return OutOfOrderSequence(
                f"{where}: producer {reply.fields['pid']} sent sequence {got} but the next "
                f"is {expected}; nothing was written. A batch in between is missing: resend "
                "from the saved state's sequence",
                pid=int(reply.fields["pid"]),
                expected_sequence=expected,
                sequence=got,
                topic=pk.topic,
                partition=pk.partition,
            )
        if reply.code == "UNKNOWN_PRODUCER_ID":
            pid, reason = reply.fields["pid"], reply.fields["reason"]
            if reason == "idle":
                return UnknownProducerId(
                    f"{where}: producer {pid} has no state past its first batch (it expired "
                    "while the producer was idle); nothing was written. A producer then "
                    "takes a fresh PID and sends the batch again as that PID's first",
                    pid=int(pid),
                    reason=reason,
                    topic=pk.topic,
                    partition=pk.partition,
                )
            what = {
                "pending-expired": "so whether its pending batch landed cannot be known",
                "expired": "and this batch may be a resend of one that landed before, so it "
                "cannot start the state afresh",
                "resume-expired": "so the saved state cannot be resumed (its window is gone)",
            }.get(
                reason,
                "and nothing vouches for this incarnation's generation any more (its fence "
                "is unknown)",
            )
            return UnknownProducerId(
                f"{where}: the state of producer {pid} expired ({reason}), {what}; nothing "
                "was written. Check the log, then open a new producer (without resume=)",
                pid=int(pid),
                reason=reason,
                topic=pk.topic,
                partition=pk.partition,
            )
        if reply.code in (
            "STATE_LOST",
            "WRONG_TYPE",
            "OFFSET_MISMATCH",
            "BAD_ARGUMENT",
            "DUPLICATE_MESSAGE_ID",
        ):
            return fallback(reply)  # type: ignore[no-any-return]
        return generic_error(reply)

    return convert


def producer_open(
    pk: PartitionKeys,
    *,
    session: str,
    label: str,
    mode: str,
    ttl_ms: int,
    new_incarnation: str,
    seen_incarnation: str,
    wgen: int | None,
    session_channel_prefix: str,
    partition_incarnation: str,
    named: bool = False,
) -> ScriptCall[Opened]:
    """Register on a partition in an access mode (``shared|exclusive|wait|fence``)."""

    def parse(reply: list[Any]) -> Opened:
        status = text(reply[0])
        if status == "waiting":
            _, remaining, position, inc, wg = reply
            return Opened(status, 0, 0, int(remaining), int(position), text(inc), int(wg))
        _, epoch, expires, inc, wg = reply
        return Opened(status, int(epoch), int(expires), 0, 0, text(inc), int(wg))

    return ScriptCall(
        script=script("producer_open"),
        keys=(pk.owner, pk.shared, pk.waiters, pk.waiting_leases, pk.meta),
        args=(
            session,
            label,
            mode,
            ttl_ms,
            new_incarnation,
            seen_incarnation,
            "" if wgen is None else wgen,
            session_channel_prefix,
            pk.released,
            "1" if named else "0",
            partition_incarnation,
        ),
        parse=parse,
        error=producer_errors(pk),
    )


def producer_renew(
    pk: PartitionKeys,
    *,
    session: str,
    mode: str,
    epoch: int,
    ttl_ms: int,
    incarnation: str,
    pid: int,
    pid_generation: int,
    name: str | None,
    partition_incarnation: str,
) -> ScriptCall[tuple[int, int]]:
    """Extend an exclusive holder's (``x``) or shared producer's (``s``) lease, as long as
    the producer is still the newest incarnation of its PID and name: ``(expires_ms,
    lapsed_ms)``, the new end and how long the lease had already ended by server time."""
    return ScriptCall(
        script=script("producer_renew"),
        keys=(pk.owner, pk.shared, pk.pids, pk.names, pk.meta),
        args=(
            session,
            mode,
            epoch,
            ttl_ms,
            incarnation,
            pid,
            pid_generation,
            name or "",
            partition_incarnation,
        ),
        parse=lambda reply: (int(reply[0]), int(reply[1])),
        error=producer_errors(pk),
    )


@dataclass(frozen=True, slots=True)
class Left:
    """A producer_close reply: whether the producer was still registered, and the
    :class:`~fencing.StateLost` the partition showed (it was left all the same)."""

    registered: bool
    lost: StateLost | None


def producer_close(
    pk: PartitionKeys,
    *,
    session: str,
    mode: str,
    epoch: int,
    partition_incarnation: str,
    seen_next: int,
) -> ScriptCall[Left]:
    """Leave a partition (``x`` holder, ``s`` shared, ``w`` waiter); wakes waiters.

    ``epoch=-1`` with ``x`` leaves whatever epoch this session holds (after an open whose
    outcome is unknown). The partition is judged as a send would judge it (G9: the
    incarnation and the highest next offset the producer saw; ``""`` judges nothing), and a
    loss is reported in the reply, never by refusing to leave."""
    errors = producer_errors(pk)

    def parse(reply: Any) -> Left:
        registered, lost = reply
        found = parse_error_reply(text(lost)) if lost else None
        exc = errors(found) if found is not None else None
        return Left(int(registered) == 1, exc if isinstance(exc, StateLost) else None)

    return ScriptCall(
        script=script("producer_close"),
        keys=(pk.owner, pk.shared, pk.waiters, pk.waiting_leases, pk.meta),
        args=(session, mode, epoch, pk.released, partition_incarnation, seen_next),
        parse=parse,
        error=errors,
    )


@dataclass(frozen=True, slots=True)
class PidOpened:
    """A pid_open reply: the PID to use, its new generation, the next sequence, and the one
    after the last the server holds written (a batch below it may be a resend)."""

    pid: int
    generation: int
    next_sequence: int
    written_next: int = 0


def pid_open(
    pk: PartitionKeys,
    *,
    pid: int,
    name: str | None,
    resume_generation: int | None,
    resume_next_sequence: int | None,
    session: str,
    incarnation: str,
    ticket: Ticket | None = None,
) -> ScriptCall[PidOpened]:
    """Start a new incarnation of a named or resumed producer on one partition; ``session``
    becomes the PID's owner there. With a ``ticket`` (:func:`producer_ticket`), an opener
    with a higher ticket that was here first makes this one ProducerFenced."""

    def parse(reply: list[Any]) -> PidOpened:
        got_pid, gen, nxt, written = reply
        return PidOpened(int(got_pid), int(gen), int(nxt), int(written))

    return ScriptCall(
        script=script("pid_open"),
        keys=(pk.pids, pk.pid_expiry, pk.names, pk.meta, pk.window),
        args=(
            pid,
            name or "",
            "" if resume_generation is None else resume_generation,
            "" if resume_next_sequence is None else resume_next_sequence,
            session,
            incarnation,
            "" if ticket is None else ticket.key,
            "" if ticket is None else ticket.number,
        ),
        parse=parse,
        error=producer_errors(pk),
    )


@dataclass(frozen=True, slots=True)
class Ticket:
    """The order of an incarnation among the opens of one name or saved state: its ``key``
    (``n:<name>`` or ``p:<pid>``), the PID agreed for it and its ``number``."""

    key: str
    pid: int
    number: int


def producer_ticket(
    topic_key: str, topic: str, *, incarnation: str, name: str | None, pid: int
) -> ScriptCall[Ticket]:
    """Draw a new incarnation's ticket for the whole topic (a name's, else a resumed PID's):
    on every partition, a higher ticket wins over a lower one whatever the order of opens."""
    key = f"n:{name}" if name else f"p:{pid}"

    def parse(reply: list[Any]) -> Ticket:
        got_pid, number = reply
        return Ticket(key, int(got_pid), int(number))

    return ScriptCall(
        script=script("producer_ticket"),
        keys=(topic_key,),
        args=(incarnation, key, pid),
        parse=parse,
        error=topic_errors(topic, topic_key),
    )


@dataclass(frozen=True, slots=True)
class Resolved:
    """A resolve reply: whether the pending batch landed, and how to continue."""

    landed: bool
    first_offset: int
    generation: int
    #: The PID's last written sequence + 1 on the partition: where a batch that did not
    #: land leaves the producer, and below which no batch is fresh. A batch that landed
    #: is the last one acknowledged: the producer goes on after it, which may be below.
    next_sequence: int
    #: The epoch the landed batch's records carry (a newer incarnation of the PID may have
    #: written it under its own); -1 when it did not land, or retention trimmed it away.
    epoch: int = -1
    #: The records of the landed batch that callers' calls answered by their message ids
    #: (see :class:`~fencing._protocol.topic.Appended`).
    answers: dict[int, tuple[int, int]] | None = None


def resolve(
    pk: PartitionKeys,
    *,
    pid: int,
    generation: int,
    first_seq: int,
    last_seq: int,
    checksum: str,
    session: str,
    incarnation: str,
    pending_ms: int,
    fresh: bool = True,
) -> ScriptCall[Resolved]:
    """Settle a batch whose outcome is unknown: landed (offsets), or fenced off for good.
    Idempotent: a retry after a lost reply gets the first attempt's answer."""

    def parse(reply: list[Any]) -> Resolved:
        landed, first, gen, nxt, epoch = reply[:5]
        answers = text(reply[5]) if len(reply) > 5 else ""
        return Resolved(
            int(landed) == 1,
            int(first),
            int(gen),
            int(nxt),
            int(epoch),
            parse_answers(answers) if answers else None,
        )

    return ScriptCall(
        script=script("resolve"),
        keys=(pk.pids, pk.pid_expiry, pk.meta, pk.names, pk.window, pk.stream),
        args=(
            pid,
            generation,
            first_seq,
            last_seq,
            checksum,
            session,
            incarnation,
            max(0, pending_ms),
            1 if fresh else 0,
        ),
        parse=parse,
        error=producer_errors(pk),
    )

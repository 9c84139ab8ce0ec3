"""Script calls of producers on a partition: access modes, epochs, leases (DESIGN 4b).
No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import FencingError, ProducerBusy, ProducerFenced
from ..keys import PartitionKeys
from ..lua_loader import script
from ..text import text
from .base import ErrorReply, ScriptCall, generic_error
from .topic import partition_errors

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
            why = (
                "an EXCLUSIVE_WITH_FENCING producer took over while it waited"
                if reply.fields["reason"] == "fenced-waiter"
                else f"epoch {current} was granted to another producer since"
            )
            return ProducerFenced(
                f"producer fenced on {where}: it holds epoch {epoch} but {why}. This "
                "producer can never write again; open a new one",
                topic=pk.topic,
                partition=pk.partition,
                epoch=epoch,
                current_epoch=current,
            )
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
        if reply.code in ("STATE_LOST", "WRONG_TYPE", "OFFSET_MISMATCH", "BAD_ARGUMENT"):
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
        keys=(pk.owner, pk.shared, pk.waiters, pk.waiting_leases),
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
        ),
        parse=parse,
        error=producer_errors(pk),
    )


def producer_renew(
    pk: PartitionKeys, *, session: str, mode: str, epoch: int, ttl_ms: int, incarnation: str
) -> ScriptCall[int]:
    """Extend an exclusive holder's (``x``) or shared producer's (``s``) lease."""
    return ScriptCall(
        script=script("producer_renew"),
        keys=(pk.owner, pk.shared),
        args=(session, mode, epoch, ttl_ms, incarnation),
        parse=int,
        error=producer_errors(pk),
    )


def producer_close(pk: PartitionKeys, *, session: str, mode: str, epoch: int) -> ScriptCall[bool]:
    """Leave a partition (``x`` holder, ``s`` shared, ``w`` waiter); wakes waiters."""
    return ScriptCall(
        script=script("producer_close"),
        keys=(pk.owner, pk.shared, pk.waiters, pk.waiting_leases),
        args=(session, mode, epoch, pk.released),
        parse=lambda reply: int(reply) == 1,
        error=producer_errors(pk),
    )

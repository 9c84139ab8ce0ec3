"""Script calls of single readers: the fenced commit of a consumed offset. No I/O."""

from __future__ import annotations

from typing import Any

from .._grant import Grant
from .._keys import PartitionKeys
from .._lua_loader import script
from ..errors import FencingError, StateLost, WrongKeyType
from .base import Command, ErrorReply, ReadCall, ScriptCall
from .ownership import Target
from .ownership import _errors as ownership_errors
from .partition_errors import partition_errors


def commit(
    target: Target,
    pk: PartitionKeys,
    *,
    session: str,
    grant: Grant,
    partition_incarnation: str,
    offset: int,
    seen_next: int,
    last: int | None = None,
) -> ScriptCall[int]:
    """Store ``offset`` as ``target.group``'s committed offset of one partition, iff the
    caller's grant on that partition's row is still the current one, and (``last``) the
    stored offset is still the one this member last committed under that grant."""
    own_errors = ownership_errors(target)
    part_errors = partition_errors(pk)

    def convert(reply: ErrorReply) -> FencingError:
        if reply.code == "STATE_LOST" and reply.fields.get("reason") == "committed":
            return StateLost(
                f"the committed offset of group {target.group!r} on {pk.topic!r} partition "
                f"{pk.partition} is {reply.fields['found']}, but this member had committed "
                f"{reply.fields['seen']} there: the Redis server lost that commit (a "
                "failover, FLUSHALL, a restart without persistence). Nothing was written. "
                "Open a new consumer: it resumes from the committed offset, and reads again "
                "what the lost commit covered",
                reason="committed",
                key=pk.committed,
            )
        # STATE_LOST names the incarnation it expected: the partition's or the grant's.
        partition_side = reply.code == "OFFSET_OUT_OF_RANGE" or (
            reply.code == "STATE_LOST"
            and (
                reply.fields.get("seen") == partition_incarnation
                or reply.fields.get("reason") == "offset"
            )
        )
        error: FencingError = part_errors(reply) if partition_side else own_errors(reply)
        return error

    return ScriptCall(
        script=script("commit"),
        keys=(target.key, pk.meta, pk.committed),
        args=(
            session,
            grant.token,
            grant.incarnation,
            partition_incarnation,
            target.group,
            offset,
            seen_next,
            "" if last is None else last,
        ),
        parse=lambda reply: int(reply[0]),
        error=convert,
        # A retry refused after a lost reply (a takeover in between) may follow a commit
        # that was applied: report OutcomeUnknown, not "Fenced, nothing written".
        ambiguous_after_retry=True,
    )


def committed(pk: PartitionKeys, group: str) -> ReadCall[int | None]:
    """The committed offset of ``group`` on one partition, or None if it never committed."""
    command: Command = ("HGET", pk.committed, group)

    def parse(replies: list[Any]) -> int | None:
        value = replies[0]
        if value is None:
            return None
        try:
            offset = int(value)
        except ValueError:
            offset = -1
        if offset < 0:
            raise WrongKeyType(
                f"field {group!r} of {pk.committed!r} holds {value!r}, not a committed offset: "
                "another program wrote there; remove the field to start the group afresh",
                key=pk.committed,
                key_type="hash",
            )
        return offset

    return ReadCall(commands=(command,), parse=parse)


def forget(pk: PartitionKeys, group: str, row_key: str) -> ScriptCall[bool]:
    """Remove a consumer group's released row of a partition that no longer exists (its
    topic was deleted); True if it was removed."""
    return ScriptCall(
        script=script("consumer_forget"),
        keys=(row_key, pk.meta),
        args=(),
        parse=lambda reply: int(reply) == 1,
        error=partition_errors(pk),
    )

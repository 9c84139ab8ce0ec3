"""Script calls of guarded topics: the topics an election guards, each fenced at the token
of every term it grants, and written only by producers of its terms. No I/O.

- :func:`guard_add` registers a topic with the election (in the election row's slot),
  atomically with the check that the term still holds; :func:`guard_drop` forgets one that
  was deleted or is another election's; :func:`guards` lists them.
- :func:`topic_guard` makes the election the topic's one guard (in the topic's slot).
- :func:`term_fence` fences one partition at a new term's token (in the partition's slot).
- :func:`term_open` opens a term's producer on one partition, its epoch the term's token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .._keys import PartitionKeys
from .._lua_loader import script
from .._text import text
from . import ownership, producer
from .base import ReadCall, ScriptCall, generic_error
from .election import ElectionKeys


@dataclass(frozen=True, slots=True)
class Guarded:
    """A topic an election guards, as registered: its incarnation and partition count."""

    topic: str
    incarnation: str
    partitions: int

    @property
    def value(self) -> str:
        """The registration as stored: ``"<incarnation> <partitions>"``."""
        return f"{self.incarnation} {self.partitions}"


def guards_key(keys: ElectionKeys) -> str:
    """The hash of the topics an election guards, in the slot of its row."""
    return keys.target.key + ":guards"


def guard_add(
    keys: ElectionKeys, guarded: Guarded, *, session: str, token: int, seen_incarnation: str
) -> ScriptCall[int]:
    """Register ``guarded`` with the election while the term (session, token) holds."""
    return ScriptCall(
        script=script("term_guard"),
        keys=(keys.target.key, guards_key(keys)),
        args=("add", guarded.topic, guarded.value, session, token, seen_incarnation),
        parse=int,
        error=ownership._errors(keys.target),
    )


def guard_drop(keys: ElectionKeys, guarded: Guarded) -> ScriptCall[int]:
    """Forget ``guarded`` (only that registration: a newer one of the topic is kept)."""
    return ScriptCall(
        script=script("term_guard"),
        keys=(keys.target.key, guards_key(keys)),
        args=("drop", guarded.topic, guarded.value, "", "", ""),
        parse=int,
        error=generic_error,
    )


def guards(keys: ElectionKeys) -> ReadCall[list[Guarded]]:
    """The topics an election guards, sorted by name."""

    def parse(replies: list[Any]) -> list[Guarded]:
        out = []
        for topic, value in (replies[0] or {}).items():
            inc, _, count = text(value).partition(" ")
            out.append(Guarded(text(topic), inc, int(count)))
        return sorted(out, key=lambda g: g.topic)

    return ReadCall(commands=(("HGETALL", guards_key(keys)),), parse=parse)


def topic_guard(meta_key: str, election: str, incarnation: str) -> ScriptCall[tuple[str, str]]:
    """Make ``election`` the guard of a topic: ``("ours", "")``, ``("foreign", other)``
    or ``("gone", "")``."""

    def parse(reply: list[Any]) -> tuple[str, str]:
        return text(reply[0]), text(reply[1]) if len(reply) > 1 else ""

    return ScriptCall(
        script=script("topic_guard"),
        keys=(meta_key,),
        args=(election, incarnation),
        parse=parse,
        error=generic_error,
    )


def term_fence(
    pk: PartitionKeys, *, election: str, token: int, topic_incarnation: str, new_incarnation: str
) -> ScriptCall[tuple[str, str]]:
    """Fence one partition at a new term's ``token``: ``("fenced", epoch)``, ``("gone",
    "")`` or ``("foreign", other election)``."""

    def parse(reply: list[Any]) -> tuple[str, str]:
        return text(reply[0]), text(reply[1]) if len(reply) > 1 else ""

    return ScriptCall(
        script=script("term_fence"),
        keys=(pk.owner, pk.shared, pk.waiters, pk.waiting_leases, pk.meta),
        args=(
            election,
            token,
            topic_incarnation,
            new_incarnation,
            pk.session_prefix,
            pk.released,
        ),
        parse=parse,
        error=generic_error,
    )


def term_open(
    pk: PartitionKeys,
    *,
    session: str,
    label: str,
    ttl_ms: int,
    new_incarnation: str,
    partition_incarnation: str,
    election: str,
    token: int,
) -> ScriptCall[producer.Opened]:
    """Open a term's producer on one partition at epoch ``token``."""
    call = producer.producer_open(
        pk,
        session=session,
        label=label,
        mode="term",
        ttl_ms=ttl_ms,
        new_incarnation=new_incarnation,
        seen_incarnation="",
        wgen=None,
        session_channel_prefix=pk.session_prefix,
        partition_incarnation=partition_incarnation,
    )
    return dataclasses.replace(call, args=(*call.args, election, token))

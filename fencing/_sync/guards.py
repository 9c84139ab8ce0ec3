# GENERATED from fencing/_async/guards.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""Guarded topics: the topics an election guards, whose epoch is the token of its terms.

A topic becomes guarded by the first ``leadership.producer(topic)`` of any term:
:func:`guard` registers it with the election (atomically with the check that the term still
holds) and makes the election its one guard, before any partition is opened. From then on
every term the election grants is fenced on it by :func:`fence_guarded` (one script per
partition, each in its own slot) before the campaign returns: no producer of an earlier
term can write there afterwards, whether or not the new leader ever opens one.

>>> guard(context, keys, "scheduler", topic_meta, session=s, token=7, incarnation=i)
>>> fence_guarded(context, keys, "scheduler", token=8, budget=budget)
"""

from __future__ import annotations

import secrets

from .. import _protocol as protocol
from .._keys import slot_of
from .._protocol.election import ElectionKeys
from .._protocol.guards import Guarded
from .._retry import RetryBudget
from ..errors import ProducerBusy, UnknownTopic
from .context import Context
from .metadata import TopicMetadata


def guard(
    context: Context,
    keys: ElectionKeys,
    election: str,
    meta: TopicMetadata,
    *,
    session: str,
    token: int,
    incarnation: str,
    budget: RetryBudget,
) -> None:
    """Make election the guard of the topic of ``meta`` (opened) while the term (session,
    token) holds; raises the term's refusal (Fenced, LeaseExpired), or ProducerBusy when
    another election guards the topic. Idempotent (a retry after a lost reply is the same
    call)."""
    driver = context.driver(budget.timeout)
    guarded = Guarded(meta.name, meta.incarnation, meta.partitions)
    # First with the election (its slot, checked against the term): from here on a later
    # term finds the topic and fences it before it is told it leads.
    add = protocol.guards.guard_add(
        keys, guarded, session=session, token=token, seen_incarnation=incarnation
    )
    driver.execute(add, budget)
    status, other = driver.execute(
        protocol.guards.topic_guard(meta.meta_key, election, guarded.incarnation), budget
    )
    if status == "ours":
        return
    driver.execute(protocol.guards.guard_drop(keys, guarded), budget)
    if status == "gone":
        raise UnknownTopic(
            f"topic {meta.name!r} was deleted (or is being deleted) while a producer of "
            f"election {election!r} opened it: open it again",
            topic=meta.name,
        )
    raise ProducerBusy(
        f"topic {meta.name!r} is guarded by election {other!r}: a topic is guarded by one "
        "election only; give this election a topic of its own",
        topic=meta.name,
        partition=0,
        reason="guarded",
        remaining=0.0,
        holder_label=other,
    )


def fence_guarded(
    context: Context, keys: ElectionKeys, election: str, *, token: int, budget: RetryBudget
) -> list[Guarded]:
    """Fence every topic the election guards at ``token`` (a term just granted); forget
    the topics deleted or guarded by another election. Returns the topics fenced. Every
    call is idempotent: after a failure (a node down) the whole is simply run again."""
    driver = context.driver(budget.timeout)
    fenced: list[Guarded] = []
    for guarded in driver.read(protocol.guards.guards(keys), budget):
        meta_key = context.keys.topic_meta(guarded.topic)
        status, _ = driver.execute(
            protocol.guards.topic_guard(meta_key, election, guarded.incarnation), budget
        )
        parts = [context.keys.partition(guarded.topic, p) for p in range(guarded.partitions)]
        for pk in sorted(parts, key=lambda k: (slot_of(k.owner), k.partition)):
            if status != "ours":
                break
            call = protocol.guards.term_fence(
                pk,
                election=election,
                token=token,
                topic_incarnation=guarded.incarnation,
                new_incarnation=secrets.token_hex(8),
            )
            status, _ = driver.execute(call, budget)
            status = "ours" if status == "fenced" else status
        if status == "ours":
            fenced.append(guarded)
        else:
            driver.execute(protocol.guards.guard_drop(keys, guarded), budget)
    return fenced

"""Script calls of the operator's writes, run by :mod:`fencing._async.admin`: deleting a
topic step by step (on its metadata and on each partition), and releasing a partition's
producers to its queue. No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._keys import PartitionKeys
from .._lua_loader import script
from .._text import text
from .base import ScriptCall
from .partition_errors import partition_errors, topic_errors
from .producer import producer_errors


def topic_delete(
    key: str, topic: str, step: str, incarnation: str = ""
) -> ScriptCall[tuple[int, str, bool]]:
    """One step of deleting a topic on its metadata: ``"mark"`` returns the partition
    count, the incarnation and whether a delete had marked it before; ``"unmark"`` and
    ``"drop"`` (of ``incarnation`` only) return ``(done, "", False)``."""

    def parse(reply: Any) -> tuple[int, str, bool]:
        if step == "mark":
            partitions, inc, already = reply
            return int(partitions), text(inc), int(already) == 1
        return int(reply), "", False

    return ScriptCall(
        script=script("topic_delete"),
        keys=(key,),
        args=(step, incarnation),
        parse=parse,
        error=topic_errors(topic, key),
    )


def partition_delete(
    pk: PartitionKeys, topic_incarnation: str, step: str, mark_ttl: float | None = None
) -> ScriptCall[bool]:
    """One step of deleting a partition (``"mark"``, ``"unmark"``, ``"drop"``), on the
    topic incarnation given only; True if the partition is of that incarnation. ``"drop"``
    leaves a mark of the deleted incarnation for ``mark_ttl`` seconds (None: the topic's
    producer state expiry)."""
    keep = "" if mark_ttl is None else str(max(1, round(mark_ttl * 1000)))
    return ScriptCall(
        script=script("partition_delete"),
        keys=(
            pk.meta,
            pk.stream,
            pk.owner,
            pk.shared,
            pk.waiters,
            pk.waiting_leases,
            pk.pids,
            pk.pid_expiry,
            pk.names,
            pk.window,
            pk.committed,
            pk.message_ids,
            pk.message_id_queue,
            pk.deleted,
        ),
        args=(topic_incarnation, step, keep),
        parse=lambda reply: int(reply) == 1,
        error=partition_errors(pk),
    )


@dataclass(frozen=True, slots=True)
class Evicted:
    """What an operator's release of a partition's producers did (``producer_evict``): the
    epoch before and after, the exclusive holder severed (``""`` if none) and its label,
    the waiter that now holds the partition (``""`` if none), how many shared producers and
    live waiters were fenced."""

    old_epoch: int
    new_epoch: int
    severed: str
    severed_label: str
    next_holder: str
    shared_fenced: int
    waiters_fenced: int


def producer_evict(
    pk: PartitionKeys, partition_incarnation: str, *, evict_waiters: bool
) -> ScriptCall[Evicted]:
    """Sever a partition's writers with epoch + 1 and hand it to its first live waiter (or,
    with ``evict_waiters``, fence the waiters too and leave it free)."""

    def parse(reply: Any) -> Evicted:
        old, new, severed, label, head, shared, waiting = reply
        return Evicted(
            int(old), int(new), text(severed), text(label), text(head), int(shared), int(waiting)
        )

    return ScriptCall(
        script=script("producer_evict"),
        keys=(pk.owner, pk.shared, pk.waiters, pk.waiting_leases, pk.meta),
        args=(partition_incarnation, pk.session_prefix, pk.released, "1" if evict_waiters else "0"),
        parse=parse,
        error=producer_errors(pk),
    )

"""The refusal of a producer open on a topic an election guards (``GUARDED``). No I/O.

Any producer open on a guarded partition can meet it (an open from outside the election,
a term of another election, a topic written at higher epochs before it was guarded), so
the producer calls' error mapping and the term's own open share it.
"""

from __future__ import annotations

from ..errors import ProducerBusy
from .base import ErrorReply


def guarded_error(topic: str, partition: int, reply: ErrorReply) -> ProducerBusy:
    """The typed error of a ``GUARDED`` reply on ``partition`` of ``topic``.

    >>> reply = ErrorReply("GUARDED", {"election": "sched", "reason": "outside",
    ...                    "epoch": "4"}, "")
    >>> guarded_error("orders", 0, reply).reason
    'guarded'
    """
    election, reason, epoch = reply.fields["election"], reply.fields["reason"], reply.int("epoch")
    where = f"partition {partition} of topic {topic!r}"
    if reason == "epoch":
        message = (
            f"{where} was written at epoch {epoch} by producers outside election "
            f"{election!r}, at or above this term's token: a term writes there only once its "
            "token is above that epoch. Guard a topic the election alone writes from its start"
        )
    elif reason == "election":
        message = (
            f"{where} is guarded by election {election!r}: a topic is guarded by one election "
            "only; give this election a topic of its own"
        )
    else:
        message = (
            f"{where} is guarded by election {election!r}: only its leader writes there, "
            "through leadership.producer(topic)"
        )
    return ProducerBusy(
        message,
        topic=topic,
        partition=partition,
        reason="guarded" if reason != "epoch" else "epoch",
        remaining=0.0,
        holder_label=election,
    )

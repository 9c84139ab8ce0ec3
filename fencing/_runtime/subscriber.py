"""What a pub/sub subscriber is, in both flavours: a channel, a callback and a wake-up flag;
and where a channel is subscribed.

The notifiers (:mod:`fencing._runtime.threads.notify`, :mod:`fencing._runtime.tasks.notify`)
deliver each message through :meth:`Subscriber._deliver`; each flavour adds how to wait.

Every channel carries the hash tag of its resource (:mod:`fencing._keys`), and the scripts
publish with SPUBLISH (sharded pub/sub) where the server allows it. So the notifiers
subscribe with SSUBSCRIBE, on a cluster on the primary serving the channel's slot (one
pub/sub connection per primary that has subscriptions); a server that refuses SSUBSCRIBE
(before Redis 7, or a user not allowed it) is listened to with plain SUBSCRIBE, as the
scripts then fall back to PUBLISH.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import redis.exceptions

from .._keys import slot_of

log = logging.getLogger("fencing._runtime.notify")

Callback = Callable[[bytes | None], None]


class Subscriber:
    """One subscriber of one channel (the flavour's ``Subscription`` adds the waiting)."""

    __slots__ = ("_closed", "_event", "_notifier", "callback", "channel")

    def __init__(self, notifier: Any, channel: str, callback: Callback | None, event: Any) -> None:
        self._notifier = notifier
        self.channel = channel
        self.callback = callback
        self._event = event
        self._closed = False

    def wake(self) -> None:
        """Wake whoever waits on this subscription now, as a message would (a waiter that
        gives up: a producer closed while it queues, an election closed while it campaigns).
        """
        self._event.set()

    def _deliver(self, data: bytes | None) -> None:
        self._event.set()
        if self.callback is not None:
            try:
                self.callback(data)
            except Exception:
                log.exception("redis-fencing: a notification callback failed")


# -- where a channel is subscribed (both flavours) ------------------------------------------------

#: A cluster node, (host, port); None is the one server of a single-server client.
Node = tuple[str, int] | None


def by_slot(channels: Iterable[str]) -> list[list[str]]:
    """``channels`` grouped per hash slot, in slot order: one SSUBSCRIBE (or SUNSUBSCRIBE)
    may name the channels of one slot only (CROSSSLOT otherwise, on a cluster)."""
    groups: dict[int, list[str]] = {}
    for channel in sorted(channels):
        groups.setdefault(slot_of(channel), []).append(channel)
    return [groups[slot] for slot in sorted(groups)]


def redirected(exc: BaseException) -> bool:
    """Whether an error reply says the node does not serve the channel's slot now (MOVED,
    ASK, TRYAGAIN, CLUSTERDOWN, CROSSSLOT): the slot map is stale, read it again."""
    return isinstance(
        exc,
        (
            redis.exceptions.MovedError,
            redis.exceptions.AskError,
            redis.exceptions.TryAgainError,
            redis.exceptions.ClusterDownError,
            redis.exceptions.ClusterCrossSlotError,
        ),
    )


def refuses_sharded(exc: BaseException) -> bool:
    """Whether an error reply to SSUBSCRIBE (or SPUBLISH) means the server will not do sharded
    pub/sub for us: an unknown command (before Redis 7) or a user not allowed it. The
    notifier then subscribes with plain SUBSCRIBE, as the scripts fall back to PUBLISH."""
    return isinstance(exc, redis.exceptions.ResponseError) and not redirected(exc)


def refused_channels(exc: BaseException) -> bool:
    """Whether an error reply to SUBSCRIBE means the user may not listen on the channel (an
    ACL without the namespace's channels, ``&<namespace>:*``)."""
    return isinstance(exc, redis.exceptions.NoPermissionError) or (
        isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("NOPERM")
    )


def warn_refused_channels(exc: BaseException) -> None:
    """Say once per notifier that notifications are refused: nothing breaks, but every
    handover then waits for a poll."""
    log.warning(
        "redis-fencing: the Redis user may not subscribe to the library's channels (%s). "
        "Nothing is lost, but wake-ups fall back to polling: a waiting producer, claim or "
        "candidate learns of a release up to a third of its lease later, and a severed "
        "holder at its next call. Grant the namespace's channels (&<namespace>:*, as "
        "fencing.acl.acl_rule does)",
        exc,
    )

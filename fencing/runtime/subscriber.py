"""What a pub/sub subscriber is, in both flavours: a channel, a callback and a wake-up flag.

The notifiers (:mod:`fencing.runtime.threads.notify`, :mod:`fencing.runtime.tasks.notify`)
deliver each message through :meth:`Subscriber._deliver`; each flavour adds how to wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("fencing.runtime.notify")

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

    def _deliver(self, data: bytes | None) -> None:
        self._event.set()
        if self.callback is not None:
            try:
                self.callback(data)
            except Exception:
                log.exception("redis-fencing: a notification callback failed")

"""Pub/sub as a test sees it: the next message on a raw subscription, and a notification
callback that records what it was given.

>>> next_message(pubsub)["type"]                                       # doctest: +SKIP
'subscribe'
>>> inbox = Inbox(); owner = client.ownership("g", "a", on_severed=inbox)  # doctest: +SKIP
>>> assert inbox.wait_for(lambda got: None in got, 30)                 # doctest: +SKIP
>>> inbox.expect(raw, channel)                    # SPUBLISH until heard  # doctest: +SKIP
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.client

__all__ = ["Inbox", "next_message"]


def next_message(pubsub: redis.client.PubSub, timeout: float = 10.0) -> dict[str, Any]:
    """The next subscribe confirmation or message on ``pubsub``; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message: dict[str, Any] | None = pubsub.get_message(timeout=0.1)
        if message is not None and message["type"] in (
            "message",
            "subscribe",
            "smessage",
            "ssubscribe",
        ):
            return message
    raise AssertionError(f"no pub/sub message within {timeout}s")


class Inbox:
    """A notification callback that records what it was given (thread-safe)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.got: list[bytes | None] = []

    def __call__(self, data: bytes | None) -> None:
        with self._cond:
            self.got.append(data)
            self._cond.notify_all()

    def wait_for(self, test: Callable[[list[bytes | None]], bool], timeout: float) -> bool:
        """Whether ``test(what it got so far)`` held within ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: test(list(self.got)), timeout)

    def expect(self, raw: redis.Redis, channel: str, timeout: float = 10.0) -> None:
        """SPUBLISH a fresh payload on ``channel`` (again every 0.1 s: a message sent while
        the listener reconnects is lost by design) until the callback got it."""
        payload = uuid.uuid4().hex.encode()
        deadline = time.monotonic() + timeout
        with self._cond:
            while payload not in self.got:
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"an SPUBLISH on {channel} never reached its callback")
                raw.spublish(channel, payload)
                self._cond.wait(min(0.1, left))

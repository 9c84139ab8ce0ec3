"""Pub/sub as a test sees it: the next message on a raw subscription.

>>> next_message(pubsub)["type"]                                       # doctest: +SKIP
'subscribe'
"""

from __future__ import annotations

import time
from typing import Any

import redis.client

__all__ = ["next_message"]


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

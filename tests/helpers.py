"""Small helpers shared by tests: polling with a deadline, reading server time."""

from __future__ import annotations

import time
from typing import Any, TypeVar

import redis
import redis.client

from .support.polling import wait_until

__all__ = ["next_message", "server_ms", "wait_server_past", "wait_until"]

T = TypeVar("T")


def server_ms(r: redis.Redis) -> int:
    """The server's clock in milliseconds (the only clock leases are judged by)."""
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_server_past(r: redis.Redis, deadline_ms: int, timeout: float = 10.0) -> None:
    """Wait until the server's clock is past ``deadline_ms``."""
    wait_until(lambda: server_ms(r) > deadline_ms, timeout=timeout)


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

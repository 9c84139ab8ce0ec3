"""The helpers the per-script tests at this level (``test_lua_*.py``) import by this name;
they live in :mod:`tests.support` (one module per need) and are only re-exported here."""

from __future__ import annotations

from .support.clock import server_ms, wait_server_past
from .support.polling import wait_until
from .support.pubsub import next_message

__all__ = ["next_message", "server_ms", "wait_server_past", "wait_until"]

"""Connections for the asyncio script path: reused from a stack over a pool of their own.

The asyncio twin of :mod:`fencing.runtime.threads.connections` (read its docstring for
why): a connection taken back from the stack is checked for stray bytes or EOF before it
is written to, one that failed mid-call is disconnected, and clients with a
``credential_provider`` (or a pool shared with other commands) go through the pool on
every call.
"""

from __future__ import annotations

import os
from typing import Any

import redis.asyncio
import redis.exceptions


class ScriptConnections:
    """Checkout and checkin of the connections that run scripts (one event loop)."""

    def __init__(self, pool: redis.asyncio.ConnectionPool, *, own_pool: bool = True) -> None:
        self.pool = pool
        self._reuse = own_pool and pool.connection_kwargs.get("credential_provider") is None
        self._stack: list[Any] = []
        self._pid = os.getpid()

    async def checkout(self) -> Any:
        """A connection ready to be written to."""
        if not self._reuse:
            return await self.pool.get_connection()  # type: ignore[no-untyped-call]
        if self._pid != os.getpid():
            self._stack, self._pid = [], os.getpid()
        try:
            conn = self._stack.pop()
        except IndexError:
            return await self.pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            stale = conn.is_connected and await conn.can_read()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
            stale = True
        if stale:
            await conn.disconnect(nowait=True)  # the next send reconnects
        return conn

    @staticmethod
    async def connect(conn: Any) -> None:
        """Connect ``conn`` if it is not (a stale one was disconnected at checkout)."""
        if not conn.is_connected:
            await conn.connect()

    @staticmethod
    async def drop(conn: Any) -> None:
        """Disconnect a connection whose call failed mid-way (a reply may be on its way)."""
        await conn.disconnect(nowait=True)

    async def checkin(self, conn: Any) -> None:
        """Give a connection back."""
        if not self._reuse:
            await self.pool.release(conn)
            return
        self._stack.append(conn)

    async def close(self) -> None:
        """Disconnect every connection of the pool, in use or not."""
        self._stack = []
        await self.pool.disconnect()

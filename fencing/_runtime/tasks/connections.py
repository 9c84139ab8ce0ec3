"""Connections for the asyncio script path: reused from a stack over a pool of their own.

The asyncio twin of :mod:`fencing._runtime.threads.connections` (read its docstring for
why): a connection taken back from the stack is checked for stray bytes or EOF before it
is written to, one that failed mid-call is disconnected, and clients with a
``credential_provider`` (or a pool shared with other commands) go through the pool on
every call. Once the pool's ``max_connections`` are all out (redis-py's default is 100), a
task waits up to ``wait`` seconds for one to come back instead of failing at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis.asyncio
import redis.exceptions

from ... import _process as process
from .primitives import wait_event


class ScriptConnections:
    """Checkout and checkin of the connections that run scripts (one event loop)."""

    def __init__(
        self, pool: redis.asyncio.ConnectionPool, *, own_pool: bool = True, wait: float = 1.0
    ) -> None:
        self.pool = pool
        self._reuse = own_pool and pool.connection_kwargs.get("credential_provider") is None
        self._stack: list[Any] = []
        self._pid = os.getpid()
        self._forks = process._forks
        self._wait = wait
        self._returned: asyncio.Event | None = None
        self._waiting = 0

    async def checkout(self) -> Any:
        """A connection ready to be written to."""
        if not self._reuse:
            return await self.pool.get_connection()  # type: ignore[no-untyped-call]
        if self._forks != process._forks:  # a forked child: not one connection is its own
            self._stack, self._pid, self._forks = [], os.getpid(), process._forks
        try:
            conn = self._stack.pop()
        except IndexError:
            try:
                return await self.pool.get_connection()  # type: ignore[no-untyped-call]
            except redis.exceptions.MaxConnectionsError:
                conn = await self._wait_for_one()
        try:
            stale = conn.is_connected and await conn.can_read()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
            stale = True
        if stale:
            await conn.disconnect(nowait=True)  # the next send reconnects
        return conn

    async def _wait_for_one(self) -> Any:
        """A connection given back within ``wait`` seconds (all are out), else an error."""
        deadline = time.monotonic() + self._wait
        if self._returned is None:
            self._returned = asyncio.Event()
        self._waiting += 1
        try:
            while not self._stack:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise redis.exceptions.ConnectionError(
                        f"no free connection within {self._wait}s: all "
                        f"{self.pool.max_connections} are in use"
                    )
                self._returned.clear()
                await wait_event(self._returned, left)
            return self._stack.pop()
        finally:
            self._waiting -= 1

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
        if self._waiting and self._returned is not None:
            self._returned.set()

    async def close(self) -> None:
        """Disconnect every connection of the pool, in use or not."""
        self._stack = []
        await self.pool.disconnect()

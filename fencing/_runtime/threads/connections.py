"""Connections for the script path: a stack of reused connections over a pool of their own.

Every send is one script call, and redis-py 8's checkout and release around it (a lock, a
readiness poll, observability hooks and events on both sides) cost several microseconds,
a visible part of a ~100 us send. So the script path keeps the connections it used on a
stack and takes them back from there, doing itself what the pool's checkout and release
guarantee:

- a connection the server closed while it sat idle (``timeout``, a proxy, a failover), or
  one with stray bytes waiting, is reconnected before it is written to: ``can_read()``, the
  same zero-timeout poll the pool does. Written to blind, the first attempt would fail, the
  call would be retried, and a definite refusal after a retry reads as OutcomeUnknown;
- a connection that asked to reconnect (``should_reconnect``) is disconnected on its way
  back;
- the connections come from a pool used by nothing else, so however many the script path
  holds, reads and other commands of the client never wait for one; the pool's
  ``max_connections`` still bounds how many script calls run at once;
- after a fork, the child drops the parent's stack (the pool resets itself);
- once the pool's ``max_connections`` are all out (redis-py's default is 100), a caller
  waits up to ``wait`` seconds for one to come back instead of failing at once; a wait
  that runs out raises ConnectionError before anything was sent.

A client with a ``credential_provider`` re-authenticates its connections on release, which
only the pool does: such clients check out and release through the pool on every call, and
so does a pool shared with other commands (``own_pool=False``).

>>> connections = ScriptConnections(pool)                    # doctest: +SKIP
>>> conn = connections.checkout()
>>> try:
...     conn.send_command("PING"); conn.read_response()
... finally:
...     connections.checkin(conn)
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis
import redis.exceptions

from ... import _process as process


class ScriptConnections:
    """Checkout and checkin of the connections that run scripts (thread-safe)."""

    def __init__(
        self, pool: redis.ConnectionPool, *, own_pool: bool = True, wait: float = 1.0
    ) -> None:
        self.pool = pool
        self._reuse = own_pool and pool.connection_kwargs.get("credential_provider") is None
        self._stack: list[Any] = []  # list.pop/append are atomic under the GIL
        self._pid = os.getpid()
        self._forks = process._forks
        self._wait = wait
        self._returned = threading.Condition()
        self._waiting = 0

    def checkout(self) -> Any:
        """A connection ready to be written to."""
        if not self._reuse:
            return self.pool.get_connection()
        if self._forks != process._forks:  # a forked child: not one connection is its own
            self._stack, self._pid, self._forks = [], os.getpid(), process._forks
            self._returned, self._waiting = threading.Condition(), 0
        try:
            conn = self._stack.pop()
        except IndexError:
            conn = self._new()
            if conn is not None:
                return conn
            conn = self._wait_for_one()
        try:
            stale = conn.can_read()  # idle: data waiting means EOF or stray bytes
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
            stale = True
        if stale:
            conn.disconnect()  # the next send reconnects
        return conn

    def _new(self) -> Any:
        """A new connection from the pool (checked by it), or None when all are out."""
        try:
            return self.pool.get_connection()
        except redis.exceptions.MaxConnectionsError:
            return None

    def _wait_for_one(self) -> Any:
        """A connection given back within ``wait`` seconds (all are out), else an error."""
        deadline = time.monotonic() + self._wait
        with self._returned:
            self._waiting += 1
            try:
                while True:
                    if self._stack:
                        return self._stack.pop()
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise redis.exceptions.ConnectionError(
                            f"no free connection within {self._wait}s: all "
                            f"{self.pool.max_connections} are in use"
                        )
                    self._returned.wait(left)
            finally:
                self._waiting -= 1

    @staticmethod
    def connect(conn: Any) -> None:
        """Connect ``conn`` if it is not (a stale one was disconnected at checkout)."""
        if conn._sock is None:
            conn.connect()

    @staticmethod
    def drop(conn: Any) -> None:
        """Disconnect a connection whose call failed mid-way (a reply may be on its way)."""
        conn.disconnect()

    def checkin(self, conn: Any) -> None:
        """Give a connection back (disconnect it first if its call failed mid-way)."""
        if not self._reuse:
            self.pool.release(conn)
            return
        if conn.should_reconnect():
            conn.disconnect()
        self._stack.append(conn)
        if self._waiting:
            with self._returned:
                self._returned.notify()

    def close(self) -> None:
        """Disconnect every connection of the pool, in use or not."""
        self._stack = []
        self.pool.disconnect()

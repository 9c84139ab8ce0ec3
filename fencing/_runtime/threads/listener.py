"""The notifier's listener thread and its connections: one pub/sub link per node, a waker.

Only the listener thread touches a :class:`Link` (redis-py's ``PubSub`` is not thread-safe);
other threads wake the listener through its :class:`Waker` and, to end a blocking call,
shut a link's socket down (:meth:`Listener.abort`). :mod:`fencing._runtime.threads.notify`
holds the notifier that runs it.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections.abc import Callable

import redis
import redis.client

from ..subscriber import Node, by_slot

log = logging.getLogger("fencing._runtime.threads.notify")

RECONNECT_PAUSE = 0.1
#: Consecutive failures double the pause before the next reconnect, up to this (a dead
#: master is tried again, and the slots mapped again, until its replica is promoted).
MAX_RECONNECT_PAUSE = 1.0


class Waker:
    """A socket pair the listener waits on next to its connection; any thread may wake it.

    :meth:`wake` never blocks (a full buffer means a wake is already pending).
    """

    def __init__(self) -> None:
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)

    def fileno(self) -> int:
        return self._reader.fileno()

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            self._writer.send(b"\0")

    def drain(self) -> None:
        with contextlib.suppress(OSError):
            while self._reader.recv(4096):
                pass

    def close(self) -> None:
        for sock in (self._reader, self._writer):
            with contextlib.suppress(OSError):
                sock.close()


class Link:
    """A pub/sub connection to one node and what was subscribed on it. Only the listener
    thread uses it.

    A handshake on a mute connection can block (the pub/sub connection has no socket
    timeout); that blocks the listener only, never a thread holding the notifier's lock.
    """

    __slots__ = (
        "__weakref__",
        "client",
        "leaving",
        "live",
        "node",
        "pending",
        "pubsub",
        "reconnected",
        "sent",
        "sharded",
    )

    def __init__(self, client: redis.Redis, node: Node, sharded: bool) -> None:
        self.client = client
        self.node = node
        #: SSUBSCRIBE (sharded pub/sub) or SUBSCRIBE, for the connection's whole life.
        self.sharded = sharded
        self.pubsub: redis.client.PubSub = client.pubsub(ignore_subscribe_messages=False)  # type: ignore[no-untyped-call]
        #: Channels a SUBSCRIBE was sent for (and no UNSUBSCRIBE since).
        self.sent: set[str] = set()
        #: SUBSCRIBEs sent per channel and not confirmed yet.
        self.pending: dict[str, int] = {}
        #: Channels in ``sent`` the server confirmed: their messages reach us.
        self.live: set[str] = set()
        #: UNSUBSCRIBEs sent per channel and not confirmed yet.
        self.leaving: dict[str, int] = {}
        #: Set if redis-py reconnected the connection underneath (and resubscribed by itself).
        self.reconnected = False

    def on_connect(self, _connection: object) -> None:
        # Registered after the first connect, so only a reconnect inside redis-py calls it.
        self.reconnected = True

    def subscribe(self, channels: set[str]) -> None:
        first = self.pubsub.connection is None
        self.sent |= channels
        for channel in channels:
            self.pending[channel] = self.pending.get(channel, 0) + 1
        if self.sharded:
            for group in by_slot(channels):  # one slot per SSUBSCRIBE
                self.pubsub.ssubscribe(*group)
        else:
            self.pubsub.subscribe(*sorted(channels))
        if first and self.pubsub.connection is not None:
            self.pubsub.connection.register_connect_callback(self.on_connect)

    def unsubscribe(self, channels: set[str]) -> None:
        self.sent -= channels
        self.live -= channels
        for channel in channels:
            self.leaving[channel] = self.leaving.get(channel, 0) + 1
        if self.sharded:
            for group in by_slot(channels):
                self.pubsub.sunsubscribe(*group)  # type: ignore[no-untyped-call]
        else:
            self.pubsub.unsubscribe(*sorted(channels))  # type: ignore[no-untyped-call]

    def socket(self) -> socket.socket | None:
        sock = getattr(self.pubsub.connection, "_sock", None)
        return sock if isinstance(sock, socket.socket) else None

    def close(self) -> None:
        try:
            self.pubsub.close()
        except Exception:
            log.debug("redis-fencing: closing a pubsub failed", exc_info=True)


class Listener:
    """One listener thread and its own state (a new one after :meth:`Notifier.close`)."""

    __slots__ = (
        "backoff",
        "dirty",
        "links",
        "remap",
        "retry_at",
        "sharded",
        "stop",
        "synced",
        "thread",
        "waker",
    )

    def __init__(self, run: Callable[[Listener], None]) -> None:
        self.stop = threading.Event()
        self.waker = Waker()
        #: The listener's connections by node, (re)set under the notifier's lock. Other
        #: threads only look at whether there are any (``_remove``) and at their sockets
        #: (:meth:`abort`).
        self.links: dict[Node, Link] = {}
        # The rest is the listener thread's own.
        #: The notifier's ``_changes`` the subscriptions were last brought up to (-1: never).
        self.synced = -1
        #: A connection failed, or a node dropped a channel: sync again even if nothing
        #: changed, once ``retry_at`` is reached.
        self.dirty = False
        self.retry_at = 0.0
        self.backoff = RECONNECT_PAUSE
        #: Read the cluster's slot map again before the next sync.
        self.remap = False
        #: SSUBSCRIBE until a server refuses it, then SUBSCRIBE.
        self.sharded = True
        self.thread = threading.Thread(
            target=run, args=(self,), name="fencing-notifier", daemon=True
        )

    def abort(self) -> None:
        """Shut the listener's sockets down (from another thread): ends a blocking call."""
        for link in list(self.links.values()):
            sock = link.socket()
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def failed(self) -> None:
        """Sync again after a pause that grows with each failure in a row."""
        self.dirty = True
        self.retry_at = time.monotonic() + self.backoff
        self.backoff = min(2 * self.backoff, MAX_RECONNECT_PAUSE)


def wait_readable(fds: list[int], timeout: float) -> set[int]:
    """The fds of ``fds`` readable within ``timeout`` seconds (poll() where it exists:
    select() fails on descriptors above FD_SETSIZE)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        return {fd for fd, _ in poller.poll(timeout * 1000)}
    readable, _, _ = select.select(fds, [], [], timeout)
    return set(readable)

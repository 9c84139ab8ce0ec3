"""One pub/sub listener per client, shared by every handle.

Handles subscribe to channels (a session's "severed" channel, a resource's "released"
channel) and get a callback per message. One connection and one daemon thread serve the
whole client. Notifications only make things prompt: every decision is still made by a
script, so a lost message costs latency, never safety. After a reconnect every subscriber
is called with ``None`` ("you may have missed something"), so waiters re-check at once.

redis-py's ``PubSub`` is not thread-safe, so the listener thread is the only one that ever
touches it (or its connection): :meth:`Notifier.subscribe` and :meth:`Subscription.close`
only change the set of wanted channels under the notifier's lock and wake the listener,
which sends the SUBSCRIBE / UNSUBSCRIBE commands itself before it reads again. No network
I/O, and no callback, ever runs under the lock.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any

import redis
import redis.client
import redis.exceptions

from ... import forks
from ...text import text as _text
from ..subscriber import Callback, Subscriber

log = logging.getLogger(__name__)


_POLL_SECONDS = 0.25
_RECONNECT_PAUSE = 0.1
#: How long closing a channel's last subscription waits for the UNSUBSCRIBE to be confirmed.
_LEAVE_SECONDS = 2.0
#: How long :meth:`Notifier.close` waits for the listener thread (twice, see there).
_JOIN_SECONDS = 2 * _POLL_SECONDS + 1


class Subscription(Subscriber):
    """One subscriber of one channel; :meth:`wait` waits until a message arrives."""

    __slots__ = ()
    _event: threading.Event

    def __init__(self, notifier: Notifier, channel: str, callback: Callback | None) -> None:
        super().__init__(notifier, channel, callback, threading.Event())

    def wait(self, timeout: float | None) -> bool:
        """Wait for a message (or a reconnect); True if one came. Clears the flag."""
        got = self._event.wait(timeout)
        self._event.clear()
        return got

    def close(self) -> None:
        """Stop receiving; the channel is unsubscribed when its last subscriber closes
        (which returns once the server confirmed that, or after a short bound)."""
        if not self._closed:
            self._closed = True
            self._notifier._remove(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Waker:
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


class _Link:
    """A pub/sub connection and what was subscribed on it. Only the listener thread uses it.

    A handshake on a mute connection can block (the pub/sub connection has no socket
    timeout); that blocks the listener only, never a thread holding the notifier's lock.
    """

    __slots__ = (
        "__weakref__",
        "client",
        "leaving",
        "live",
        "pending",
        "pubsub",
        "reconnected",
        "sent",
        "synced",
    )

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
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
        #: The notifier's ``_changes`` the subscriptions were last brought up to (-1: never).
        self.synced = -1

    def on_connect(self, _connection: object) -> None:
        # Registered after the first connect, so only a reconnect inside redis-py calls it.
        self.reconnected = True

    def close(self) -> None:
        try:
            self.pubsub.close()
        except Exception:
            log.debug("redis-fencing: closing a pubsub failed", exc_info=True)


class _Listener:
    """One listener thread and its own state (a new one after :meth:`Notifier.close`)."""

    __slots__ = ("link", "stop", "thread", "waker")

    def __init__(self, notifier: Notifier) -> None:
        self.stop = threading.Event()
        self.waker = _Waker()
        #: The listener's connection, (re)set under the notifier's lock. Other threads only
        #: look at whether there is one (``_remove``) and at its socket (:meth:`abort`).
        self.link: _Link | None = None
        self.thread = threading.Thread(
            target=notifier._run, args=(self,), name="fencing-notifier", daemon=True
        )

    def abort(self) -> None:
        """Shut the listener's socket down (from another thread): ends a blocking call."""
        link = self.link
        sock = _socket_of(link.pubsub) if link is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _socket_of(pubsub: redis.client.PubSub) -> socket.socket | None:
    sock = getattr(pubsub.connection, "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


def _wait_readable(fds: list[int], timeout: float) -> set[int]:
    """The fds of ``fds`` readable within ``timeout`` seconds (poll() where it exists:
    select() fails on descriptors above FD_SETSIZE)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        return {fd for fd, _ in poller.poll(timeout * 1000)}
    readable, _, _ = select.select(fds, [], [], timeout)
    return set(readable)


class Notifier:
    """A shared pub/sub listener. Thread-safe; started on the first subscription."""

    def __init__(self, client_factory: Callable[[], redis.Redis]) -> None:
        self._client_factory = client_factory
        self._lock = threading.Lock()
        self._subs: dict[str, list[Subscription]] = {}
        self._confirmed: dict[str, threading.Event] = {}
        #: Closers of a channel's last subscription waiting for its UNSUBSCRIBE to be done.
        self._leaving: dict[str, list[threading.Event]] = {}
        #: Counts changes to the set of channels (``_subs``' keys): the listener syncs on one.
        self._changes = 0
        self._listener: _Listener | None = None
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        # The listener thread is the parent's, and so are the subscriptions (they belong to
        # the parent's handles). The parent's pub/sub connection is dropped, not closed: a
        # close from here would shut the parent's socket down. The wake-up socket pair is
        # closed (that only closes this process's descriptors).
        listener = self._listener
        if listener is not None:
            listener.waker.close()
        self._lock = threading.Lock()
        self._subs = {}
        self._confirmed = {}
        self._leaving = {}
        self._changes = 0
        self._listener = None

    def subscribe(
        self, channel: str, callback: Callback | None = None, *, confirm_timeout: float = 2.0
    ) -> Subscription:
        """Subscribe to ``channel``; returns once the server confirmed (or the timeout ran)."""
        sub = Subscription(self, channel, callback)
        with self._lock:
            subs = self._subs.setdefault(channel, [])
            subs.append(sub)
            confirmed = self._confirmed.setdefault(channel, threading.Event())
            listener = self._ensure_listener()
            if len(subs) == 1:
                # The listener sends the SUBSCRIBE (or sees the channel is still subscribed
                # from before) and sets the event when the server confirmed it.
                confirmed.clear()
                self._changes += 1
                listener.waker.wake()
        if threading.current_thread() is not listener.thread:
            # (On the listener thread, a callback subscribing: nobody could confirm now.)
            confirmed.wait(confirm_timeout)
        return sub

    def _ensure_listener(self) -> _Listener:
        """The running listener, started if needed. Called under the lock."""
        listener = self._listener
        if listener is None or listener.stop.is_set() or not listener.thread.is_alive():
            if listener is not None:
                listener.stop.set()
                listener.waker.wake()
            listener = self._listener = _Listener(self)
            listener.thread.start()
        return listener

    def _remove(self, sub: Subscription) -> None:
        # The last subscriber of a channel waits (bounded) until the listener's UNSUBSCRIBE
        # was confirmed, so the server holds no subscription of it once close() returned;
        # there is nothing to wait for when the listener has no connection.
        done: threading.Event | None = None
        with self._lock:
            subs = self._subs.get(sub.channel, [])
            if sub in subs:
                subs.remove(sub)
            listener = self._listener
            if not subs and sub.channel in self._subs:
                del self._subs[sub.channel]
                self._confirmed.pop(sub.channel, None)
                self._changes += 1
                if listener is not None:
                    if listener.link is not None:
                        done = threading.Event()
                        self._leaving.setdefault(sub.channel, []).append(done)
                    listener.waker.wake()  # it sends the UNSUBSCRIBE
        # (Not on the listener thread, a callback closing: nobody could confirm now.)
        if done is not None and threading.current_thread() is not getattr(listener, "thread", None):
            done.wait(_LEAVE_SECONDS)

    def _release(self, channels: Iterable[str] | None = None) -> None:
        """Let the closers of ``channels`` (None: of all) go. Called under the lock."""
        for channel in list(self._leaving) if channels is None else channels:
            for done in self._leaving.pop(channel, ()):
                done.set()

    # -- the listener thread: the only one that touches a PubSub ---------------------------

    def _run(self, listener: _Listener) -> None:
        missed: set[str] = set()  # channels whose subscribers get None once resubscribed
        try:
            while not listener.stop.is_set():
                try:
                    self._sync(listener, missed)
                    self._listen(listener, missed)
                except Exception:  # a closed or broken connection: reconnect unless stopping
                    if listener.stop.is_set():
                        return
                    log.debug("redis-fencing: notification connection lost", exc_info=True)
                    with self._lock:
                        missed.update(self._subs)
                    self._drop(listener)
                    listener.stop.wait(_RECONNECT_PAUSE)
        finally:
            self._drop(listener)
            with self._lock:
                if self._listener is not listener:
                    listener.waker.close()  # nobody wakes a replaced listener any more

    def _drop(self, listener: _Listener) -> None:
        """Close the listener's connection: its subscriptions are gone with it."""
        with self._lock:
            link, listener.link = listener.link, None
            if link is not None:
                self._release()
        if link is not None:
            link.close()

    def _sync(self, listener: _Listener, missed: set[str]) -> None:
        """Subscribe to the wanted channels not subscribed yet, unsubscribe the others."""
        link = listener.link
        if link is not None and link.reconnected:
            raise redis.exceptions.ConnectionError("the pub/sub connection was reconnected")
        with self._lock:
            if link is not None and link.synced == self._changes:
                return
            wanted, changes = set(self._subs), self._changes
            if link is None and not wanted:
                self._release()
                return
        missed &= wanted
        if link is None:
            link = _Link(self._client_factory())
            with self._lock:
                listener.link = link
        new, gone = wanted - link.sent, link.sent - wanted
        if new:
            first = link.pubsub.connection is None
            link.pubsub.subscribe(*sorted(new))
            link.sent |= new
            for channel in new:
                link.pending[channel] = link.pending.get(channel, 0) + 1
            if first and link.pubsub.connection is not None:
                link.pubsub.connection.register_connect_callback(link.on_connect)
        if gone:
            link.pubsub.unsubscribe(*sorted(gone))  # type: ignore[no-untyped-call]
            link.sent -= gone
            link.live -= gone
            for channel in gone:
                link.leaving[channel] = link.leaving.get(channel, 0) + 1
        with self._lock:
            # Still subscribed from before (a channel closed and subscribed again quickly).
            for channel in wanted & link.live:
                event = self._confirmed.get(channel)
                if event is not None:
                    event.set()
            # Closers of channels subscribed again, or with no UNSUBSCRIBE on its way.
            self._release([c for c in self._leaving if c in wanted or c not in link.leaving])
        link.synced = changes

    def _listen(self, listener: _Listener, missed: set[str]) -> None:
        """Handle one message, or wait until one comes, a wake-up, or ``_POLL_SECONDS``."""
        link = listener.link
        conn = link.pubsub.connection if link is not None else None
        if link is None or conn is None:
            if listener.waker.fileno() in _wait_readable([listener.waker.fileno()], _POLL_SECONDS):
                listener.waker.drain()
            return
        # Whatever is buffered first (the socket would not show it), then wait for more.
        if not conn.can_read(timeout=0):
            sock = _socket_of(link.pubsub)
            if sock is None:  # not a plain socket: poll, and pick wake-ups up after
                if not conn.can_read(timeout=_POLL_SECONDS):
                    return
            else:
                readable = _wait_readable([listener.waker.fileno(), sock.fileno()], _POLL_SECONDS)
                if listener.waker.fileno() in readable:
                    listener.waker.drain()
                if sock.fileno() not in readable:
                    return
        response = link.pubsub.parse_response(block=False, timeout=_POLL_SECONDS)
        message = link.pubsub.handle_message(response)
        if message is not None:
            self._dispatch(link, missed, message)

    def _dispatch(self, link: _Link, missed: set[str], message: dict[str, Any]) -> None:
        channel = _text(message["channel"]) if message["channel"] is not None else ""
        kind = _text(message["type"])
        if kind == "subscribe":
            left = link.pending.pop(channel, 0) - 1
            if left > 0:
                link.pending[channel] = left  # a later SUBSCRIBE of it is still on its way
                return
            if channel not in link.sent:
                return
            link.live.add(channel)
            with self._lock:
                event = self._confirmed.get(channel)
                if event is not None:
                    event.set()
                subs = list(self._subs.get(channel, ())) if channel in missed else []
            missed.discard(channel)
            for sub in subs:
                sub._deliver(None)
            return
        if kind == "unsubscribe":
            left = link.leaving.pop(channel, 0) - 1
            if left > 0:
                link.leaving[channel] = left  # a later UNSUBSCRIBE of it is still on its way
            elif channel not in link.sent:
                with self._lock:
                    self._release([channel])
            return
        if kind != "message":
            return
        with self._lock:
            subs = list(self._subs.get(channel, ()))
        data = message["data"]
        for sub in subs:
            sub._deliver(data if isinstance(data, bytes) else str(data).encode())

    def close(self) -> None:
        """Stop the listener and drop the connection."""
        with self._lock:
            listener = self._listener
            if listener is not None:
                listener.stop.set()
                listener.waker.wake()
        if listener is not None and listener.thread is not threading.current_thread():
            # The listener closes its connection on its way out. One stuck in a blocking
            # call (a connect handshake on a mute connection) is woken by a shutdown of
            # its socket: the socket is all this thread touches.
            listener.thread.join(timeout=_JOIN_SECONDS)
            if listener.thread.is_alive():
                listener.abort()
                listener.thread.join(timeout=_JOIN_SECONDS)
        with self._lock:
            self._subs.clear()
            self._confirmed.clear()
            self._release()
            if self._listener is listener:
                self._listener = None
                if listener is not None and not listener.thread.is_alive():
                    listener.waker.close()

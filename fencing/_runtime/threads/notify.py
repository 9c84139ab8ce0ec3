"""One pub/sub listener per client, shared by every handle.

Handles subscribe to channels (a session's "severed" channel, a resource's "released"
channel) and get a callback per message. One daemon thread serves the whole client, with
one pub/sub connection to a single server, or on a cluster one per primary serving a
subscribed channel's slot: channels are sharded (SSUBSCRIBE; plain SUBSCRIBE where the
server refuses it, see :mod:`fencing._runtime.subscriber`). Notifications only make things
prompt: every decision is still made by a script, so a lost message costs latency, never
safety. After a reconnect (a connection lost, a failover, a slot moved: the slots are
mapped again and each channel subscribed where it is served now) every subscriber of the
channels concerned is called with ``None`` ("you may have missed something"), so waiters
re-check at once.

redis-py's ``PubSub`` is not thread-safe, so the listener thread is the only one that ever
touches it (or its connection): :meth:`Notifier.subscribe` and :meth:`Subscription.close`
only change the set of wanted channels under the notifier's lock and wake the listener,
which sends the SUBSCRIBE / UNSUBSCRIBE commands itself before it reads again. No network
I/O, and no callback, ever runs under the lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis
import redis.client
import redis.exceptions

from ... import _forks as forks
from ..._keys import slot_of
from ..._text import text as _text
from ..subscriber import (
    Callback,
    Node,
    Subscriber,
    refused_channels,
    refuses_sharded,
    warn_refused_channels,
)
from . import cluster as runtime_cluster
from .listener import RECONNECT_PAUSE, Link, Listener, wait_readable

log = logging.getLogger(__name__)


_POLL_SECONDS = 0.25
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


class Notifier:
    """A shared pub/sub listener. Thread-safe; started on the first subscription.

    ``client_factory()`` makes the client of the pub/sub connection to a single server.
    With ``cluster`` (the cluster client whose slot map routes the channels) it is called
    as ``client_factory((host, port))``, once per primary serving a subscribed channel.
    """

    def __init__(self, client_factory: Callable[..., redis.Redis], cluster: Any = None) -> None:
        self._client_factory = client_factory
        self._cluster = cluster
        self._lock = threading.Lock()
        self._subs: dict[str, list[Subscription]] = {}
        self._confirmed: dict[str, threading.Event] = {}
        #: Closers of a channel's last subscription waiting for its UNSUBSCRIBE to be done.
        self._leaving: dict[str, list[threading.Event]] = {}
        #: Counts changes to the set of channels (``_subs``' keys): the listener syncs on one.
        self._changes = 0
        self._listener: Listener | None = None
        #: Whether the user's lack of channel rights was told (once: every retry meets it).
        self._told_refused = False
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        # The listener thread is the parent's, and so are the subscriptions (they belong to
        # the parent's handles). The parent's pub/sub connections are dropped, not closed: a
        # close from here would shut the parent's sockets down. The wake-up socket pair is
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

    def _ensure_listener(self) -> Listener:
        """The running listener, started if needed. Called under the lock."""
        listener = self._listener
        if listener is None or listener.stop.is_set() or not listener.thread.is_alive():
            if listener is not None:
                listener.stop.set()
                listener.waker.wake()
            listener = self._listener = Listener(self._run)
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
                    if listener.links:
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

    def _run(self, listener: Listener) -> None:
        missed: set[str] = set()  # channels whose subscribers get None once resubscribed
        try:
            while not listener.stop.is_set():
                try:
                    self._sync(listener, missed)
                    self._listen(listener, missed)
                except Exception as exc:  # anything unforeseen: every connection starts over
                    if listener.stop.is_set():
                        return
                    log.debug("redis-fencing: notification listener failed", exc_info=True)
                    for link in list(listener.links.values()):
                        self._fail(listener, link, exc, missed)
                    listener.failed()
        finally:
            for link in list(listener.links.values()):
                self._drop(listener, link)
            with self._lock:
                self._release()
                if self._listener is not listener:
                    listener.waker.close()  # nobody wakes a replaced listener any more

    def _drop(self, listener: Listener, link: Link) -> None:
        """Close one connection: its subscriptions are gone with it."""
        with self._lock:
            if listener.links.get(link.node) is link:
                del listener.links[link.node]
            # Closers of channels that no remaining connection is still leaving can go.
            leaving = {c for other in listener.links.values() for c in other.leaving}
            self._release([c for c in self._leaving if c not in leaving])
        link.close()

    def _fail(self, listener: Listener, link: Link, exc: Exception, missed: set[str]) -> None:
        """A connection failed (lost, reconnected underneath, an error reply): drop it, or
        all of them if the server refused sharded pub/sub (they start over with SUBSCRIBE);
        its channels' subscribers are told None once subscribed again, after the slots
        were mapped again on a cluster (a failover, a slot moved)."""
        log.debug("redis-fencing: notification connection to %s lost: %r", link.node, exc)
        if not link.sharded and refused_channels(exc) and not self._told_refused:
            self._told_refused = True
            warn_refused_channels(exc)
        failed = [link]
        if link.sharded and refuses_sharded(exc):
            log.info("redis-fencing: sharded pub/sub refused (%s): using SUBSCRIBE", exc)
            listener.sharded = False
            failed = list(listener.links.values())
        with self._lock:
            wanted = set(self._subs)
        for gone in failed:
            missed |= (gone.sent | set(gone.pending)) & wanted
            self._drop(listener, gone)
        listener.remap = self._cluster is not None
        listener.failed()

    def _route(self, channels: set[str]) -> dict[Node, set[str]]:
        """The channels per node serving them (on a single server, all on ``None``)."""
        if self._cluster is None:
            return {None: channels} if channels else {}
        routes: dict[Node, set[str]] = {}
        for channel in channels:
            node = runtime_cluster.primary_for(self._cluster, slot_of(channel))
            routes.setdefault(node, set()).add(channel)
        return routes

    def _sync(self, listener: Listener, missed: set[str]) -> None:
        """Subscribe to the wanted channels not subscribed yet, each on the node serving it;
        unsubscribe the others."""
        for link in list(listener.links.values()):
            if link.reconnected:
                exc = redis.exceptions.ConnectionError("the pub/sub connection was reconnected")
                self._fail(listener, link, exc, missed)
        if listener.dirty and time.monotonic() < listener.retry_at:
            return  # a pause after a failure
        with self._lock:
            if listener.synced == self._changes and not listener.dirty:
                return
            wanted, changes = set(self._subs), self._changes
            if not listener.links and not wanted:
                self._release()
                listener.synced = changes
                listener.dirty = False
                return
        missed &= wanted
        listener.dirty = False
        if listener.remap:
            listener.remap = False
            with contextlib.suppress(Exception):  # unreachable: routing below tells
                runtime_cluster.refresh(self._cluster)
        try:
            routes = self._route(wanted)
        except Exception as exc:  # no node serves a slot now (a failover under way)
            log.debug("redis-fencing: notification channels not routed: %r", exc)
            listener.remap = True
            listener.failed()
            return
        for node, link in list(listener.links.items()):
            if listener.links.get(node) is not link:
                continue  # dropped meanwhile (all are, when sharded pub/sub was refused)
            gone = link.sent - routes.get(node, set())
            # A wanted channel served elsewhere now (its slot moved) may have missed some.
            missed |= gone & wanted
            if gone:
                try:
                    link.unsubscribe(gone)
                except Exception as exc:
                    self._fail(listener, link, exc, missed)
        for node, channels in routes.items():
            known = listener.links.get(node)
            new = channels - known.sent if known is not None else channels
            if not new:
                continue
            if known is None:
                client = self._client_factory() if node is None else self._client_factory(node)
                known = Link(client, node, listener.sharded)
                with self._lock:
                    listener.links[node] = known
            try:
                known.subscribe(new)
            except Exception as exc:
                self._fail(listener, known, exc, missed)
        if self._cluster is not None:
            # Nodes that serve no slot any more (a master demoted or gone); an idle
            # connection to a primary stays for the next subscription.
            primaries = runtime_cluster.primaries(self._cluster)
            for node, link in list(listener.links.items()):
                if not link.sent and not link.leaving and node not in primaries:
                    self._drop(listener, link)
        with self._lock:
            links = list(listener.links.values())
            # Still subscribed from before (a channel closed and subscribed again quickly).
            for link in links:
                for channel in wanted & link.live:
                    event = self._confirmed.get(channel)
                    if event is not None:
                        event.set()
            # Closers of channels subscribed again, or with no UNSUBSCRIBE on its way.
            leaving = {c for link in links for c in link.leaving}
            self._release([c for c in self._leaving if c in wanted or c not in leaving])
        if not listener.dirty:
            listener.synced = changes

    def _listen(self, listener: Listener, missed: set[str]) -> None:
        """Handle what arrived, or wait until something comes, a wake-up, or
        ``_POLL_SECONDS`` (less when a reconnect is due sooner)."""
        timeout = _POLL_SECONDS
        if listener.dirty:
            timeout = max(0.0, min(timeout, listener.retry_at - time.monotonic()))
        ready: list[Link] = []
        watched: dict[int, Link] = {}
        for link in list(listener.links.values()):
            conn = link.pubsub.connection
            if conn is None:
                continue
            try:
                # Whatever is buffered first (the socket would not show it).
                if conn.can_read(timeout=0):
                    ready.append(link)
                    continue
            except Exception as exc:
                self._fail(listener, link, exc, missed)
                continue
            sock = link.socket()
            if sock is None:  # not a plain socket: polled, so wake up more often
                timeout = min(timeout, 0.05)
            else:
                watched[sock.fileno()] = link
        if not ready:
            readable = wait_readable([listener.waker.fileno(), *watched], timeout)
            if listener.waker.fileno() in readable:
                listener.waker.drain()
            ready = [link for fd, link in watched.items() if fd in readable]
        for link in ready:
            if listener.links.get(link.node) is not link:
                continue  # dropped meanwhile
            try:
                response = link.pubsub.parse_response(block=False, timeout=_POLL_SECONDS)  # type: ignore[no-untyped-call]
                message = link.pubsub.handle_message(response)  # type: ignore[no-untyped-call]
            except Exception as exc:
                self._fail(listener, link, exc, missed)
                continue
            if message is not None:
                self._dispatch(listener, link, missed, message)

    def _dispatch(
        self, listener: Listener, link: Link, missed: set[str], message: dict[str, Any]
    ) -> None:
        channel = _text(message["channel"]) if message["channel"] is not None else ""
        kind = _text(message["type"])
        if kind in ("subscribe", "ssubscribe"):
            left = link.pending.pop(channel, 0) - 1
            if left > 0:
                link.pending[channel] = left  # a later SUBSCRIBE of it is still on its way
                return
            if channel not in link.sent:
                return
            link.live.add(channel)
            listener.backoff = RECONNECT_PAUSE
            with self._lock:
                event = self._confirmed.get(channel)
                if event is not None:
                    event.set()
                subs = list(self._subs.get(channel, ())) if channel in missed else []
            missed.discard(channel)
            for sub in subs:
                sub._deliver(None)
            return
        if kind in ("unsubscribe", "sunsubscribe"):
            left = link.leaving.pop(channel, 0) - 1
            if left > 0:
                link.leaving[channel] = left  # a later UNSUBSCRIBE of it is still on its way
            elif left < 0 and channel in link.sent:
                # Not asked for: the node no longer serves the channel's slot (a failover, a
                # slot moved away). It is subscribed again where it is served now.
                link.sent.discard(channel)
                link.live.discard(channel)
                missed.add(channel)
                listener.remap = self._cluster is not None
                listener.dirty = True
            elif channel not in link.sent:
                with self._lock:
                    self._release([channel])
            return
        if kind not in ("message", "smessage"):
            return
        with self._lock:
            subs = list(self._subs.get(channel, ()))
        data = message["data"]
        for sub in subs:
            sub._deliver(data if isinstance(data, bytes) else str(data).encode())

    def close(self) -> None:
        """Stop the listener and drop its connections."""
        with self._lock:
            listener = self._listener
            if listener is not None:
                listener.stop.set()
                listener.waker.wake()
        if listener is not None and listener.thread is not threading.current_thread():
            # The listener closes its connections on its way out. One stuck in a blocking
            # call (a connect handshake on a mute connection) is woken by a shutdown of
            # its sockets: the sockets are all this thread touches.
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


def publish(client: Any, channel: str, message: str) -> None:
    """Publish as the scripts do: SPUBLISH (through a cluster client, to the primary of the
    channel's slot, where it stays on that shard), or PUBLISH where the server refuses it."""
    try:
        client.execute_command("SPUBLISH", channel, message)
    except redis.exceptions.ResponseError as exc:
        if not refuses_sharded(exc):
            raise
        client.execute_command("PUBLISH", channel, message)

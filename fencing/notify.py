"""One pub/sub listener per client, shared by every handle.

Handles subscribe to channels (a session's "severed" channel, a resource's "released"
channel) and get a callback per message. One connection and one daemon thread serve the
whole client. Notifications only make things prompt: every decision is still made by a
script, so a lost message costs latency, never safety. After a reconnect every subscriber
is called with ``None`` ("you may have missed something"), so waiters re-check at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
import redis.client
import redis.exceptions

from . import forks
from .text import text as _text

log = logging.getLogger(__name__)

Callback = Callable[[bytes | None], None]

_POLL_SECONDS = 0.25
_RECONNECT_PAUSE = 0.1


class Subscription:
    """One subscriber of one channel; :meth:`wait` blocks until a message arrives."""

    __slots__ = ("_closed", "_event", "_notifier", "callback", "channel")

    def __init__(self, notifier: Notifier, channel: str, callback: Callback | None) -> None:
        self._notifier = notifier
        self.channel = channel
        self.callback = callback
        self._event = threading.Event()
        self._closed = False

    def _deliver(self, data: bytes | None) -> None:
        self._event.set()
        if self.callback is not None:
            try:
                self.callback(data)
            except Exception:
                log.exception("redis-fencing: a notification callback failed")

    def wait(self, timeout: float | None) -> bool:
        """Wait for a message (or a reconnect); True if one came. Clears the flag."""
        got = self._event.wait(timeout)
        self._event.clear()
        return got

    def close(self) -> None:
        """Stop receiving; the channel is unsubscribed when its last subscriber closes."""
        if not self._closed:
            self._closed = True
            self._notifier._remove(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Notifier:
    """A shared pub/sub listener. Thread-safe; started on the first subscription."""

    def __init__(self, client_factory: Callable[[], redis.Redis]) -> None:
        self._client_factory = client_factory
        self._lock = threading.Lock()
        self._subs: dict[str, list[Subscription]] = {}
        self._confirmed: dict[str, threading.Event] = {}
        self._pubsub: redis.client.PubSub | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        # The listener thread is the parent's, and so are the subscriptions (they belong to
        # the parent's handles). The parent's pub/sub connection is dropped, not closed: a
        # close from here would shut the parent's socket down.
        self._lock = threading.Lock()
        self._subs = {}
        self._confirmed = {}
        self._pubsub = None
        self._thread = None
        self._stop = threading.Event()

    def subscribe(
        self, channel: str, callback: Callback | None = None, *, confirm_timeout: float = 2.0
    ) -> Subscription:
        """Subscribe to ``channel``; returns once the server confirmed (or the timeout ran)."""
        sub = Subscription(self, channel, callback)
        with self._lock:
            subs = self._subs.setdefault(channel, [])
            subs.append(sub)
            first = len(subs) == 1
            confirmed = self._confirmed.setdefault(channel, threading.Event())
            if first:
                confirmed.clear()
                try:
                    self._ensure_pubsub().subscribe(channel)
                except redis.exceptions.RedisError:
                    # The listener resubscribes everything after it reconnects.
                    log.debug("redis-fencing: subscribe to %s deferred", channel, exc_info=True)
                self._ensure_thread()
        confirmed.wait(confirm_timeout)
        return sub

    def _ensure_pubsub(self) -> redis.client.PubSub:
        if self._pubsub is None:
            self._pubsub = self._client_factory().pubsub(ignore_subscribe_messages=False)  # type: ignore[no-untyped-call]
        return self._pubsub

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="fencing-notifier", daemon=True)
            self._thread.start()

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            subs = self._subs.get(sub.channel, [])
            if sub in subs:
                subs.remove(sub)
            if not subs and sub.channel in self._subs:
                del self._subs[sub.channel]
                self._confirmed.pop(sub.channel, None)
                if self._pubsub is not None:
                    try:
                        self._pubsub.unsubscribe(sub.channel)  # type: ignore[no-untyped-call]
                    except redis.exceptions.RedisError:
                        log.debug("redis-fencing: unsubscribe failed", exc_info=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            pubsub = self._pubsub
            try:
                if pubsub is None:
                    if self._subs:
                        self._reconnect()
                    else:
                        self._stop.wait(_POLL_SECONDS)
                    continue
                if not pubsub.subscribed:
                    if self._subs:
                        # A subscribe that failed was never recorded: subscribe again.
                        self._reconnect()
                        continue
                    # Woken at once by the next subscribe() (a fixed sleep here would delay a
                    # new subscriber's confirmation, and so its first notification).
                    pubsub.subscribed_event.wait(_POLL_SECONDS)
                    continue
                message = pubsub.get_message(timeout=_POLL_SECONDS)
            except Exception:  # a closed or broken connection: reconnect unless stopping
                if self._stop.is_set():
                    return
                self._reconnect()
                continue
            if message is not None:
                self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        channel = _text(message["channel"])
        kind = _text(message["type"])
        if kind == "subscribe":
            event = self._confirmed.get(channel)
            if event is not None:
                event.set()
            return
        if kind != "message":
            return
        with self._lock:
            subs = list(self._subs.get(channel, ()))
        data = message["data"]
        for sub in subs:
            sub._deliver(data if isinstance(data, bytes) else str(data).encode())

    def _reconnect(self) -> None:
        self._stop.wait(_RECONNECT_PAUSE)
        with self._lock:
            old, self._pubsub = self._pubsub, None
            if old is not None:
                try:
                    old.close()
                except Exception:
                    log.debug("redis-fencing: closing a broken pubsub failed", exc_info=True)
            channels = list(self._subs)
            try:
                if channels:
                    self._ensure_pubsub().subscribe(*channels)
            except redis.exceptions.RedisError:
                self._pubsub = None
                return
            everyone = [sub for subs in self._subs.values() for sub in subs]
        for sub in everyone:
            sub._deliver(None)

    def close(self) -> None:
        """Stop the listener and drop the connection."""
        self._stop.set()
        with self._lock:
            pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            # Shuts the socket down, which also ends a read the listener is blocked in.
            try:
                pubsub.close()
            except Exception:
                log.debug("redis-fencing: closing pubsub failed", exc_info=True)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * _POLL_SECONDS + 1)
        with self._lock:
            self._subs.clear()
            self._confirmed.clear()
            self._thread = None

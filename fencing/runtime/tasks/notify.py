"""One pub/sub listener task per asyncio client, shared by every handle.

The asyncio twin of :mod:`fencing.runtime.threads.notify`, with the same contract:
handles subscribe to channels and get a callback (and a wake-up) per message;
notifications only make things prompt (every decision is still made by a script), so a
lost message costs latency, never safety; after a reconnect every subscriber is called with
``None`` ("you may have missed something"). ``async with notifier.subscribe(ch) as sub``
returns once the server confirmed the subscription (bounded), so a release published after
that cannot be missed.

One task, the listener, reads the pub/sub connection; SUBSCRIBE and UNSUBSCRIBE are sent by
one syncing coroutine at a time (under a lock), which asyncio allows beside the pending read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio
import redis.exceptions

from ...text import text as _text
from ..subscriber import Callback, Subscriber
from .primitives import wait_event

log = logging.getLogger(__name__)


_POLL_SECONDS = 0.25
_RECONNECT_PAUSE = 0.1
_CONFIRM_SECONDS = 2.0


class Subscription(Subscriber):
    """One subscriber of one channel; :meth:`wait` waits until a message arrives."""

    __slots__ = ()
    _event: asyncio.Event

    def __init__(self, notifier: Notifier, channel: str, callback: Callback | None) -> None:
        super().__init__(notifier, channel, callback, asyncio.Event())

    async def wait(self, timeout: float | None) -> bool:
        """Wait for a message (or a reconnect); True if one came. Clears the flag."""
        got = await wait_event(self._event, timeout)
        self._event.clear()
        return got

    async def close(self) -> None:
        """Stop receiving; the channel is unsubscribed when its last subscriber closes."""
        if not self._closed:
            self._closed = True
            await self._notifier._remove(self)

    async def __aenter__(self) -> Subscription:
        await self._notifier._confirmed_or_timeout(self.channel)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Notifier:
    """A shared pub/sub listener on one event loop; started on the first subscription."""

    def __init__(self, client_factory: Callable[[], redis.asyncio.Redis]) -> None:
        self._client_factory = client_factory
        self._subs: dict[str, list[Subscription]] = {}
        self._confirmed: dict[str, asyncio.Event] = {}
        self._pubsub: Any = None
        self._sent: set[str] = set()
        self._missed: set[str] = set()
        self._sync_lock: asyncio.Lock | None = None
        self._changed: asyncio.Event | None = None
        self._listener: asyncio.Task[None] | None = None
        self._syncer: asyncio.Task[None] | None = None
        self._closed = False

    def subscribe(self, channel: str, callback: Callback | None = None) -> Subscription:
        """Subscribe to ``channel`` (``async with`` it to wait for the server's confirmation)."""
        sub = Subscription(self, channel, callback)
        subs = self._subs.setdefault(channel, [])
        subs.append(sub)
        confirmed = self._confirmed.setdefault(channel, asyncio.Event())
        if channel in self._sent and self._pubsub is not None:
            # Still subscribed on the connection (its last subscriber just left and no
            # UNSUBSCRIBE went out): nothing to wait for.
            confirmed.set()
        self._closed = False
        self._ensure_listener()
        if len(subs) == 1:
            self._kick()
        return sub

    async def _confirmed_or_timeout(self, channel: str) -> None:
        event = self._confirmed.get(channel)
        if event is not None:
            await wait_event(event, _CONFIRM_SECONDS)

    async def _remove(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.channel, [])
        if sub in subs:
            subs.remove(sub)
        if not subs and sub.channel in self._subs:
            del self._subs[sub.channel]
            self._confirmed.pop(sub.channel, None)
            self._kick()

    def _ensure_listener(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
            self._sync_lock = asyncio.Lock()
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(
                self._run(), name="fencing-notifier"
            )

    def _kick(self) -> None:
        """Have the subscriptions brought up to the wanted channels soon."""
        if self._changed is not None:
            self._changed.set()
        if self._syncer is None or self._syncer.done():
            with contextlib.suppress(RuntimeError):  # no running loop: the listener syncs
                self._syncer = asyncio.get_running_loop().create_task(self._sync_quietly())

    async def _sync_quietly(self) -> None:
        try:
            await self._sync()
        except Exception:
            log.debug("redis-fencing: pub/sub sync failed; the listener retries", exc_info=True)

    async def _sync(self) -> None:
        """Subscribe to the wanted channels not subscribed yet, unsubscribe the others."""
        assert self._sync_lock is not None
        async with self._sync_lock:
            if self._changed is not None:
                self._changed.clear()
            wanted = set(self._subs)
            if self._pubsub is None:
                if not wanted:
                    return
                self._pubsub = self._client_factory().pubsub(ignore_subscribe_messages=False)
                self._sent = set()
            new, gone = wanted - self._sent, self._sent - wanted
            if new:
                await self._pubsub.subscribe(*sorted(new))
                self._sent |= new
            if gone:
                await self._pubsub.unsubscribe(*sorted(gone))
                self._sent -= gone

    async def _run(self) -> None:
        while not self._closed:
            try:
                if self._changed is not None and self._changed.is_set():
                    await self._sync()
                pubsub = self._pubsub
                if pubsub is None or pubsub.connection is None:
                    assert self._changed is not None
                    await wait_event(self._changed, _POLL_SECONDS)
                    if not self._subs and pubsub is None:
                        return  # nothing wanted: a new subscription starts a new listener
                    continue
                message = await pubsub.get_message(timeout=_POLL_SECONDS)
                if message is not None:
                    self._dispatch(message)
            except asyncio.CancelledError:
                raise
            except Exception:
                if self._closed:
                    return
                log.debug("redis-fencing: notification connection lost", exc_info=True)
                self._missed |= set(self._subs)
                await self._drop()
                for event in self._confirmed.values():
                    event.clear()
                await asyncio.sleep(_RECONNECT_PAUSE)
                if self._changed is not None:
                    self._changed.set()

    async def _drop(self) -> None:
        pubsub, self._pubsub, self._sent = self._pubsub, None, set()
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    def _dispatch(self, message: dict[str, Any]) -> None:
        channel = _text(message["channel"]) if message["channel"] is not None else ""
        kind = _text(message["type"])
        if kind == "subscribe":
            event = self._confirmed.get(channel)
            if event is not None:
                event.set()
            if channel in self._missed:
                self._missed.discard(channel)
                for sub in list(self._subs.get(channel, ())):
                    sub._deliver(None)
            return
        if kind != "message":
            return
        data = message["data"]
        for sub in list(self._subs.get(channel, ())):
            sub._deliver(data if isinstance(data, bytes) else str(data).encode())

    async def close(self) -> None:
        """Stop the listener and drop the connection."""
        self._closed = True
        for task in (self._listener, self._syncer):
            if task is not None and not task.done() and task is not asyncio.current_task():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._listener = self._syncer = None
        self._subs.clear()
        self._confirmed.clear()
        await self._drop()

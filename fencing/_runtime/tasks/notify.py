"""One pub/sub listener per asyncio client, shared by every handle.

The asyncio twin of :mod:`fencing._runtime.threads.notify`, with the same contract:
handles subscribe to channels and get a callback (and a wake-up) per message;
notifications only make things prompt (every decision is still made by a script), so a
lost message costs latency, never safety; after a reconnect (a connection lost, a failover,
a slot moved: the slots are mapped again and each channel subscribed where it is served
now) every subscriber of the channels concerned is called with ``None`` ("you may have
missed something"). ``async with notifier.subscribe(ch) as sub`` returns once the server
confirmed the subscription (bounded), so a release published after that cannot be missed.

Channels are sharded (SSUBSCRIBE; plain SUBSCRIBE where the server refuses it, see
:mod:`fencing._runtime.subscriber`): one pub/sub connection to a single server, or on a
cluster one per primary serving a subscribed channel's slot. One task per connection reads
it; one task, the listener, brings the subscriptions up to the wanted channels (SUBSCRIBE
and UNSUBSCRIBE under a lock, which asyncio allows beside the pending read).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio
import redis.exceptions

from ..._keys import slot_of
from ..._text import text as _text
from ..subscriber import (
    Callback,
    Node,
    Subscriber,
    by_slot,
    refused_channels,
    refuses_sharded,
    warn_refused_channels,
)
from . import cluster as runtime_cluster
from .primitives import wait_event

log = logging.getLogger(__name__)


_POLL_SECONDS = 0.25
_RECONNECT_PAUSE = 0.1
#: Consecutive failures double the pause before the next reconnect, up to this (a dead
#: master is tried again, and the slots mapped again, until its replica is promoted).
_MAX_RECONNECT_PAUSE = 1.0
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


class _Link:
    """A pub/sub connection to one node, what was subscribed on it, and its reader task."""

    __slots__ = ("leaving", "node", "pubsub", "reader", "sent", "sharded")

    def __init__(self, client: redis.asyncio.Redis, node: Node, sharded: bool) -> None:
        self.node = node
        #: SSUBSCRIBE (sharded pub/sub) or SUBSCRIBE, for the connection's whole life.
        self.sharded = sharded
        self.pubsub: Any = client.pubsub(ignore_subscribe_messages=False)
        #: Channels a SUBSCRIBE was sent for (and no UNSUBSCRIBE since).
        self.sent: set[str] = set()
        #: UNSUBSCRIBEs sent per channel and not confirmed yet.
        self.leaving: dict[str, int] = {}
        self.reader: asyncio.Task[None] | None = None

    async def subscribe(self, channels: set[str]) -> None:
        if self.sharded:
            for group in by_slot(channels):  # one slot per SSUBSCRIBE
                await self.pubsub.ssubscribe(*group)
        else:
            await self.pubsub.subscribe(*sorted(channels))
        self.sent |= channels

    async def unsubscribe(self, channels: set[str]) -> None:
        # Counted before it is sent: the confirmation may be read before this returns.
        self.sent -= channels
        for channel in channels:
            self.leaving[channel] = self.leaving.get(channel, 0) + 1
        if self.sharded:
            for group in by_slot(channels):
                await self.pubsub.sunsubscribe(*group)
        else:
            await self.pubsub.unsubscribe(*sorted(channels))

    async def close(self) -> None:
        task, self.reader = self.reader, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()


class Notifier:
    """A shared pub/sub listener on one event loop; started on the first subscription.

    ``client_factory()`` makes the client of the pub/sub connection to a single server.
    With ``cluster`` (the cluster client whose slot map routes the channels) it is called
    as ``client_factory((host, port))``, once per primary serving a subscribed channel.
    """

    def __init__(
        self, client_factory: Callable[..., redis.asyncio.Redis], cluster: Any = None
    ) -> None:
        self._client_factory = client_factory
        self._cluster = cluster
        self._subs: dict[str, list[Subscription]] = {}
        self._confirmed: dict[str, asyncio.Event] = {}
        self._links: dict[Node, _Link] = {}
        #: Channels whose subscribers get None once subscribed again.
        self._missed: set[str] = set()
        #: Whether the user's lack of channel rights was told (once: every retry meets it).
        self._told_refused = False
        self._sync_lock: asyncio.Lock | None = None
        self._changed: asyncio.Event | None = None
        self._listener: asyncio.Task[None] | None = None
        self._closed = False
        #: A connection failed, or a node dropped a channel: sync again even if nothing
        #: changed, once ``_retry_at`` is reached.
        self._dirty = False
        self._retry_at = 0.0
        self._backoff = _RECONNECT_PAUSE
        #: Read the cluster's slot map again before the next sync.
        self._remap = False
        #: SSUBSCRIBE until a server refuses it, then SUBSCRIBE.
        self._sharded = True

    def subscribe(self, channel: str, callback: Callback | None = None) -> Subscription:
        """Subscribe to ``channel`` (``async with`` it to wait for the server's confirmation)."""
        sub = Subscription(self, channel, callback)
        subs = self._subs.setdefault(channel, [])
        subs.append(sub)
        confirmed = self._confirmed.setdefault(channel, asyncio.Event())
        if any(channel in link.sent for link in self._links.values()):
            # Still subscribed on a connection (its last subscriber just left and no
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

    def _failed(self) -> None:
        """Sync again after a pause that grows with each failure in a row."""
        self._dirty = True
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(2 * self._backoff, _MAX_RECONNECT_PAUSE)
        self._kick()

    async def _run(self) -> None:
        assert self._changed is not None
        while not self._closed:
            try:
                if self._dirty:
                    await asyncio.sleep(max(0.0, self._retry_at - time.monotonic()))
                if self._changed.is_set() or self._dirty:
                    await self._sync()
                    continue
                await wait_event(self._changed, _POLL_SECONDS)
                if not self._changed.is_set() and not self._subs and not self._links:
                    return  # nothing wanted: a new subscription starts a new listener
            except asyncio.CancelledError:
                raise
            except Exception:  # anything unforeseen: every connection starts over
                if self._closed:
                    return
                log.debug("redis-fencing: notification listener failed", exc_info=True)
                assert self._sync_lock is not None
                async with self._sync_lock:
                    for link in list(self._links.values()):
                        await self._drop(link)
                self._remap = self._cluster is not None
                self._failed()

    async def _route(self, channels: set[str]) -> dict[Node, set[str]]:
        """The channels per node serving them (on a single server, all on ``None``)."""
        if self._cluster is None:
            return {None: channels} if channels else {}
        await runtime_cluster.ready(self._cluster)
        routes: dict[Node, set[str]] = {}
        for channel in channels:
            node = runtime_cluster.primary_for(self._cluster, slot_of(channel))
            routes.setdefault(node, set()).add(channel)
        return routes

    async def _sync(self) -> None:
        """Subscribe to the wanted channels not subscribed yet, each on the node serving it;
        unsubscribe the others."""
        assert self._sync_lock is not None and self._changed is not None
        async with self._sync_lock:
            self._changed.clear()
            if self._dirty and time.monotonic() < self._retry_at:
                return  # a pause after a failure (the listener comes back)
            wanted = set(self._subs)
            self._missed &= wanted
            self._dirty = False
            if not wanted and not self._links:
                return
            if self._remap:
                self._remap = False
                with contextlib.suppress(Exception):  # unreachable: routing below tells
                    await runtime_cluster.refresh(self._cluster)
            try:
                routes = await self._route(wanted)
            except Exception as exc:  # no node serves a slot now (a failover under way)
                log.debug("redis-fencing: notification channels not routed: %r", exc)
                self._remap = True
                self._failed()
                return
            for node, link in list(self._links.items()):
                if self._links.get(node) is not link:
                    continue  # dropped meanwhile (all are, when sharded pub/sub was refused)
                gone = link.sent - routes.get(node, set())
                # A wanted channel served elsewhere now (its slot moved) may have missed some.
                self._missed |= gone & wanted
                if gone:
                    try:
                        await link.unsubscribe(gone)
                    except Exception as exc:
                        await self._fail(link, exc)
            for node, channels in routes.items():
                known = self._links.get(node)
                new = channels - known.sent if known is not None else channels
                if not new:
                    continue
                if known is None:
                    client = self._client_factory() if node is None else self._client_factory(node)
                    known = self._links[node] = _Link(client, node, self._sharded)
                try:
                    await known.subscribe(new)
                except Exception as exc:
                    await self._fail(known, exc)
                    continue
                if known.reader is None:
                    known.reader = asyncio.get_running_loop().create_task(
                        self._read(known), name="fencing-notifier-reader"
                    )
            await self._drop_idle(routes)

    async def _drop_idle(self, routes: dict[Node, set[str]]) -> None:
        """Close the connections of nodes that serve no slot any more (a master demoted or
        gone); an idle connection to a primary stays for the next subscription."""
        if self._cluster is None:
            return
        primaries = runtime_cluster.primaries(self._cluster)
        for node, link in list(self._links.items()):
            if node not in routes and not link.sent and node not in primaries:
                await self._drop(link)

    async def _read(self, link: _Link) -> None:
        """The reader task of one connection: dispatches what arrives until it fails."""
        try:
            while True:
                message = await link.pubsub.get_message(timeout=_POLL_SECONDS)
                if message is not None:
                    self._dispatch(link, message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._closed or self._links.get(link.node) is not link:
                return
            assert self._sync_lock is not None
            async with self._sync_lock:
                await self._fail(link, exc)

    async def _drop(self, link: _Link) -> None:
        """Close one connection: its subscriptions are gone with it. Called under the lock."""
        if self._links.get(link.node) is link:
            del self._links[link.node]
        for channel in link.sent:
            if channel in self._subs:
                self._missed.add(channel)
            event = self._confirmed.get(channel)
            if event is not None:
                event.clear()
        await link.close()

    async def _fail(self, link: _Link, exc: Exception) -> None:
        """A connection failed (lost, an error reply): drop it, or all of them if the server
        refused sharded pub/sub (they start over with SUBSCRIBE); its channels' subscribers
        are told None once subscribed again, after the slots were mapped again on a
        cluster (a failover, a slot moved). Called under the lock."""
        log.debug("redis-fencing: notification connection to %s lost: %r", link.node, exc)
        if not link.sharded and refused_channels(exc) and not self._told_refused:
            self._told_refused = True
            warn_refused_channels(exc)
        failed = [link]
        if link.sharded and refuses_sharded(exc):
            log.info("redis-fencing: sharded pub/sub refused (%s): using SUBSCRIBE", exc)
            self._sharded = False
            failed += [other for other in self._links.values() if other is not link]
        for gone in failed:
            await self._drop(gone)
        self._remap = self._cluster is not None
        self._failed()

    def _dispatch(self, link: _Link, message: dict[str, Any]) -> None:
        channel = _text(message["channel"]) if message["channel"] is not None else ""
        kind = _text(message["type"])
        if kind in ("subscribe", "ssubscribe"):
            self._backoff = _RECONNECT_PAUSE
            event = self._confirmed.get(channel)
            if event is not None:
                event.set()
            if channel in self._missed:
                self._missed.discard(channel)
                for sub in list(self._subs.get(channel, ())):
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
                if channel in self._subs:
                    self._missed.add(channel)
                event = self._confirmed.get(channel)
                if event is not None:
                    event.clear()
                self._remap = self._cluster is not None
                self._dirty = True
                self._kick()
            return
        if kind not in ("message", "smessage"):
            return
        data = message["data"]
        for sub in list(self._subs.get(channel, ())):
            sub._deliver(data if isinstance(data, bytes) else str(data).encode())

    async def close(self) -> None:
        """Stop the listener and drop the connections."""
        self._closed = True
        task, self._listener = self._listener, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        links, self._links = list(self._links.values()), {}
        for link in links:
            await link.close()
        self._subs.clear()
        self._confirmed.clear()
        self._missed.clear()
        self._dirty = self._remap = False
        self._backoff = _RECONNECT_PAUSE
        self._sharded = True


async def publish(client: Any, channel: str, message: str) -> None:
    """Publish as the scripts do: SPUBLISH (through a cluster client, to the primary of the
    channel's slot, where it stays on that shard), or PUBLISH where the server refuses it."""
    try:
        await client.execute_command("SPUBLISH", channel, message)
    except redis.exceptions.ResponseError as exc:
        if not refuses_sharded(exc):
            raise
        await client.execute_command("PUBLISH", channel, message)

"""The notifier's pub/sub connection while connections are severed (fencing.notify).

redis-py's ``PubSub`` is not thread-safe. Subscribing and closing subscriptions from
handle threads while the listener thread reconnects (after ``Proxy.sever()``) must neither
raise, nor hang, nor leave the notifier's lock held; and once things settle, a PUBLISH on a
subscribed channel must still reach its callback.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest
import redis

from fencing import Client
from fencing._runtime.tasks.notify import _CONFIRM_SECONDS
from fencing._runtime.threads.notify import Notifier, Subscription
from fencing.faults import Proxy
from tests.support.internals import context_of

from ..conftest import ServerInfo
from ..support.flavours import Api
from ..support.pubsub import Inbox

ROUNDS = 30
CHANNELS = 4  # subscribed and closed per round, each from its own thread
DEADLINE = 10.0  # seconds any one operation may take


def _bounded(fn: Callable[[], object], what: str, timeout: float = DEADLINE) -> None:
    """Run ``fn`` in a daemon thread; fail if it raises or does not return in time."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, name=f"bounded {what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"{what} did not return within {timeout}s (hang)")
    if errors:
        raise AssertionError(f"{what} raised {errors[0]!r}") from errors[0]


@pytest.fixture
def proxied(server: ServerInfo, namespace: str) -> Iterator[tuple[Proxy, Client]]:
    """The suite's ``proxied``, with a close bounded in time: a listener stuck holding the
    notifier's lock would hang close() too, and must fail the test, not the run."""
    with Proxy(urlsplit(server.url).port or 6379) as proxy:
        client = Client.from_url(proxy.url_for(server.url), namespace=namespace)
        yield proxy, client
        # Bounded: a listener stuck holding the notifier's lock would hang close() too.
        _bounded(client.close, "client.close()")


def _lock_is_free(notifier: Notifier) -> None:
    lock = notifier._lock
    if not lock.acquire(timeout=DEADLINE):
        pytest.fail("the notifier's lock is still held (a hang under the lock)")
    lock.release()


def _race(
    proxy: Proxy,
    notifier: Notifier,
    channels: list[str],
    inboxes: list[Inbox],
    previous: list[Subscription],
) -> list[Subscription]:
    """Subscribe to ``channels`` and close ``previous`` (one thread each) while another
    thread severs the proxy's connections; all start together. Returns the new ones."""
    current: list[Subscription | None] = [None] * len(channels)
    start = threading.Barrier(len(channels) + len(previous) + 1)

    def subscribe(k: int) -> None:
        start.wait(DEADLINE)
        current[k] = notifier.subscribe(channels[k], inboxes[k], confirm_timeout=2.0)

    def close(sub: Subscription) -> None:
        start.wait(DEADLINE)
        sub.close()

    def sever() -> None:
        start.wait(DEADLINE)
        # A few severs spread over the operations (fault injection, not a wait).
        for _ in range(3):
            proxy.sever()
            time.sleep(0.002)

    work: list[tuple[str, Callable[[], object]]] = [
        (f"subscribe({channel})", functools.partial(subscribe, k))
        for k, channel in enumerate(channels)
    ]
    work += [(f"close({sub.channel})", functools.partial(close, sub)) for sub in previous]
    work.append(("sever", sever))
    failures: list[str] = []

    def run(what: str, fn: Callable[[], object]) -> None:
        try:
            _bounded(fn, what)
        except BaseException as exc:  # pytest.fail raises a BaseException
            failures.append(str(exc))

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE + 5)
    assert not failures, failures
    subs = [sub for sub in current if sub is not None]
    assert len(subs) == len(channels)
    return subs


def test_subscribe_and_close_while_connections_are_severed(
    proxied: tuple[Proxy, Client], raw: redis.Redis, namespace: str
) -> None:
    proxy, client = proxied
    notifier = context_of(client).notifier
    keep_inbox = Inbox()
    keep_channel = f"{namespace}:keep"
    keep = notifier.subscribe(keep_channel, keep_inbox)
    keep_inbox.expect(raw, keep_channel)

    previous: list[Subscription] = []
    for round_ in range(ROUNDS):
        channels = [f"{namespace}:r{round_}:c{k}" for k in range(CHANNELS)]
        inboxes = [Inbox() for _ in channels]
        subs = _race(proxy, notifier, channels, inboxes, previous)
        _lock_is_free(notifier)
        # Everything still subscribed gets its messages once the connection is back.
        keep_inbox.expect(raw, keep_channel)
        for sub, inbox in zip(subs, inboxes, strict=True):
            inbox.expect(raw, sub.channel)
        previous = subs

    for sub in previous:
        _bounded(sub.close, f"close({sub.channel})")
    _bounded(keep.close, "close(keep)")
    _lock_is_free(notifier)


def test_a_bare_notifier_survives_severs_and_closes_promptly(
    server: ServerInfo, raw: redis.Redis, namespace: str
) -> None:
    """The same race with a Notifier alone; then close() returns and stops the thread."""
    with Proxy(urlsplit(server.url).port or 6379) as proxy:
        url = proxy.url_for(server.url)
        notifier = Notifier(lambda: redis.Redis.from_url(url))
        inbox = Inbox()
        channel = f"{namespace}:bare"
        _bounded(lambda: notifier.subscribe(channel, inbox), "subscribe")
        for round_ in range(ROUNDS):
            extra = f"{namespace}:bare:{round_}"

            def churn(extra: str = extra) -> None:
                sub = notifier.subscribe(extra)
                sub.close()

            stop = threading.Event()

            def sever(stop: threading.Event = stop) -> None:
                # A burst of severs across the subscribe and the close (fault injection).
                for _ in range(10):
                    if stop.is_set():
                        return
                    proxy.sever()
                    stop.wait(0.003)

            severer = threading.Thread(target=sever, daemon=True)
            severer.start()
            try:
                _bounded(churn, f"round {round_}: subscribe+close")
            finally:
                stop.set()
                severer.join(DEADLINE)
            _lock_is_free(notifier)
            inbox.expect(raw, channel)
        listener = notifier._listener
        assert listener is not None
        _bounded(notifier.close, "notifier.close()")
        assert not listener.thread.is_alive()
        assert notifier._listener is None


async def test_resubscribing_a_channel_its_last_subscriber_just_left_is_confirmed_at_once(
    aio_api: Api,
) -> None:
    """A subscriber of a channel whose last subscriber just left (same client, same resource,
    before the notifier's sync ran) is confirmed at once: it never waits out the confirmation
    timeout (``_CONFIRM_SECONDS``, 2 s) before it looks again."""
    client = aio_api.client()
    notifier = context_of(client).notifier
    async with notifier.subscribe("resubscribed"):
        pass
    started = time.monotonic()
    async with notifier.subscribe("resubscribed"):
        took = time.monotonic() - started
    # Waiting out the confirmation timeout takes all of it; anything less is "at once",
    # however busy the machine.
    assert took < _CONFIRM_SECONDS, (
        f"subscribing again took {took:.2f}s (the confirmation never came)"
    )

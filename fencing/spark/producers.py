"""A Spark Python worker's shared producers: one :class:`~fencing.Client` and one SHARED
producer per (url, namespace, topic), made by the first task that writes there and reused by
every later task of the worker. The app ids whose sink state records a producer as a task
producer (``w:<session>``, see ``lua/include/sink.lua``) are remembered with it, so each
is recorded once per producer. A producer no task used for :data:`IDLE_SECONDS` is closed
(its lease given back, its renewals stopped), as Spark's Kafka sink expires its cached
producers: a worker outlives the query that opened it, and serves other jobs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .._sync.client import Client
from .._sync.producer import Producer
from .._sync.topic import Topic

#: Seconds a worker keeps a producer no task used.
IDLE_SECONDS = 600.0

_Key = tuple[str | None, str | None, str]


@dataclass(slots=True)
class _Entry:
    client: Client
    topic: Topic
    producer: Producer
    used: float
    apps: set[str]


_lock = threading.Lock()
_cache: dict[_Key, _Entry] = {}
_sweeper: threading.Thread | None = None
_wake = threading.Event()


def shared_producer(
    url: str | None, namespace: str | None, topic: str, lease_ttl: float
) -> tuple[Topic, Producer]:
    """This worker's topic and shared producer (a fenced or closed one is replaced)."""
    key = (url, namespace, topic)
    with _lock:
        found = _cache.get(key)
        if found is not None and not found.producer.fenced:
            found.used = time.monotonic()
            return found.topic, found.producer
        if found is not None:
            found.producer.close()
            client = found.client
        else:
            client = Client.from_url(url, namespace=namespace)
        handle = client.topic(topic)
        producer = handle.producer(lease_ttl=lease_ttl)
        producer.open()
        _cache[key] = _Entry(client, handle, producer, time.monotonic(), set())
        _start_sweeper()
        return handle, producer


def enlisted(producer: Producer, app_id: str) -> bool:
    """Whether ``producer`` was recorded as a task producer of ``app_id`` already."""
    with _lock:
        return any(e.producer is producer and app_id in e.apps for e in _cache.values())


def mark_enlisted(producer: Producer, app_id: str) -> None:
    """Remember that ``producer`` is recorded as a task producer of ``app_id``."""
    with _lock:
        for entry in _cache.values():
            if entry.producer is producer:
                entry.apps.add(app_id)


def forget(url: str | None, namespace: str | None, topic: str) -> None:
    """Drop this worker's topic and producer there (the topic was deleted or made again):
    the next task opens it anew."""
    with _lock:
        found = _cache.pop((url, namespace, topic), None)
    if found is not None:
        _close(found)


def close_idle(now: float | None = None) -> int:
    """Close the producers (and clients) no task used for :data:`IDLE_SECONDS`; how many."""
    now = time.monotonic() if now is None else now
    with _lock:
        idle = [key for key, entry in _cache.items() if now - entry.used >= IDLE_SECONDS]
        gone = [_cache.pop(key) for key in idle]
    for entry in gone:
        _close(entry)
    return len(gone)


def _close(entry: _Entry) -> None:
    entry.producer.close()
    entry.client.close()


def _start_sweeper() -> None:
    """One daemon thread per worker process, woken to look again (called under the lock)."""
    global _sweeper  # noqa: PLW0603 - one per process
    if _sweeper is not None:
        _wake.set()  # (its wait follows IDLE_SECONDS as it is now)
        return
    _sweeper = threading.Thread(target=_sweep, name="fencing-spark-idle", daemon=True)
    _sweeper.start()


def _sweep() -> None:
    global _sweeper  # noqa: PLW0603 - it leaves when nothing is left to close
    while True:
        _wake.wait(max(0.05, min(60.0, IDLE_SECONDS / 4)))
        _wake.clear()
        close_idle()
        with _lock:
            if not _cache:
                _sweeper = None  # (the next producer starts another)
                return

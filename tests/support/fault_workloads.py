"""Workloads run in threads against a server while a test breaks it, and what they saw.

- :class:`Producers`: exclusive producers cycling EXCLUSIVE, WAIT_FOR_EXCLUSIVE and
  EXCLUSIVE_WITH_FENCING on one partition, every send reported as a
  :class:`fencing.verify.Attempt` (a send that raised anything but ``ProducerFenced`` is
  "unknown": it may have landed, once at most).
- :class:`Candidates`: an election with callbacks, each term writing through
  ``leadership.producer``; every term's ``on_elected`` and ``on_revoked`` time
  (``time.monotonic``, one process) is kept, so the overlap of two terms' callbacks can be
  measured.

>>> with Producers(url, namespace, "excl", workers=3) as work:          # doctest: +SKIP
...     cut(); heal()
>>> verify_log(client, "excl", attempts=work.attempts, exclusive=True)  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import fencing
from fencing import AccessMode, ProducerFenced, StateLost
from fencing.verify import Attempt

__all__ = ["Candidates", "Handle", "Producers", "Term", "Workers", "max_overlap"]

MODES = (AccessMode.EXCLUSIVE, AccessMode.WAIT_FOR_EXCLUSIVE, AccessMode.EXCLUSIVE_WITH_FENCING)
#: Sends per producer before it closes and opens again (takeovers happen all along).
SENDS_PER_OPEN = 40


class Workers:
    """Worker threads that run until :meth:`stop`; errors outside the faults are kept."""

    def __init__(self, url: str, namespace: str, *, timeout: float = 0.5, label: str = "w") -> None:
        self.label = label
        self.url = url
        self.namespace = namespace
        self.timeout = timeout
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.clients: list[fencing.Client] = []
        self.unexpected: list[str] = []
        #: Per worker: the StateLost each one was told of (with when, monotonic).
        self.state_lost: dict[str, list[float]] = {}

    def client(self, url: str | None = None) -> fencing.Client:
        c = fencing.Client.from_url(
            url or self.url, namespace=self.namespace, socket_timeout=self.timeout
        )
        self.clients.append(c)
        return c

    def start(self, n: int, target: Callable[[str], None]) -> None:
        for i in range(n):
            wid = f"{self.label}{i}"  # values are unique across workloads of one topic
            t = threading.Thread(target=self._guard, args=(target, wid), name=wid, daemon=True)
            self.threads.append(t)
            t.start()

    def _guard(self, target: Callable[[str], None], wid: str) -> None:
        try:
            target(wid)
        except BaseException as exc:  # reported, never lost in a thread
            with self.lock:
                self.unexpected.append(f"{wid}: {type(exc).__name__}: {exc}")

    def lost(self, wid: str) -> None:
        with self.lock:
            self.state_lost.setdefault(wid, []).append(time.monotonic())

    def stop(self, timeout: float = 30.0) -> list[str]:
        """Stop the workers; the names of those still running after ``timeout``."""
        self.halt.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self.threads if t.is_alive()]
        for c in self.clients:
            c.close()
        return stuck

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Producers(Workers):
    """Exclusive producers in every exclusive mode on partition 0 of ``topic``."""

    def __init__(
        self,
        url: str,
        namespace: str,
        topic: str,
        *,
        workers: int = 3,
        lease_ttl: float = 1.0,
        acks: str = "leader",
        timeout: float = 0.3,
        label: str = "w",
    ) -> None:
        super().__init__(url, namespace, timeout=timeout, label=label)
        self.topic = topic
        self.lease_ttl = lease_ttl
        self.acks = acks
        self.attempts: list[Attempt] = []
        #: Every producer handle opened, in order, with what it was told.
        self.handles: list[Handle] = []
        #: When the last send was acknowledged (time.monotonic()).
        self.last_ack = 0.0
        self.start(workers, self._work)

    def _work(self, wid: str) -> None:
        client = self.client()
        topic = client.topic(self.topic, partitions=1)
        n = 0
        for mode in itertools.cycle(MODES):
            if self.halt.is_set():
                return
            try:
                producer = topic.producer(
                    mode, lease_ttl=self.lease_ttl, wait_timeout=self.lease_ttl, acks=self.acks
                )
                producer.open()
            except StateLost:
                # This client saw a history the store no longer has: go on as a restarted
                # process would, with a client of its own (its handles start from the store).
                self.lost(wid)
                client = self.client()
                topic = client.topic(self.topic, partitions=1)
                continue
            except fencing.FencingError:
                continue  # busy, unreachable: the next mode tries again
            handle = Handle(wid)
            with self.lock:
                self.handles.append(handle)
            try:
                for _ in range(SENDS_PER_OPEN):
                    if self.halt.is_set():
                        break
                    value = f"{wid}-{n}".encode()
                    n += 1
                    try:
                        md = producer.send(value, partition=0)
                    except ProducerFenced:
                        self._report(Attempt(value, 0, "fenced"))
                        break
                    except StateLost:
                        self._report(Attempt(value, 0, "fenced"))  # nothing written
                        self.lost(wid)
                        handle.state_lost = True
                        break
                    except fencing.FencingError:
                        self._report(Attempt(value, 0, "unknown"))
                        break
                    self._report(Attempt(value, 0, "acked", md.offset, md.epoch))
                    handle.acked.append((value, md.offset, md.epoch))
                    self.last_ack = time.monotonic()
            finally:
                try:
                    producer.close()
                except StateLost:
                    handle.state_lost = True
                except fencing.FencingError as exc:  # the lease lapses by itself
                    handle.close_error = type(exc).__name__
                handle.closed = time.monotonic()

    def _report(self, attempt: Attempt) -> None:
        with self.lock:
            self.attempts.append(attempt)


@dataclass
class Handle:
    """One producer handle of a worker: its acknowledged sends (value, offset, epoch),
    whether it was told ``StateLost`` (by a send or its close), when it was closed."""

    worker: str
    acked: list[tuple[bytes, int, int]] = field(default_factory=list)
    state_lost: bool = False
    closed: float | None = None
    close_error: str = ""


@dataclass
class Term:
    """One term as its callbacks saw it (``time.monotonic``)."""

    candidate: str
    token: int
    elected: float
    revoked: float | None = None
    reason: str = ""


@dataclass
class _Log:
    terms: dict[tuple[str, int], Term] = field(default_factory=dict)


class Candidates(Workers):
    """Candidates of one election with callbacks; each term writes to ``topic`` through
    ``leadership.producer`` until its ``lost`` is set."""

    def __init__(
        self,
        url: str,
        namespace: str,
        name: str,
        topic: str,
        *,
        candidates: int = 3,
        ttl: float = 1.5,
        timeout: float = 0.3,
        label: str = "c",
    ) -> None:
        super().__init__(url, namespace, timeout=timeout, label=label)
        self.name = name
        self.topic = topic
        self.ttl = ttl
        self.log = _Log()
        self.attempts: list[Attempt] = []
        self.retry_period = 0.0
        self.start(candidates, self._work)

    def _elected(self, wid: str) -> Callable[[Any], None]:
        def on_elected(lead: Any) -> None:
            with self.lock:
                self.log.terms[wid, lead.token] = Term(wid, lead.token, time.monotonic())

        return on_elected

    def _revoked(self, wid: str) -> Callable[[Any], None]:
        def on_revoked(lead: Any) -> None:
            with self.lock:
                term = self.log.terms[wid, lead.token]
                term.revoked = time.monotonic()
                term.reason = type(lead.reason).__name__

        return on_revoked

    def _work(self, wid: str) -> None:
        client = self.client()
        topic = client.topic(self.topic, partitions=1)
        election = client.election(
            self.name,
            candidate_id=wid,
            ttl=self.ttl,
            on_elected=self._elected(wid),
            on_revoked=self._revoked(wid),
        )
        self.retry_period = election.retry_period
        n = 0
        while not self.halt.is_set():
            try:
                with election.campaign(timeout=self.ttl) as lead, lead.producer(topic) as p:
                    while not lead.lost.is_set() and not self.halt.is_set():
                        value = f"{wid}-{n}".encode()
                        n += 1
                        try:
                            md = p.send(value, partition=0)
                        except ProducerFenced:
                            self._report(Attempt(value, 0, "fenced"))
                            break
                        except StateLost:
                            self._report(Attempt(value, 0, "fenced"))
                            self.lost(wid)
                            break
                        except fencing.FencingError:
                            self._report(Attempt(value, 0, "unknown"))
                            break
                        self._report(Attempt(value, 0, "acked", md.offset, md.epoch))
                        time.sleep(0.005)  # a leader's pace of decisions, not synchronisation
            except StateLost:
                self.lost(wid)
            except fencing.FencingError:
                continue  # not elected in time, unreachable, lost while opening: again

    def _report(self, attempt: Attempt) -> None:
        with self.lock:
            self.attempts.append(attempt)

    def terms(self) -> list[Term]:
        with self.lock:
            return sorted(self.log.terms.values(), key=lambda t: t.elected)


def max_overlap(terms: list[Term], end: float) -> float:
    """The longest time two terms' callbacks overlapped: from one term's on_elected to the
    on_revoked of an earlier term still running then (``end`` for a term never revoked)."""
    worst = 0.0
    for a, b in itertools.combinations(terms, 2):
        if a.token == b.token:
            continue
        start = max(a.elected, b.elected)
        stop = min(a.revoked or end, b.revoked or end)
        worst = max(worst, stop - start)
    return worst

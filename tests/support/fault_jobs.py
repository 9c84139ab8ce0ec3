"""Jobs run in threads against a server while a test breaks it, each with its own contract.

- :class:`CopyJob`: an idempotent copy of an endless input (row ``i`` is ``b"row-%06d"``)
  into partition 0, in fixed batches, resumed from a checkpoint kept outside Redis (position,
  ``producer.state``, PID generation: a job's database) after every error, by copies that
  run at once. Contract: the log is rows 0..k-1, once each, in order, with k at least the
  saved position.
- :class:`Resenders`: jobs with nothing saved that resend every id from 0 after each error,
  every record with ``message_id``. Contract: one record per id; every answer for an id
  gives the same offset and epoch.
- :class:`Members`: members of a consumer group on partition 0 (fed by a producer of the
  workload) that poll, commit what they polled, and open again after every error.
  Contract: no member polls after a later member's poll has returned, and a member never
  starts below a commit acknowledged before it opened (commits never go back).

Every handle (a producer of a run, a consumer) is a :class:`~.fault_workloads.Handle`
with what it was acknowledged and whether it was told ``StateLost``.

>>> with Jobs([url], namespace) as jobs:                                # doctest: +SKIP
...     cut(); heal()
>>> jobs.check(client)                                                  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import fencing
from fencing import DuplicateSequence, ProducerState, Record, StateLost
from fencing.verify import Attempt, verify_log

from .fault_workloads import Handle, Workers
from .internals import consumer_token
from .logs import read_records
from .polling import wait_until

T = TypeVar("T")

__all__ = ["CopyJob", "Jobs", "Members", "Resenders", "row", "silent_losses"]

#: Rows per batch of the copy job, ids per batch of the resenders.
BATCH = 10
#: Ids a resender run sends past the highest acknowledged one.
NEW_IDS = 100
#: The resenders stop adding ids here (well inside the id window of 10,000).
ID_LIMIT = 4000


def row(i: int) -> bytes:
    return b"row-%06d" % i


def ident(i: int) -> str:
    return f"id-{i:06d}"


class _Acks:
    """Every acknowledgement of a value, first one kept; a later one elsewhere is noted."""

    def __init__(self) -> None:
        self.first: dict[bytes, tuple[int, int]] = {}
        self.moved: list[tuple[bytes, tuple[int, int], tuple[int, int]]] = []

    def add(self, value: bytes, offset: int, epoch: int) -> None:
        got = self.first.setdefault(value, (offset, epoch))
        if got != (offset, epoch):
            self.moved.append((value, got, (offset, epoch)))

    def attempts(self, tried: set[bytes]) -> list[Attempt]:
        return [
            Attempt(v, 0, "acked", *self.first[v]) if v in self.first else Attempt(v, 0, "unknown")
            for v in sorted(tried)
        ]


class _Writers(Workers):
    """Workers on several urls (worker i on ``urls[i % len(urls)]``) writing to one topic."""

    def __init__(self, urls: list[str], namespace: str, topic: str, *, label: str,
                 workers: int, acks: str, lease_ttl: float) -> None:  # fmt: skip
        super().__init__(urls[0], namespace, timeout=0.3, label=label)
        self.urls = urls
        self.topic = topic
        self.acks = acks
        self.lease_ttl = lease_ttl
        self.acked = _Acks()
        self.tried: set[bytes] = set()
        self.handles: list[Handle] = []
        self.last_ack = 0.0
        self._index = itertools.count()
        self.start(workers, self._run)

    def _run(self, wid: str) -> None:
        url = self.urls[next(self._index) % len(self.urls)]
        self._work(wid, url)

    def _work(self, wid: str, url: str) -> None:
        raise NotImplementedError

    def handle(self, wid: str) -> Handle:
        h = Handle(wid)
        with self.lock:
            self.handles.append(h)
        return h

    def ack(self, handle: Handle, mds: list[fencing.RecordMetadata], values: list[bytes]) -> None:
        with self.lock:
            for md, v in zip(mds, values, strict=True):
                self.acked.add(v, md.offset, md.epoch)
                handle.acked.append((v, md.offset, md.epoch))
            self.last_ack = time.monotonic()

    def close(self, handle: Handle, closeable: Any) -> None:
        try:
            closeable.close()
        except StateLost:
            handle.state_lost = True
        except fencing.FencingError as exc:  # the lease lapses by itself
            handle.close_error = type(exc).__name__
        handle.closed = time.monotonic()


@dataclass
class Checkpoint:
    """What the copy job saved, outside Redis: the next row to copy, the producer state
    (None until the first producer saved it, before its first send), its PID generation."""

    position: int = 0
    state: ProducerState | None = None
    generation: int = -1


class CheckpointFenced(Exception):
    """A newer copy saved a checkpoint (a higher PID generation): this copy stops."""


class CopyJob(_Writers):
    """Copies of one copy job (see the module docstring); ``told`` counts the copies told
    ``StateLost``: a copy that is told stops, as its operator would have it."""

    def __init__(self, urls: list[str], namespace: str, topic: str = "copy", *,
                 copies: int = 2, acks: str = "leader", lease_ttl: float = 1.0,
                 ) -> None:  # fmt: skip
        self.saved = Checkpoint()
        self.skipped = 0  # batches answered "older than the window"
        self.refused: list[str] = []  # answers the job cannot go on from
        #: The errors that made a copy start again from the checkpoint, by type; the last.
        self.errors: dict[str, int] = {}
        self.last_error = ""
        super().__init__(urls, namespace, topic, label="j", workers=copies, acks=acks,
                         lease_ttl=lease_ttl)  # fmt: skip

    def _save(self, position: int | None, state: ProducerState) -> None:
        with self.lock:
            if state.generation < self.saved.generation or (
                position is None and self.saved.state is not None
            ):
                raise CheckpointFenced
            if position is not None:
                self.saved.position = position
            self.saved.state, self.saved.generation = state, state.generation

    def _work(self, wid: str, url: str) -> None:
        topic = self.client(url).topic(self.topic, partitions=1)
        while not self.halt.is_set():
            with self.lock:
                saved = Checkpoint(self.saved.position, self.saved.state, self.saved.generation)
            handle = self.handle(wid)
            try:
                producer = topic.producer(
                    resume=saved.state, lease_ttl=self.lease_ttl, acks=self.acks
                )
            except StateLost:
                self.lost(wid)
                handle.state_lost = True
                return
            except fencing.FencingError:
                continue  # unreachable: start again from the checkpoint
            try:
                if saved.state is None:
                    self._save(None, producer.state)  # before the first send
                self._copy(handle, producer, saved.position)
            except CheckpointFenced:
                pass  # a newer copy took over
            except StateLost:
                self.lost(wid)
                handle.state_lost = True
                return
            except fencing.FencingError as exc:  # fenced, outcome unknown: start again
                with self.lock:
                    self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
                    self.last_error = str(exc)
            finally:
                self.close(handle, producer)

    def _copy(self, handle: Handle, producer: fencing.Producer, position: int) -> None:
        while not self.halt.is_set():
            values = [row(i) for i in range(position, position + BATCH)]
            with self.lock:
                self.tried.update(values)
            try:
                mds = producer.send_batch([Record(v) for v in values], partition=0)
            except DuplicateSequence as exc:
                if exc.reason != "older-than-window":
                    with self.lock:
                        self.refused.append(f"rows {position}..: {exc}")
                    raise
                with self.lock:
                    self.skipped += 1
            else:
                self.ack(handle, mds, values)
            position += BATCH
            self._save(position, producer.state)

    def check(self, client: fencing.Client) -> dict[str, object]:
        """The contract and ``verify_log``; the figures for a report."""
        report = verify_log(
            client, self.topic, attempts=self.acked.attempts(self.tried), exclusive=False
        )
        values = [r.value for r in read_records(client, self.topic, 0)]
        assert not self.refused, self.refused
        assert not self.acked.moved, self.acked.moved[:3]
        assert report.ok, report.summary()
        assert values == [row(i) for i in range(len(values))], values[:5]
        assert len(values) >= self.saved.position, (len(values), self.saved.position)
        return {"rows": len(values), "skipped": self.skipped}


class Resenders(_Writers):
    """Jobs that resend everything by message id (see the module docstring)."""

    def __init__(self, urls: list[str], namespace: str, topic: str = "ids", *,
                 jobs: int = 2, acks: str = "leader", lease_ttl: float = 1.0) -> None:  # fmt: skip
        self.frontier = 0  # one past the highest id acknowledged
        self.partly: list[str] = []  # batches refused as partly known
        super().__init__(urls, namespace, topic, label="r", workers=jobs, acks=acks,
                         lease_ttl=lease_ttl)  # fmt: skip

    def _work(self, wid: str, url: str) -> None:
        client = self.client(url)
        while not self.halt.is_set():
            handle = self.handle(wid)
            producer: fencing.Producer | None = None
            try:
                producer = client.topic(self.topic, partitions=1).producer(
                    lease_ttl=self.lease_ttl, acks=self.acks
                )
                self._resend(handle, producer)
            except StateLost:
                self.lost(wid)
                handle.state_lost = True
                client = self.client(url)  # as a restarted process
            except fencing.DuplicateMessageId as exc:
                with self.lock:
                    self.partly.append(str(exc))
            except fencing.FencingError:
                pass  # a crash with nothing saved: the next run resends from id 0
            finally:
                if producer is not None:
                    self.close(handle, producer)

    def _resend(self, handle: Handle, producer: fencing.Producer) -> None:
        end = min(ID_LIMIT, self.frontier + NEW_IDS)
        for first in range(0, end, BATCH):
            if self.halt.is_set():
                return
            ids = range(first, first + BATCH)
            values = [ident(i).encode() for i in ids]
            with self.lock:
                self.tried.update(values)
            mds = producer.send_batch(
                [Record(v, message_id=ident(i)) for i, v in zip(ids, values, strict=True)],
                partition=0,
            )
            self.ack(handle, mds, values)
            with self.lock:
                self.frontier = max(self.frontier, first + BATCH)

    def check(self, client: fencing.Client) -> dict[str, object]:
        report = verify_log(
            client, self.topic, attempts=self.acked.attempts(self.tried), exclusive=False
        )
        ids = [r.message_id for r in read_records(client, self.topic, 0)]
        assert not self.partly, self.partly[:3]
        assert not self.acked.moved, self.acked.moved[:3]
        assert report.ok, report.summary()
        assert len(ids) == len(set(ids)), "an id appended twice"
        return {"ids": len(ids)}


@dataclass
class Poll:
    handle: int
    start: float
    end: float


@dataclass
class Member:
    """One consumer handle: when its open began and ended, where it started, its token."""

    handle: Handle
    opening: float
    opened: float
    start: int
    token: int
    commits: list[tuple[int, float]] = field(default_factory=list)


class Members(_Writers):
    """A consumer group with a feeding producer (see the module docstring)."""

    def __init__(self, urls: list[str], namespace: str, topic: str = "feed", *,
                 members: int = 2, acks: str = "leader", ttl: float = 1.0) -> None:  # fmt: skip
        self.group = "billing"
        self.members: list[Member] = []
        self.polls: list[Poll] = []
        self.feed: list[Attempt] = []
        super().__init__(urls, namespace, topic, label="m", workers=members, acks=acks,
                         lease_ttl=ttl)  # fmt: skip
        self.feeder = threading.Thread(target=self._guard, args=(self._feed, "feeder"),
                                       daemon=True)  # fmt: skip
        self.threads.append(self.feeder)
        self.feeder.start()

    def _feed(self, wid: str) -> None:
        topic = self.client().topic(self.topic, partitions=1)
        n = 0
        while not self.halt.is_set():
            try:
                with topic.producer(lease_ttl=5.0, acks=self.acks) as p:
                    while not self.halt.is_set():
                        value = b"f-%06d" % n
                        n += 1
                        try:
                            md = p.send(value, partition=0)
                        except fencing.FencingError:
                            self.feed.append(Attempt(value, 0, "unknown"))
                            raise
                        self.feed.append(Attempt(value, 0, "acked", md.offset, md.epoch))
                        time.sleep(0.002)  # a feed's pace, not synchronisation
            except StateLost:
                topic = self.client().topic(self.topic, partitions=1)  # as a restarted process
            except fencing.FencingError:
                continue

    def _work(self, wid: str, url: str) -> None:
        topic = self.client(url).topic(self.topic, partitions=1)
        while not self.halt.is_set():
            handle = self.handle(wid)
            opening = time.monotonic()
            try:
                consumer = topic.consumer(
                    self.group, wid, partitions=[0], ttl=self.lease_ttl, wait=True,
                    timeout=self.lease_ttl, acks=self.acks,
                )  # fmt: skip
            except StateLost:
                self.lost(wid)
                handle.state_lost = True
                topic = self.client(url).topic(self.topic, partitions=1)  # as a restarted process
                continue
            except fencing.FencingError:
                continue
            member = Member(handle, opening, time.monotonic(), consumer.position(0),
                            consumer_token(consumer, 0))  # fmt: skip
            with self.lock:
                self.members.append(member)
                index = len(self.members) - 1
            try:
                while not self.halt.is_set():
                    began = time.monotonic()
                    records = consumer.poll(max_records=50, block_ms=20)
                    with self.lock:
                        self.polls.append(Poll(index, began, time.monotonic()))
                    if records:
                        offset = consumer.commit()[0]
                        member.commits.append((offset, time.monotonic()))
                        with self.lock:
                            self.last_ack = time.monotonic()
            except StateLost:
                self.lost(wid)
                handle.state_lost = True
                topic = self.client(url).topic(self.topic, partitions=1)  # as a restarted process
            except fencing.FencingError:
                pass
            finally:
                self.close(handle, consumer)

    def violations(self) -> tuple[list[str], list[tuple[Member, Member, int]]]:
        """Polls of a member after a later member's poll returned; and members that started
        below a commit acknowledged to another member before they began to open (each with
        that member, the commit's member and offset)."""
        late = []
        for a, b in itertools.combinations(self.polls, 2):
            for x, y in ((a, b), (b, a)):
                if (
                    self.members[y.handle].opened > self.members[x.handle].opened
                    and y.end < x.start
                ):
                    late.append(f"member {x.handle} polled {x.start - y.end:.3f}s after {y.handle}")
        back = []
        for m in self.members:
            for other in self.members:
                for offset, at in other.commits:
                    if other is not m and at < m.opening and offset > m.start:
                        back.append((m, other, offset))
        return late, back

    def check(self, client: fencing.Client, *, rollback: bool = False) -> dict[str, object]:
        # (Under a rollback the feed's lost records are the producers' case, checked there.)
        feed = [] if rollback else self.feed
        report = verify_log(client, self.topic, attempts=feed, exclusive=False)
        assert report.ok, report.summary()
        late, back = self.violations()
        if rollback:  # a commit the rollback lost: its member was told
            back = [(m, o, off) for m, o, off in back if not o.handle.state_lost]
        assert not late, late[:3]
        assert not back, [(m.handle.worker, m.start, o.handle.worker, off) for m, o, off in back]
        commits = sum(len(m.commits) for m in self.members)
        return {"members": len(self.members), "polls": len(self.polls), "commits": commits}


class Jobs:
    """The three jobs at once, on ``urls`` (workers spread over them)."""

    def __init__(self, urls: list[str], namespace: str, *, acks: str = "leader") -> None:
        self.copy = CopyJob(urls, namespace, acks=acks)
        self.ids = Resenders(urls, namespace, acks=acks)
        self.members = Members(urls, namespace, acks=acks)
        self.all: tuple[_Writers, ...] = (self.copy, self.ids, self.members)

    def progress(self) -> int:
        """The fewest acknowledgements (records, or commits) any of the jobs has had."""
        with self.copy.lock, self.ids.lock, self.members.lock:
            counts = [
                sum(len(h.acked) for h in self.ids.handles),
                sum(len(m.commits) for m in self.members.members),
            ]
            if len(self.copy.state_lost) < len(self.copy.threads):  # told copies stop
                counts.append(sum(len(h.acked) for h in self.copy.handles))
            return min(counts)

    def describe(self) -> str:
        """Where each job stands, for a failure message."""
        with self.copy.lock, self.ids.lock, self.members.lock:
            return (
                f"copy: {sum(len(h.acked) for h in self.copy.handles)} acked, saved "
                f"{self.copy.saved.position}, told {sorted(self.copy.state_lost)}, restarts "
                f"{self.copy.errors} (last: {self.copy.last_error}); ids: "
                f"{sum(len(h.acked) for h in self.ids.handles)} acked, told "
                f"{sorted(self.ids.state_lost)}; group: {len(self.members.members)} members, "
                f"{sum(len(m.commits) for m in self.members.members)} commits, "
                f"{len(self.members.polls)} polls, told {sorted(self.members.state_lost)}, "
                f"fed {len(self.members.feed)}; unexpected {self.unexpected()}"
            )

    def last_ack(self) -> float:
        return max(w.last_ack for w in self.all)

    def around(self, fault: Callable[[], T], *, after: float = 30.0) -> T:
        """Wait until every job is at work, make ``fault`` (its result is returned), wait
        for 20 more acknowledgements of every job, then stop them: none stuck, nothing
        unexpected."""
        wait_until(lambda: self.progress() > 20, timeout=20, what="every job at work")
        result = fault()
        done = self.progress()
        wait_until(
            lambda: self.progress() > done + 20, timeout=after, what="work after",
            detail=self.describe,
        )  # fmt: skip
        stuck = self.stop()
        assert not stuck, stuck
        assert not self.unexpected(), self.unexpected()
        return result

    def exact(self, client: fencing.Client) -> dict[str, object]:
        """Each job's whole contract, checked over its log (a failure raises)."""
        return {
            "copy": self.copy.check(client),
            "ids": self.ids.check(client),
            "group": self.members.check(client),
        }

    def stop(self) -> list[str]:
        return [name for w in self.all for name in w.stop()]

    def unexpected(self) -> list[str]:
        return [u for w in self.all for u in w.unexpected]

    def __enter__(self) -> Jobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def silent_losses(
    handles: list[Handle], where: dict[bytes, tuple[int | None, int | None]], restarted: float
) -> list[tuple[object, ...]]:
    """Handles whose acknowledged records are not where they were acknowledged, that were
    neither told ``StateLost`` nor closed before the server came back at ``restarted``
    (nobody left to tell): each with its first lost records, how many it had acknowledged,
    the error its close raised and when it was closed (seconds after ``restarted``)."""
    silent: list[tuple[object, ...]] = []
    for h in handles:
        lost = [(v, o, e) for v, o, e in h.acked if where.get(v) != (o, e)]
        if lost and not h.state_lost and (h.closed is None or h.closed >= restarted):
            closed = None if h.closed is None else round(h.closed - restarted, 3)
            silent.append((h.worker, lost[:3], len(h.acked), h.close_error, closed))
    return silent

"""WAIT_FOR_EXCLUSIVE producers in real processes under crashes and pauses (G1, G2, 4b).

Each producer lives in its own process (``spawn``) and appends without pause while it holds
the partition. The test SIGKILLs the holder (its lease lapses by server time and the next
waiter takes over), then SIGSTOPs the next holder long enough for its lease to lapse, lets a
third producer take over and append, and resumes the paused one: every send it makes from
then on must raise ``ProducerFenced``. The whole log is then read back and checked: one
contiguous segment per epoch, epochs strictly increasing, one producer per segment, each
producer's values numbered without gaps or duplicates, nothing from a superseded producer
after its successor's first record, and every takeover after the old lease ended.

Children talk to the test through one duplex pipe each, never through a shared
``multiprocessing.Queue`` or ``Event``: those hold a lock shared by every process while in
use, and a child SIGKILLed while holding it would wedge all the others (see the warning in
the ``multiprocessing`` docs). A small message on a pipe is one ``write``, so a kill can
never leave half of one behind.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

import fencing
from fencing import AccessMode, OutcomeUnknown, ProducerBusy, ProducerFenced
from fencing._sync.metadata import metadata_of

from ..conftest import ServerInfo
from ..support.clock import server_ms
from ..support.polling import wait_until

pytestmark = pytest.mark.one_server

TOPIC = "log"
WAIT = AccessMode.WAIT_FOR_EXCLUSIVE
LEASE_TTL = 1.0
TTL_MS = round(LEASE_TTL * 1000)
#: How long a child waits in the queue before giving up (it is never meant to).
CHILD_WAIT_TIMEOUT = 30.0
#: Bound on every single wait for an event from a child.
EVENT_TIMEOUT = 15.0
#: Records a holder appends before the test acts on it.
SOME_RECORDS = 20
#: Sends a fenced producer attempts after its first ProducerFenced.
SENDS_AFTER_FENCE = 3

Event = tuple[Any, ...]


# -- children ----------------------------------------------------------------------------------


def _writer(
    url: str, namespace: str, name: str, conn: multiprocessing.connection.Connection
) -> None:
    """Wait for exclusivity, then append ``<name>:<seq>`` without pause until told to stop.

    Events sent to the test: ("granted", name, epoch, pid, producer_id), ("appended", name,
    ok, last_offset) now and then, ("unknown", name, seq) for an OutcomeUnknown,
    ("fenced", name, epoch, current_epoch, ok, last_offset), then ("fenced_send", name) for
    each later send that raised ProducerFenced (("sent_after_fence", name, offset) or
    ("error", ...) otherwise), and ("closed", name, ok, last_offset, unknowns) at the end.
    """
    client = fencing.Client.from_url(url, namespace=namespace)
    try:
        topic = client.topic(TOPIC, partitions=1)
        try:
            producer = topic.producer(
                WAIT, name=name, lease_ttl=LEASE_TTL, wait_timeout=CHILD_WAIT_TIMEOUT
            )
        except ProducerBusy:
            conn.send(("never_granted", name))
            return
        epoch = producer.epoch(0)
        conn.send(("granted", name, epoch, os.getpid(), producer.producer_id))
        seq = ok = unknowns = 0
        last_offset = -1
        try:
            while not conn.poll():
                try:
                    md = producer.send(f"{name}:{seq}".encode(), partition=0)
                except OutcomeUnknown:
                    # Only possible for a send on the wire while the process was stopped.
                    conn.send(("unknown", name, seq))
                    unknowns += 1
                    seq += 1
                    continue
                except ProducerFenced as exc:
                    conn.send(("fenced", name, epoch, exc.current_epoch, ok, last_offset))
                    _send_after_fence(producer, name, conn)
                    conn.poll(CHILD_WAIT_TIMEOUT)  # until the test says stop
                    break
                if md.epoch != epoch or md.offset <= last_offset:
                    conn.send(("error", name, f"bad metadata {md} after offset {last_offset}"))
                seq += 1
                ok += 1
                last_offset = md.offset
                if ok == SOME_RECORDS or ok % 500 == 0:
                    conn.send(("appended", name, ok, last_offset))
        finally:
            producer.close()
        conn.send(("closed", name, ok, last_offset, unknowns))
    except BaseException as exc:
        conn.send(("error", name, repr(exc)))
        raise
    finally:
        client.close()


def _send_after_fence(
    producer: fencing.Producer, name: str, conn: multiprocessing.connection.Connection
) -> None:
    for i in range(SENDS_AFTER_FENCE):
        try:
            md = producer.send(f"{name}:after-fence-{i}".encode(), partition=0)
        except ProducerFenced:
            conn.send(("fenced_send", name))
        except Exception as exc:
            conn.send(("error", name, f"send after fence raised {exc!r}"))
        else:
            conn.send(("sent_after_fence", name, md.offset))


def _waiter(
    url: str, namespace: str, name: str, conn: multiprocessing.connection.Connection
) -> None:
    """Queue for exclusivity; once granted append one record, report, wait for stop."""
    client = fencing.Client.from_url(url, namespace=namespace)
    try:
        topic = client.topic(TOPIC, partitions=1)
        try:
            producer = topic.producer(
                WAIT, name=name, lease_ttl=LEASE_TTL, wait_timeout=CHILD_WAIT_TIMEOUT
            )
        except ProducerBusy:
            conn.send(("never_granted", name))
            return
        with producer:
            md = producer.send(f"{name}:0".encode(), partition=0)
            conn.send(("granted", name, producer.epoch(0), os.getpid(), producer.producer_id))
            conn.send(("appended", name, 1, md.offset))
            conn.poll(CHILD_WAIT_TIMEOUT)
        conn.send(("closed", name, 1, md.offset, 0))
    except BaseException as exc:
        conn.send(("error", name, repr(exc)))
        raise
    finally:
        client.close()


# -- the test's side -----------------------------------------------------------------------------


@dataclass
class Child:
    name: str
    process: Any  # multiprocessing.context.SpawnProcess
    conn: multiprocessing.connection.Connection
    open: bool = True  # the pipe has not reached EOF yet


@dataclass
class Children:
    """Child processes and the events they send, read with deadlines only."""

    ctx: Any
    children: dict[str, Child] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    _unread: list[Event] = field(default_factory=list)

    def start(self, target: Callable[..., None], url: str, namespace: str, name: str) -> Child:
        ours, theirs = self.ctx.Pipe(duplex=True)
        process = self.ctx.Process(target=target, args=(url, namespace, name, theirs), name=name)
        process.start()
        theirs.close()
        child = Child(name, process, ours)
        self.children[name] = child
        return child

    def _receive(self, timeout: float) -> None:
        """Read whatever is ready (waiting up to ``timeout``); errors fail the test."""
        conns = [c.conn for c in self.children.values() if c.open]
        if not conns:
            return
        for conn in multiprocessing.connection.wait(conns, timeout):
            child = next(c for c in self.children.values() if c.conn is conn)
            try:
                event: Event = child.conn.recv()
            except (EOFError, ConnectionResetError):  # exited (reset: a stop left unread)
                child.open = False
                continue
            self.events.append(event)
            assert event[0] != "error", f"child {event[1]} failed: {event[2]}"
            self._unread.append(event)

    def expect(self, what: str, predicate: Callable[[Event], bool]) -> Event:
        """The first unread event matching ``predicate``, within EVENT_TIMEOUT."""
        deadline = time.monotonic() + EVENT_TIMEOUT
        while True:
            for i, event in enumerate(self._unread):
                if predicate(event):
                    del self._unread[i]
                    return event
            left = deadline - time.monotonic()
            if left <= 0 or not any(c.open for c in self.children.values()):
                raise AssertionError(f"no {what} within {EVENT_TIMEOUT}s; events: {self.events}")
            self._receive(left)

    def tell_stop(self, name: str) -> None:
        child = self.children[name]
        if child.process.is_alive():
            with contextlib.suppress(BrokenPipeError):  # exited meanwhile: drain() reads why
                child.conn.send("stop")

    def drain(self, timeout: float = EVENT_TIMEOUT) -> None:
        """Read every event until all pipes are closed and every child has exited."""
        deadline = time.monotonic() + timeout
        while any(c.open for c in self.children.values()):
            left = deadline - time.monotonic()
            assert left > 0, f"children still running after {timeout}s; events: {self.events}"
            self._receive(left)
        for child in self.children.values():
            child.process.join(max(0.0, deadline - time.monotonic()))
            assert child.process.exitcode is not None, f"{child.name} did not exit"

    def kill_all(self) -> None:
        for child in self.children.values():
            if child.process.is_alive():
                child.process.kill()  # SIGKILL ends a stopped process too
        for child in self.children.values():
            child.process.join(5)
            child.conn.close()


@contextlib.contextmanager
def children() -> Iterator[Children]:
    group = Children(multiprocessing.get_context("spawn"))
    try:
        yield group
    finally:
        group.kill_all()


def of(kind: str, name: str | None = None) -> Callable[[Event], bool]:
    return lambda e: e[0] == kind and (name is None or e[1] == name)


def appended(name: str, at_least: int) -> Callable[[Event], bool]:
    return lambda e: e[0] == "appended" and e[1] == name and e[2] >= at_least


def read_log(topic: fencing.Topic) -> list[fencing.Record]:
    reader = topic.reader(0, 0)
    records: list[fencing.Record] = []
    while batch := reader.read(max_records=10_000):
        records.extend(batch)
    return records


@dataclass
class Segment:
    epoch: int
    records: list[fencing.Record]

    @property
    def first(self) -> fencing.Record:
        return self.records[0]

    @property
    def last(self) -> fencing.Record:
        return self.records[-1]


def offset(record: fencing.Record) -> int:
    assert record.offset is not None
    return record.offset


def stamp(record: fencing.Record) -> int:
    assert record.timestamp_ms is not None
    return record.timestamp_ms


def check_g1(records: list[fencing.Record], grants: dict[str, Event]) -> dict[str, Segment]:
    """G1 over the whole log; returns each producer's one segment, by name.

    Checks: offsets 0.. contiguous; one contiguous segment per epoch, epochs strictly
    increasing; every record of a segment from the producer granted that epoch (by
    producer_id and by the name in the value); the producer's values numbered 0, 1, 2...
    """
    assert [r.offset for r in records] == list(range(len(records)))
    segments: list[Segment] = []
    for r in records:
        assert r.epoch is not None
        if segments and segments[-1].epoch == r.epoch:
            segments[-1].records.append(r)
        else:
            segments.append(Segment(r.epoch, [r]))
    epochs = [s.epoch for s in segments]
    assert epochs == sorted(set(epochs)), f"epochs along the log: {epochs}"
    by_epoch = {g[2]: g for g in grants.values()}
    out: dict[str, Segment] = {}
    for seg in segments:
        assert seg.epoch in by_epoch, f"records of epoch {seg.epoch}, never granted: {grants}"
        _, name, _, _, producer_id = by_epoch[seg.epoch]
        assert {r.producer_id for r in seg.records} == {producer_id}
        values = [r.value.decode() for r in seg.records]
        assert all(v.startswith(f"{name}:") for v in values), f"{name}: {values[:5]}..."
        seqs = [int(v.split(":", 1)[1]) for v in values]
        assert seqs == list(range(len(seqs))), f"{name}: values not numbered 0..{len(seqs) - 1}"
        out[name] = seg
    return out


def test_killed_then_paused_holder_is_fenced_and_the_log_stays_linear(
    server: ServerInfo, namespace: str, raw: redis.Redis
) -> None:
    client = fencing.Client.from_url(server.url, namespace=namespace)
    topic = client.topic(TOPIC, partitions=1)
    waiters = metadata_of(topic).partition_keys(0).waiters
    names = [f"w{i}" for i in range(4)]
    try:
        with children() as group:
            for name in names:
                group.start(_writer, server.url, namespace, name)
            grants: dict[str, Event] = {}

            # 1. Somebody holds and appends while the three others queue; then it crashes.
            first = group.expect("first grant", of("granted"))
            killed = first[1]
            grants[killed] = first
            group.expect(f"records from {killed}", appended(killed, SOME_RECORDS))
            wait_until(lambda: raw.zcard(waiters) == 3, timeout=EVENT_TIMEOUT)
            group.children[killed].process.kill()
            group.children[killed].process.join(EVENT_TIMEOUT)

            # 2. Its lease lapses by server time; the next waiter takes over and appends.
            second = group.expect("grant after the crash", of("granted"))
            paused = second[1]
            grants[paused] = second
            assert second[2] == first[2] + 1
            group.expect(f"records from {paused}", appended(paused, SOME_RECORDS))

            # 3. The holder pauses (GC, SIGSTOP...) past its lease: the next waiter takes over.
            os.kill(group.children[paused].process.pid, signal.SIGSTOP)
            third = group.expect("grant during the pause", of("granted"))
            successor = third[1]
            grants[successor] = third
            assert third[2] == second[2] + 1
            group.expect(f"records from {successor}", appended(successor, SOME_RECORDS))

            # 4. The paused holder resumes: every send it makes raises ProducerFenced.
            os.kill(group.children[paused].process.pid, signal.SIGCONT)
            fenced = group.expect(f"{paused} fenced", of("fenced", paused))
            _, _, fenced_epoch, current_epoch, paused_ok, paused_last = fenced
            assert fenced_epoch == second[2]
            assert current_epoch >= third[2]
            for _ in range(SENDS_AFTER_FENCE):
                group.expect(f"{paused}'s later send fenced", of("fenced_send", paused))

            # 5. Stop: the last waiter first (it must see the stop when it is granted), then
            # the others. The successor's close hands the partition over gracefully.
            (last,) = set(names) - {killed, paused, successor}
            for name in (last, paused, successor):
                group.tell_stop(name)
            group.drain()
        events = group.events

        assert not [e for e in events if e[0] in ("sent_after_fence", "never_granted")], events
        last_grant = next(e for e in events if e[0] == "granted" and e[1] == last)
        assert last_grant[2] == third[2] + 1
        grants[last] = last_grant
        closed = {e[1]: e for e in events if e[0] == "closed"}
        assert set(closed) == {paused, successor, last}
        assert [e[1] for e in events if e[0] == "granted"].count(killed) == 1
        unknown = [e for e in events if e[0] == "unknown"]
        # Only the send on the wire when the process stopped may have an unknown outcome.
        assert all(e[1] == paused for e in unknown) and len(unknown) <= 1, unknown
        exits = {name: c.process.exitcode for name, c in group.children.items()}
        assert exits == {killed: -signal.SIGKILL, paused: 0, successor: 0, last: 0}

        # The whole log.
        records = read_log(client.topic(TOPIC))
        segs = check_g1(records, grants)
        assert list(segs) == [killed, paused, successor]  # `last` was told to stop first
        assert records[-1] == segs[successor].last

        # The killed holder: nothing after its successor's first record, and the successor
        # was granted only once the killed one's lease had lapsed by server time.
        kseg, pseg, sseg = segs[killed], segs[paused], segs[successor]
        assert offset(kseg.last) + 1 == offset(pseg.first)
        assert stamp(pseg.first) >= stamp(kseg.last) + TTL_MS

        # The paused holder (G2): nothing after its successor's first record, and the
        # takeover came only after its lease lapsed. The log holds exactly its acknowledged
        # sends, plus at most the one whose outcome the pause made unknown.
        assert offset(pseg.last) + 1 == offset(sseg.first)
        assert stamp(sseg.first) >= stamp(pseg.last) + TTL_MS
        assert not any(r.producer_id == second[4] for r in records[offset(sseg.first) :])
        if unknown:
            assert len(pseg.records) in (paused_ok, paused_ok + 1)
            assert paused_last <= offset(pseg.last)
        else:
            assert (len(pseg.records), offset(pseg.last)) == (paused_ok, paused_last)

        # The successor wrote exactly what it was acknowledged; the last one got the
        # partition when the successor closed, saw the stop and wrote nothing.
        _, _, ok, last_offset, unknowns = closed[successor]
        assert (len(sseg.records), offset(sseg.last), unknowns) == (ok, last_offset, 0)
        assert closed[last][2:] == (0, -1, 0)
        assert raw.zcard(waiters) == 0
    finally:
        client.close()


def test_killed_waiter_does_not_block_the_queue(
    server: ServerInfo, namespace: str, raw: redis.Redis
) -> None:
    client = fencing.Client.from_url(server.url, namespace=namespace)
    topic = client.topic(TOPIC, partitions=1)
    pk = metadata_of(topic).partition_keys(0)
    try:
        holder = topic.producer(WAIT, name="A", lease_ttl=LEASE_TTL)
        holder.send(b"A:0", partition=0)
        epoch_a = holder.epoch(0)
        with children() as group:
            b = group.start(_waiter, server.url, namespace, "B")
            wait_until(lambda: raw.zcard(pk.waiters) == 1, timeout=EVENT_TIMEOUT)
            (b_session,) = raw.zrange(pk.waiters, 0, -1)
            group.start(_waiter, server.url, namespace, "C")
            wait_until(lambda: raw.zcard(pk.waiters) == 2, timeout=EVENT_TIMEOUT)
            queue = raw.zrange(pk.waiters, 0, -1)
            assert queue[0] == b_session  # FIFO: B is ahead of C

            b.process.kill()
            b.process.join(EVENT_TIMEOUT)
            assert b.process.exitcode == -signal.SIGKILL
            # B's waiter lease as it stands now; a renewal already on the wire could only
            # push it later, which keeps the check below valid.
            b_lease_ms = int(raw.hget(pk.waiting_leases, b_session) or 0)
            assert b_lease_ms > 0
            close_ms = server_ms(raw)
            holder.close()

            granted = group.expect("C's grant", of("granted"))
            assert granted[1] == "C"
            assert granted[2] == epoch_a + 1
            group.tell_stop("C")
            group.drain()
        events = group.events
        assert [e[1] for e in events if e[0] == "granted"] == ["C"]
        assert not [e for e in events if e[1] == "B"], events
        assert group.children["C"].process.exitcode == 0

        records = read_log(client.topic(TOPIC))
        assert [(r.value, r.epoch) for r in records] == [
            (b"A:0", epoch_a),
            (b"C:0", epoch_a + 1),
        ]
        assert records[1].producer_id == granted[4]
        # C was granted once B's waiter lease had lapsed (or at once, had it lapsed before
        # A closed), and promptly: within a lease of the later of the two.
        c_ms = stamp(records[1])
        assert c_ms >= b_lease_ms
        assert c_ms <= max(b_lease_ms, close_ms) + TTL_MS
        # The dead waiter was removed from the queue, and C left it on its grant.
        assert raw.zcard(pk.waiters) == 0
        assert raw.hlen(pk.waiting_leases) == 0
    finally:
        client.close()

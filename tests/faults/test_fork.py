"""One identity per process across fork().

- a forked child's close() (what unwinding a ``with`` block does) releases nothing of the
  parent's, and the parent's handles refuse any operation in the child;
- a child forked from a holder never renews the parent's leases, even once it starts a
  keeper thread of its own: after the holder dies its lease lapses as if the child did not
  exist;
- a child forked while a thread of the parent held one of the client's locks does not hang:
  the client works in the child for new handles.

Children report through their exit status and always leave with ``os._exit``.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest
import redis

import fencing
from fencing import AccessMode, Client
from fencing._keys import ELECTION_GROUP
from tests.support.internals import context_of, metadata_of

from ..conftest import ServerInfo
from ..support.logs import fill
from ..support.polling import wait_until
from ..support.processes import fork, wait_child

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


@pytest.fixture
def other(server: ServerInfo, namespace: str) -> Iterator[Client]:
    c = Client.from_url(server.url, namespace=namespace)
    yield c
    c.close()


def test_a_childs_close_releases_nothing_of_the_parent(client: Client, other: Client) -> None:
    topic = client.topic("t", partitions=1)
    owner = client.ownership("g", "parent", ttl=30)
    owner.claim("r")
    with topic.producer(AccessMode.EXCLUSIVE, lease_ttl=30) as producer:
        producer.send(b"before")
        epoch = producer.epoch(0)

        def child() -> int:
            with pytest.raises(fencing.ProcessBoundError):
                producer.send(b"from the child")
            with pytest.raises(fencing.ProcessBoundError):
                owner.renew()
            with pytest.raises(fencing.ProcessBoundError):
                producer.resolve(0)
            # What unwinding the parent's with blocks does in the child: nothing at all.
            producer.__exit__(None, None, None)
            owner.__exit__(None, None, None)
            owner.close()
            producer.close()
            return 0

        assert wait_child(fork(child)) == 0
        # The parent still holds both, 30 s leases just started: nobody else gets in.
        with pytest.raises(fencing.ProducerBusy):
            other.topic("t").producer(AccessMode.EXCLUSIVE)
        with pytest.raises(fencing.OwnershipConflict):
            other.ownership("g", "other", ttl=5).claim("r")
        assert producer.send(b"after").epoch == epoch
        owner.check("r")
    values = [r.value for r in topic.reader(0, 0).read()]
    assert values == [b"before", b"after"]


def test_a_child_never_renews_the_parents_lease(
    server: ServerInfo, namespace: str, other: Client
) -> None:
    """A holder H forks G; G opens handles of its own (its own keeper thread starts). H is
    SIGKILLed: its 1 s lease lapses and the standby gets in while G still lives."""
    read_fd, write_fd = os.pipe()

    def holder() -> int:
        os.close(read_fd)
        client = Client.from_url(server.url, namespace=namespace)
        producer = client.topic("t", partitions=1).producer(AccessMode.EXCLUSIVE, lease_ttl=1.0)
        producer.send(b"holder")

        def grandchild() -> int:
            # New handles in the child start the child's keeper; it must not have inherited
            # the parent's renewal of "t".
            mine = client.topic("mine", partitions=1).producer(AccessMode.EXCLUSIVE)
            mine.send(b"grandchild")
            os.write(write_fd, b"G%d\n" % os.getpid())
            time.sleep(15)  # lives on, with the keeper running, until killed
            return 0

        fork(grandchild)
        os.write(write_fd, b"H\n")
        time.sleep(30)
        return 0

    h = fork(holder)
    os.close(write_fd)
    got = b""
    with os.fdopen(read_fd, "rb") as pipe:
        while got.count(b"\n") < 2:
            chunk = pipe.read1(64)
            assert chunk, "the holder or its child died before reporting"
            got += chunk
    g = int(next(line for line in got.split() if line.startswith(b"G"))[1:])
    try:
        os.kill(h, signal.SIGKILL)
        os.waitpid(h, 0)
        # Queue behind the dead holder: granted once its lease lapses (about 1 s), not
        # never (the child renewing it) - 8 s is far past the lease.
        standby = other.topic("t").producer(AccessMode.WAIT_FOR_EXCLUSIVE, wait_timeout=8)
        assert standby.epoch(0) == 2
        assert standby.send(b"standby").offset == 1
        os.kill(g, 0)  # the child was alive the whole time
    finally:
        os.kill(g, signal.SIGKILL)
    mine = other.topic("mine").reader(0, 0).read()
    assert [r.value for r in mine] == [b"grandchild"]


def test_a_child_forked_while_the_clients_locks_were_held_works(
    client: Client, raw: redis.Redis
) -> None:
    topic = client.topic("t", partitions=1)
    producer = topic.producer(AccessMode.EXCLUSIVE, lease_ttl=5)  # keeper thread running
    producer.send(b"parent")
    client.ownership("g", "parent", ttl=5).claim("r")  # notifier thread running
    locks = [
        context_of(client).drivers._lock,
        context_of(client)._safe_lock,
        context_of(client).keeper._cond,
        context_of(client).notifier._lock,
        metadata_of(topic)._lock,
        metadata_of(topic)._seen_lock,
    ]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        # What the keeper, the notifier or another sender does at the moment of a fork.
        for lock in locks:
            lock.acquire()
        held.set()
        release.wait(30)
        for lock in reversed(locks):
            lock.release()

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)
    try:

        def child_waits() -> int:
            # The client and the topic object made before the fork, new handles: queued
            # behind the parent's live lease, then granted when the parent closes.
            with topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, wait_timeout=10) as p:
                p.send(b"child")
            return 0

        def child_new_topic() -> int:
            with client.topic("child", partitions=1).producer(AccessMode.EXCLUSIVE) as p:
                p.send(b"child")
            with client.ownership("g", "child", ttl=5) as owner:
                owner.claim("child-resource")
            return 0

        assert wait_child(fork(child_new_topic)) == 0
        pid = fork(child_waits)
        waiters = client.keys.partition("t", 0).waiters
        wait_until(lambda: raw.zcard(waiters) == 1)
        producer.close()  # the waiting child is woken and gets the partition
        assert wait_child(pid) == 0
    finally:
        release.set()
        thread.join(10)
    assert [r.value for r in topic.reader(0, 0).read()] == [b"parent", b"child"]
    assert [r.value for r in client.topic("child").reader(0, 0).read()] == [b"child"]


def test_multiprocessing_fork_children_use_the_parents_client(client: Client) -> None:
    topic = client.topic("t", partitions=4)
    with topic.producer() as parent:
        parent.send(b"parent", partition=0)
        context = multiprocessing.get_context("fork")
        procs = [context.Process(target=_send_from_child, args=(topic, p)) for p in range(1, 4)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(20)
            assert proc.exitcode == 0
        assert parent.send(b"parent again", partition=0).offset == 1
    got = {p: [r.value for r in topic.reader(p, 0).read()] for p in range(4)}
    assert got == {0: [b"parent", b"parent again"], 1: [b"c1"], 2: [b"c2"], 3: [b"c3"]}


def _send_from_child(topic: fencing.Topic, partition: int) -> None:
    with topic.producer() as producer:  # shared, beside the parent's
        producer.send(b"c%d" % partition, partition=partition)


def test_a_forked_child_never_sees_the_parents_term_as_its_own(client: Client) -> None:
    """In a forked child "the parent's handles do no I/O at all" and "the parent's leases lapse
    as if the child did not exist"; check() raises ProcessBoundError there.

    In the child, ``leadership.lost`` reads as set (the child never holds the term), at the
    latest once the parent lost it."""
    election = client.election("sched", "a", ttl=5.0)
    with election.campaign() as term:
        go_r, go_w = os.pipe()
        ans_r, ans_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.read(go_r, 1)
                try:
                    term.check()
                    checked = b"c"  # check() passed in the child: worse still
                except fencing.ProcessBoundError:
                    checked = b"p"
                except BaseException:
                    checked = b"e"
                os.write(ans_w, (b"1" if term.lost.is_set() else b"0") + checked)
            finally:
                os._exit(0)
        taker = fencing.Ownership(client, ELECTION_GROUP, "operator", 5.0, _allow_reserved=True)
        taker.claim("sched", generation=0)
        assert term.lost.wait(5)
        os.write(go_w, b"x")
        answer = os.read(ans_r, 2)
        os.waitpid(pid, 0)
        taker.close()
    election.close()
    assert answer[1:] == b"p", "check() in the child should raise ProcessBoundError"
    assert answer[:1] == b"1", "the child reads lost as unset after the parent's term ended"


def test_a_forked_child_refuses_the_parents_term_producer_and_touches_nothing(
    client: Client,
) -> None:
    """In a forked child the parent's ``leadership.producer`` refuses send(), send_async(),
    flush() (ProcessBoundError, not the term's end: the term is not the child's to end),
    ``leadership.producer()`` does too, and close() and resign() do nothing: the future the
    parent queued is not failed in the child, and the parent sends on at the term's token."""
    election = client.election("sched", "a", ttl=30.0)
    with (
        election.campaign() as term,
        term.producer(client.topic("decisions", partitions=1), linger_ms=60_000) as producer,
    ):
        producer.send(b"before")
        queued = producer.send_async(b"queued")

        def child() -> int:
            for attempt in (
                lambda: producer.send(b"child"),
                lambda: producer.send_async(b"child"),
                producer.flush,
                lambda: term.producer(client.topic("decisions")),
                term.check,
            ):
                with pytest.raises(fencing.ProcessBoundError):
                    attempt()
            producer.close()
            term.resign()
            assert not queued.done()
            return 0

        assert wait_child(fork(child)) == 0
        assert not queued.done()
        producer.flush()
        assert queued.result(timeout=5).offset == 1
        assert producer.send(b"after").epoch == term.token == 1
        term.check()
    election.close()
    values = [r.value for r in client.topic("decisions").reader(0, 0).read()]
    assert values == [b"before", b"queued", b"after"]


def test_a_consumer_in_a_forked_child_does_nothing_and_the_parent_keeps_its_partition(
    client: Client, raw: redis.Redis
) -> None:
    """In a forked child the parent's consumer refuses poll/commit (ProcessBoundError) and its
    close() releases nothing: the parent keeps its partition."""
    topic = client.topic("orders", partitions=1)
    fill(topic, 3)
    c = topic.consumer("g", "a", partitions=[0], ttl=10.0)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            for fn in (c.poll, c.commit):
                try:
                    fn()
                    code |= 1
                except fencing.ProcessBoundError:
                    pass
            c.close()
        except BaseException:
            code |= 2
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    code = os.read(r, 1)[0]
    os.waitpid(pid, 0)
    assert code == 0
    assert [rec.offset for rec in c.poll()] == [0, 1, 2]
    assert c.commit() == {0: 3}
    c.close()

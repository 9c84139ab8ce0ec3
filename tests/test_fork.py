"""Issue 11, hole 2: one identity per process across fork().

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
import traceback
from collections.abc import Callable, Iterator

import pytest
import redis

import fencing
from fencing import AccessMode, Client

from .conftest import ServerInfo
from .helpers import wait_until

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def fork(child: Callable[[], int]) -> int:
    """Fork; the child runs ``child`` and exits with its status (1 on an exception)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            signal.alarm(20)  # a hang in the child must never hang the suite
            code = child()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def wait_child(pid: int, timeout: float = 15.0) -> int:
    """The child's exit status; kills it and fails if it does not exit in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"child {pid} did not exit within {timeout}s (hung)")


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
        client._lock,
        client._keeper._cond,
        client._notifier._lock,
        topic._lock,
        topic._seen_lock,
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

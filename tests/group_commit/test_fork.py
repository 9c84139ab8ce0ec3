"""Group commit across fork(): a child forked while ``send_async()`` records are queued or a
future is being answered refuses the parent's producer (ProcessBoundError), sends none of
the parent's records, and can make and use producers of its own."""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback

import pytest

import fencing
import fencing._group_commit
import fencing.aio
from fencing._runtime.threads import primitives as threads

from ..conftest import ServerInfo
from ..support.logs import values_of
from ..support.processes import fork, wait_child


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_child_forked_with_send_async_records_queued_sends_none_of_them(
    client: fencing.Client, server: ServerInfo, namespace: str
) -> None:
    """A producer with 50 send_async() records queued (linger_ms=60000) forks. In the
    child the parent's producer refuses send(), send_async() and flush() (ProcessBoundError)
    and close() does nothing; a new producer of the child works. The parent's flush() then
    sends the 50 once: the log holds them exactly once plus the child's own record."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer(linger_ms=60_000)
    producer.send(b"first")
    futures = [producer.send_async(b"q%d" % i) for i in range(50)]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            signal.alarm(20)
            refused = 0
            for attempt in (
                lambda: producer.send(b"c"),
                lambda: producer.send_async(b"c"),
                producer.flush,
            ):
                try:
                    attempt()
                except fencing.ProcessBoundError:
                    refused += 1
            producer.close()  # nothing: the lease is the parent's
            with topic.producer() as mine:
                mine.send(b"child")
            code = 0 if refused == 3 else 2
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 15
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not any(f.done() for f in futures)  # the child sent none of them
    producer.flush()
    offsets = [f.result(timeout=5).offset for f in futures]
    producer.close()
    values = [r.value for r in topic.reader(0).read(max_records=1000)]
    assert sorted(values) == sorted([b"first", b"child"] + [b"q%d" % i for i in range(50)])
    assert [values[o] for o in offsets] == [b"q%d" % i for i in range(50)]
    assert offsets == sorted(offsets) and offsets[-1] - offsets[0] == 49


@pytest.mark.usefixtures("restore_sigint")
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.one_server
def test_a_child_forked_while_a_future_is_being_answered_can_use_send_async(
    server: ServerInfo, namespace: str
) -> None:
    """A process streams with send_async() (its sender thread answers futures all the time) and
    forks a worker; the child makes its own client and producer and sends with send_async().

    The child works (fencing/_forks.py: "a child forked while a thread of the parent held one of
    the client's locks does not hang: the client works in the child for new handles")."""
    held = threading.Event()
    release = threading.Event()

    def answering() -> None:
        with threads._MAKING:  # what a thread inside _Future.set_result holds
            held.set()
            release.wait(10)

    thread = threading.Thread(target=answering, daemon=True)
    thread.start()
    assert held.wait(5)

    def child() -> int:
        with fencing.Client.from_url(server.url, namespace=namespace) as c:
            p = c.topic("t", partitions=1).producer()
            try:
                future = p.send_async(b"from the child", partition=0)
                p.flush()
                return 0 if future.result(timeout=5).offset == 0 else 3
            finally:
                p.close()

    try:
        pid = fork(child)
    finally:
        release.set()
        thread.join(5)
    assert wait_child(pid, 10) == 0  # (a child hung on a future is killed and fails here)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_child_forked_with_futures_pending_refuses_the_parents_producer(
    client: fencing.Client,
) -> None:
    """A parent has send_async() records queued (its sender lingers) when it forks. The child
    cannot use the parent's producer (ProcessBoundError), its close() does nothing, and it
    can still make and settle futures of its own; the parent's records are then all sent
    once and every future answered."""
    topic = client.topic("t", partitions=1)
    producer = topic.producer(linger_ms=60_000, batch_size=10**9)
    try:
        futures = [producer.send_async(b"p%d" % i, partition=0) for i in range(3)]

        def child() -> int:
            try:
                producer.send_async(b"child", partition=0)
                return 3
            except fencing.ProcessBoundError:
                pass
            producer.close()  # does nothing in a child
            own = threads.new_future()
            threading.Thread(target=threads.settle, args=(own, 7), daemon=True).start()
            return 0 if own.result(timeout=5) == 7 else 4

        pid = fork(child)
        assert wait_child(pid, 10) == 0
        producer.flush()
        assert [f.result(timeout=5).offset for f in futures] == [0, 1, 2]
    finally:
        producer.close()
    assert values_of(topic) == [b"p0", b"p1", b"p2"]

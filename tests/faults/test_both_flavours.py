"""Faults, written once, run for sync and asyncio: lost replies through the proxy, a
FLUSHALL, and a writer process SIGSTOPped or SIGKILLed and taken over. Every test checks the
whole log read back from Redis with :func:`fencing.verify.verify_log`."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
import redis

import fencing
from fencing import AccessMode
from fencing.faults import Proxy
from fencing.verify import Attempt

from ..conftest import ServerInfo
from ..support.flavours import Api
from ..support.logs import verified
from ..support.wire import APPEND, COMMIT


async def test_a_lost_reply_is_resent_and_lands_once(api: Api, proxy: Proxy) -> None:
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1)
    async with topic.producer(lease_ttl=2.0) as producer:
        await producer.send(b"v0")
        rule = proxy.drop_replies(APPEND, count=1)
        md = await producer.send(b"v1")
        assert rule.hits == 1
        md2 = await producer.send(b"v2")
    assert (md.offset, md2.offset) == (1, 2)
    reader = await topic.reader(0)
    assert [r.value for r in await reader.read()] == [b"v0", b"v1", b"v2"]
    verified(
        api.url, api.namespace, "t", [Attempt(b"v1", 0, "acked", 1, md.epoch)], exclusive=False
    )


async def test_a_commit_whose_reply_was_lost_is_resent_without_state_lost(
    api: Api, proxy: Proxy
) -> None:
    """The consumer's commit checks that its last commit is still stored (G9); the resend
    of a commit whose reply was lost finds its own offset there, which is no loss."""
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1)
    async with topic.producer() as producer:
        await producer.send_batch([b"v%d" % i for i in range(6)], partition=0)
    async with topic.consumer("g", "m", [0]) as consumer:
        assert len(await consumer.poll(max_records=2)) == 2
        assert await consumer.commit() == {0: 2}
        assert len(await consumer.poll(max_records=2)) == 2
        rule = proxy.drop_replies(COMMIT, count=1)
        assert await consumer.commit() == {0: 4}
        assert rule.hits == 1
        assert await consumer.committed(0) == 4
        assert len(await consumer.poll(max_records=2)) == 2
        assert await consumer.commit() == {0: 6}


async def test_an_unknown_outcome_is_resolved_before_the_next_send(api: Api, proxy: Proxy) -> None:
    client = api.client(proxy.url_for(api.url))
    topic = client.topic("t", partitions=1)
    async with topic.producer(AccessMode.EXCLUSIVE, lease_ttl=1.0) as producer:
        rule = proxy.drop_replies(APPEND, count=None)
        with pytest.raises(fencing.OutcomeUnknown):
            await producer.send(b"maybe")
        rule.remove()
        md = await producer.send(b"after")
        resolved = producer.last_resolution
    assert resolved is not None and resolved[1] is not None  # the request had landed
    assert md.offset == 1
    reader = await topic.reader(0)
    assert [r.value for r in await reader.read()] == [b"maybe", b"after"]
    attempts = [Attempt(b"maybe", 0, "unknown"), Attempt(b"after", 0, "acked", 1, md.epoch)]
    verified(api.url, api.namespace, "t", attempts)


@pytest.mark.own_server
async def test_flushall_is_reported_as_state_lost_never_a_fresh_log(
    api: Api, fresh_server: ServerInfo
) -> None:
    client = api.client(fresh_server.url)
    topic = client.topic("t", partitions=1)
    producer = await topic.producer(AccessMode.EXCLUSIVE)
    await producer.send(b"a")
    reader = await topic.reader(0)
    assert len(await reader.read()) == 1
    raw = redis.Redis.from_url(fresh_server.url)
    raw.flushall()
    raw.close()
    with pytest.raises(fencing.StateLost):
        await producer.send(b"b")
    with pytest.raises(fencing.StateLost):
        await reader.read()
    await producer.close()


WORKER = """
import sys, time, fencing
client = fencing.Client.from_url(sys.argv[1], namespace=sys.argv[2])
topic = client.topic("t", partitions=1)
p = topic.producer(fencing.AccessMode.EXCLUSIVE, lease_ttl=1.0)
i = 0
print("ready", flush=True)
while True:
    try:
        md = p.send(f"w-{i}".encode())
        print("acked", i, md.offset, md.epoch, flush=True)
    except fencing.ProducerFenced:
        print("fenced", i, flush=True)
        sys.exit(3)
    except fencing.FencingError as exc:
        print("unknown", i, type(exc).__name__, flush=True)
    i += 1
    time.sleep(0.01)
"""


def attempts_of(lines: list[str]) -> list[Attempt]:
    out = []
    for line in lines:
        parts = line.split()
        if parts and parts[0] == "acked":
            out.append(Attempt(f"w-{parts[1]}".encode(), 0, "acked", int(parts[2]), int(parts[3])))
        elif parts and parts[0] in ("fenced", "unknown"):
            out.append(Attempt(f"w-{parts[1]}".encode(), 0, parts[0]))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGSTOP, signal.SIGKILL], ids=["sigstop", "sigkill"])
async def test_a_paused_or_killed_writer_is_taken_over_and_never_writes_again(
    api: Api, sig: signal.Signals
) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, api.url, api.namespace],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert worker.stdout is not None
        lines: list[str] = [await asyncio.to_thread(worker.stdout.readline)]
        assert lines[0].strip() == "ready"
        while len(lines) < 20:
            lines.append(await asyncio.to_thread(worker.stdout.readline))
        os.kill(worker.pid, sig)
        stopped_at = time.monotonic()
        topic = api.client().topic("t", partitions=1)
        ours: list[Attempt] = []
        async with topic.producer(
            AccessMode.WAIT_FOR_EXCLUSIVE, lease_ttl=1.0, wait_timeout=10
        ) as producer:
            assert time.monotonic() - stopped_at < 5
            for i in range(5):
                md = await producer.send(f"ours-{i}".encode())
                ours.append(Attempt(f"ours-{i}".encode(), 0, "acked", md.offset, md.epoch))
            if sig == signal.SIGSTOP:
                os.kill(worker.pid, signal.SIGCONT)
                rest, _ = await asyncio.to_thread(worker.communicate, timeout=20)
                lines += rest.splitlines()
                assert worker.returncode == 3  # its first send after waking was fenced
                assert lines[-1].startswith("fenced")
            for i in range(5, 8):
                md = await producer.send(f"ours-{i}".encode())
                ours.append(Attempt(f"ours-{i}".encode(), 0, "acked", md.offset, md.epoch))
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait()
    verified(api.url, api.namespace, "t", attempts_of(lines) + ours)

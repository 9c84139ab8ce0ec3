"""A WAIT_FOR_EXCLUSIVE producer that waits for ever rides through a server that stops
answering (a master being replaced, a restart): it tries again with backoff and takes over
once the server is back; a bounded wait still gives up at its deadline."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator

import pytest
import redis

import fencing
from fencing import AccessMode, Client

from ..conftest import ServerInfo
from ..support.polling import wait_until

WAIT = AccessMode.WAIT_FOR_EXCLUSIVE
RETRIED = "waiting for exclusivity, the server did not answer"


@pytest.fixture
def frozen(fresh_server: ServerInfo) -> Iterator[tuple[ServerInfo, list[bool]]]:
    """The server and a switch: a frozen server (SIGSTOP) answers nothing, like a master
    that is being replaced; it is always thawed at the end."""
    assert fresh_server.embedded is not None
    pid = fresh_server.embedded.process.pid
    state = [False]
    yield fresh_server, state
    if state[0]:
        os.kill(pid, signal.SIGCONT)


def freeze(server: ServerInfo, state: list[bool], on: bool) -> None:
    assert server.embedded is not None
    os.kill(server.embedded.process.pid, signal.SIGSTOP if on else signal.SIGCONT)
    state[0] = on


def retries(caplog: pytest.LogCaptureFixture) -> int:
    return sum(RETRIED in r.getMessage() for r in caplog.records)


def test_a_waiter_without_timeout_takes_over_after_the_server_comes_back(
    frozen: tuple[ServerInfo, list[bool]], namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fencing._async.lease")
    caplog.set_level(logging.WARNING, logger="fencing._sync.lease")
    server, state = frozen
    with Client.from_url(server.url, namespace=namespace) as client:
        topic = client.topic("t", partitions=1)
        holder = topic.producer(AccessMode.EXCLUSIVE, lease_ttl=1.5)
        got: list[object] = []

        def wait() -> None:
            try:
                got.append(topic.producer(WAIT, lease_ttl=1.5, wait_timeout=None))
            except BaseException as exc:  # handed to the test thread
                got.append(exc)

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        wait_until(lambda: _queued(server, namespace))
        freeze(server, state, True)
        wait_until(lambda: retries(caplog) >= 2, timeout=30)  # an outage of several attempts
        freeze(server, state, False)
        holder.close()  # (it may have renewed its lapsed lease first, or lost it to the waiter)
        thread.join(30)
        (waiter,) = got
        assert isinstance(waiter, fencing.Producer), waiter
        assert waiter.epoch(0) == 2
        assert waiter.send(b"after the outage", partition=0).offset == 0
        waiter.close()


def test_a_bounded_wait_keeps_its_deadline_through_an_outage(
    frozen: tuple[ServerInfo, list[bool]], namespace: str
) -> None:
    server, state = frozen
    with Client.from_url(server.url, namespace=namespace) as client:
        topic = client.topic("t", partitions=1)
        holder = topic.producer(AccessMode.EXCLUSIVE, lease_ttl=1.5)
        got: list[object] = []

        def wait() -> None:
            try:
                got.append(topic.producer(WAIT, lease_ttl=1.5, wait_timeout=3.0))
            except BaseException as exc:
                got.append(exc)

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        wait_until(lambda: _queued(server, namespace))
        freeze(server, state, True)
        thread.join(30)
        freeze(server, state, False)
        (refused,) = got
        assert isinstance(refused, fencing.Unavailable | fencing.OutcomeUnknown), refused
        holder.close()


def _queued(server: ServerInfo, namespace: str) -> bool:
    with redis.Redis.from_url(server.url) as raw:
        return int(raw.zcard(f"{namespace}:{{t/0}}:prod:waiters")) == 1

"""A renewal that fails for a reason the library knows (Redis unreachable, a lease lost) is
logged as one line with that reason, and tried again; only an unexpected exception (a bug)
is logged with its traceback. During an outage every lease's renewal fails at each turn: a
traceback apiece would bury the one line that matters."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

import fencing
from fencing._runtime.tasks.keeper import Keeper as TaskKeeper
from fencing._runtime.threads.keeper import Keeper as ThreadKeeper

FAILURES = [
    fencing.Unavailable("cannot reach Redis: Connection refused"),
    ZeroDivisionError("a bug"),
]


def renewal_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "renewal failed" in r.getMessage()]


def check(records: list[logging.LogRecord]) -> None:
    known, bug = records[0], records[1]
    assert "cannot reach Redis: Connection refused" in known.getMessage()
    assert known.levelno == logging.WARNING and known.exc_info is None
    assert bug.levelno == logging.ERROR and bug.exc_info is not None


def test_a_thread_keepers_known_failure_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    failures = list(FAILURES)
    done = threading.Event()

    def renew() -> bool:
        if failures:
            raise failures.pop(0)
        done.set()
        return False

    keeper = ThreadKeeper()
    keeper.schedule(0.01, renew)
    assert done.wait(10)
    keeper.close()
    check(renewal_records(caplog))


async def test_a_task_keepers_known_failure_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    failures = list(FAILURES)
    done = asyncio.Event()

    async def renew() -> bool:
        if failures:
            raise failures.pop(0)
        done.set()
        return False

    keeper = TaskKeeper()
    keeper.schedule(0.01, renew)
    await asyncio.wait_for(done.wait(), 10)
    keeper.close()
    check(renewal_records(caplog))

"""Forked children a test makes: run a function in the child, wait for its exit status.

>>> pid = fork(lambda: 0 if client.topic("t").partitions == 1 else 1)  # doctest: +SKIP
>>> assert wait_child(pid) == 0                                        # doctest: +SKIP

The child exits with the function's return value (1 on an exception, whose traceback it
prints), and arms ``alarm(20)`` so that a hang in it never hangs the suite.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable

__all__ = ["fork", "wait_child"]


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

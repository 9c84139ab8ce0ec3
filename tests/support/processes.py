"""Forked children a test makes: run a function in the child, wait for its exit status;
and killing a process with every process group its descendants made (Linux /proc).

>>> pid = fork(lambda: 0 if client.topic("t").partitions == 1 else 1)  # doctest: +SKIP
>>> assert wait_child(pid) == 0                                        # doctest: +SKIP

The child exits with the function's return value (1 on an exception, whose traceback it
prints), and arms ``alarm(20)`` so that a hang in it never hangs the suite.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import traceback
from collections.abc import Callable

__all__ = ["fork", "kill_groups", "wait_child"]


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


def _groups_below(pid: int) -> set[int]:
    """The process groups of ``pid`` and of its descendants, read from /proc."""
    parents: dict[int, list[int]] = {}
    groups: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # pid (comm) state ppid pgrp ...: comm may hold spaces, so after its ')'.
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parents.setdefault(int(fields[1]), []).append(int(entry))
        groups[int(entry)] = int(fields[2])
    found, todo = set(), [pid]
    while todo:
        at = todo.pop()
        if at in groups:
            found.add(groups[at])
        todo += parents.get(at, [])
    return found


def kill_groups(pid: int) -> None:
    """SIGKILL ``pid`` (its whole group if it leads one) and every group one of its
    descendants leads (PySpark's daemon puts its Python workers in a group of their own:
    killing the driver's group alone leaves a worker writing the task it holds), as a host
    that dies. A ``pid`` in another's group (an executor in its Spark worker's) goes alone."""
    own = os.getpgid(pid)
    groups = _groups_below(pid)
    if own != pid:
        groups.discard(own)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)

"""One background thread per client that keeps leases alive.

Handles schedule a task (a lease renewal) to run every ``interval`` seconds; the keeper
runs it off the hot path, so a send is never more than one round trip. A task that raises
is logged and tried again at its next turn; a task cancels itself by returning False.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from ... import _forks as forks
from ...errors import FencingError

log = logging.getLogger(__name__)


class Task:
    """A scheduled task; :meth:`cancel` stops it."""

    __slots__ = ("cancelled", "fn", "interval")

    def __init__(self, interval: float, fn: Callable[[], bool]) -> None:
        self.interval = interval
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        """Stop running this task (a run in progress finishes)."""
        self.cancelled = True


class Keeper:
    """Runs tasks at intervals on one daemon thread, started on the first task."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Task]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        # The parent's tasks renew the parent's leases: the child never runs them, and its
        # thread and lock are new (the parent's thread may have held the lock at the fork).
        self._heap = []
        self._cond = threading.Condition()
        self._thread = None
        self._stopped = False

    def schedule(self, interval: float, fn: Callable[[], bool]) -> Task:
        """Run ``fn`` every ``interval`` seconds (first run after one interval)."""
        task = Task(interval, fn)
        with self._cond:
            self._stopped = False
            heapq.heappush(self._heap, (time.monotonic() + interval, next(self._seq), task))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="fencing-keeper", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return task

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._stopped:
                    return
                _, _, task = heapq.heappop(self._heap)
            if task.cancelled:
                continue
            again = True
            try:
                again = task.fn()
            except FencingError as exc:  # unreachable, a lease lost: its reason is enough
                log.warning(
                    "redis-fencing: a lease renewal failed (%s); trying again next turn", exc
                )
            except Exception:
                log.exception("redis-fencing: a lease renewal failed; trying again next turn")
            if again and not task.cancelled:
                with self._cond:
                    heapq.heappush(
                        self._heap, (time.monotonic() + task.interval, next(self._seq), task)
                    )

    def close(self) -> None:
        """Stop the thread; pending tasks are dropped."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

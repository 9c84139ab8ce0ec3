"""Lease renewals in the background, as asyncio tasks (the sync flavour uses one thread).

Handles schedule a task (a lease renewal) to run every ``interval`` seconds; it runs off
the hot path, so a send is never more than one round trip. A task that raises is logged
and tried again at its next turn; a task cancels itself by returning False.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ...errors import FencingError

log = logging.getLogger(__name__)


class Task:
    """A scheduled task; :meth:`cancel` stops it."""

    __slots__ = ("cancelled", "fn", "interval", "runner")

    def __init__(self, interval: float, fn: Callable[[], Coroutine[Any, Any, bool]]) -> None:
        self.interval = interval
        self.fn = fn
        self.cancelled = False
        self.runner: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        """Stop running this task. A run in progress finishes when the task cancels itself
        (from inside its own run); from anywhere else it is cancelled where it waits."""
        self.cancelled = True
        runner = self.runner
        if runner is not None and runner is not asyncio.current_task():
            runner.cancel()


class Keeper:
    """Runs tasks at intervals, one asyncio task each, on the loop that scheduled them."""

    def __init__(self) -> None:
        self._tasks: set[Task] = set()

    def schedule(self, interval: float, fn: Callable[[], Coroutine[Any, Any, bool]]) -> Task:
        """Run ``fn`` every ``interval`` seconds (first run after one interval)."""
        task = Task(interval, fn)
        self._tasks.add(task)
        task.runner = asyncio.get_running_loop().create_task(self._run(task), name="fencing-keeper")
        return task

    async def _run(self, task: Task) -> None:
        try:
            while not task.cancelled:
                await asyncio.sleep(task.interval)
                if task.cancelled:
                    return
                try:
                    again = await task.fn()
                except FencingError as exc:  # unreachable, a lease lost: its reason is enough
                    log.warning(
                        "redis-fencing: a lease renewal failed (%s); trying again next turn", exc
                    )
                    again = True
                except Exception:
                    log.exception("redis-fencing: a lease renewal failed; trying again next turn")
                    again = True
                if not again:
                    return
        finally:
            self._tasks.discard(task)

    def close(self) -> None:
        """Cancel every task."""
        tasks, self._tasks = list(self._tasks), set()
        for task in tasks:
            task.cancel()

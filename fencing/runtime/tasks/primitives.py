"""The asyncio flavour's runtime: tasks, ``asyncio`` primitives, ``redis.asyncio``.

See :mod:`fencing.runtime` for the interface it shares with :mod:`fencing.runtime.threads`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ...errors import InvalidArgument

T = TypeVar("T")

#: What a coroutine function of the async source returns (``Later[Grant]``): a coroutine
#: here, the value itself in the sync code.
Later = Coroutine[Any, Any, T]

#: True here, False in :mod:`fencing.runtime.threads`.
IS_ASYNC = True

Event = asyncio.Event


def io_lock() -> asyncio.Lock:
    """A lock held across calls to Redis."""
    return asyncio.Lock()


class _NoLock:
    """A section without ``await`` cannot be interleaved with another task: nothing to lock."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


def state_lock() -> _NoLock:
    """A lock over a few fields, never held across I/O (a no-op under asyncio)."""
    return _NO_LOCK


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait for ``event`` up to ``timeout`` seconds (None: for ever); True if it is set."""
    if event.is_set():
        return True
    if timeout is None:
        await event.wait()
        return True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), max(0.0, timeout))
    return event.is_set()


async def base_wait(event: asyncio.Event, timeout: float | None) -> bool:
    """``asyncio.Event.wait`` itself (with a timeout), past any override of a subclass."""
    if asyncio.Event.is_set(event):
        return True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.Event.wait(event), timeout)
    return asyncio.Event.is_set(event)


async def sleep(seconds: float) -> None:
    """Sleep ``seconds``."""
    await asyncio.sleep(seconds)


def spawn(fn: Callable[[], Coroutine[Any, Any, Any]], name: str) -> asyncio.Task[Any]:
    """Run ``fn()`` as a task of the running loop; returns the task."""
    return asyncio.get_running_loop().create_task(fn(), name=name)


def current() -> object:
    """The running task (compared with what :func:`spawn` returned)."""
    return asyncio.current_task()


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    """Call a user's callback; awaits what it returns if that is awaitable."""
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def require_open(handle: Any) -> None:
    """Refuse a handle that was not opened yet (a property cannot open it under asyncio)."""
    if not getattr(handle, "_opened", False):
        name = type(handle).__name__.lower()
        raise InvalidArgument(
            f"this {name} is not open yet: await {name}.open() first (fencing.aio opens on the "
            "first awaited call, but a property cannot wait)"
        )


"""The sync flavour's runtime: threads, ``threading`` primitives, blocking sockets.

See :mod:`fencing.runtime` for the interface it shares with :mod:`fencing.runtime.tasks`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

T = TypeVar("T")

#: What a coroutine function of the async source returns, as the sync code sees it: the
#: value itself (``Later[Grant]`` is ``Grant`` here, a coroutine of it under asyncio).
Later = Annotated[T, "returned at once"]

#: False here, True in :mod:`fencing.runtime.tasks`.
IS_ASYNC = False

Event = threading.Event


def io_lock() -> threading.Lock:
    """A lock held across calls to Redis."""
    return threading.Lock()


def state_lock() -> threading.RLock:
    """A lock over a few fields, never held across I/O."""
    return threading.RLock()


def wait_event(event: threading.Event, timeout: float | None) -> bool:
    """Wait for ``event`` up to ``timeout`` seconds (None: for ever); True if it is set."""
    return event.wait(timeout)


def base_wait(event: threading.Event, timeout: float | None) -> bool:
    """``threading.Event.wait`` itself, past any override of a subclass."""
    return threading.Event.wait(event, timeout)


def cancel_mark() -> int:
    """Threads are not cancelled: always 0 (see the asyncio twin)."""
    return 0


def check_cancel(mark: int) -> None:
    """Threads are not cancelled: nothing to check (see the asyncio twin)."""


def sleep(seconds: float) -> None:
    """Sleep ``seconds``."""
    time.sleep(seconds)


def spawn(fn: Callable[[], Any], name: str) -> threading.Thread:
    """Run ``fn`` on a daemon thread; returns the thread."""
    thread = threading.Thread(target=fn, name=name, daemon=True)
    thread.start()
    return thread


def current() -> object:
    """The running thread (compared with what :func:`spawn` returned)."""
    return threading.current_thread()


def call(fn: Callable[..., T], *args: Any) -> T:
    """Call a user's callback."""
    return fn(*args)


def require_open(handle: Any) -> None:
    """Open ``handle`` if it is not (sync handles open on first use)."""
    handle.open()

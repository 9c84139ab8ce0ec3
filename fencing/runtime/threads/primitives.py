"""The sync flavour's runtime: threads, ``threading`` primitives, blocking sockets.

See :mod:`fencing.runtime` for the interface it shares with :mod:`fencing.runtime.tasks`.
"""

from __future__ import annotations

import _thread
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import InvalidStateError
from typing import Annotated, Any, TypeVar

T = TypeVar("T")

#: What a coroutine function of the async source returns, as the sync code sees it: the
#: value itself (``Later[Grant]`` is ``Grant`` here, a coroutine of it under asyncio).
Later = Annotated[T, "returned at once"]

#: False here, True in :mod:`fencing.runtime.tasks`.
IS_ASYNC = False

Event = threading.Event

#: What ``send_async`` returns: a ``concurrent.futures.Future`` here, an ``asyncio.Future``
#: under asyncio.
Future = concurrent.futures.Future


def io_lock() -> threading.Lock:
    """A lock held across calls to Redis."""
    return threading.Lock()


class Signal:
    """A wake-up for one waiter (a binary semaphore): :meth:`set` from any thread, any
    number of times; :meth:`wait` returns once it was set since the last wait, and clears
    it. The cheapest wake-up CPython has (one bare lock, no Condition)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def set(self) -> None:
        """Wake the waiter (or the next wait)."""
        with contextlib.suppress(RuntimeError):  # already set
            self._lock.release()

    def wait(self, timeout: float) -> bool:
        """Wait until set (True), or ``timeout`` seconds (False); clears it."""
        return self._lock.acquire(timeout=timeout)


def try_lock(lock: threading.Lock) -> bool:
    """Take ``lock`` if it is free, without waiting; True if taken (release it after)."""
    return lock.acquire(blocking=False)


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


def new_future() -> concurrent.futures.Future[Any]:
    """A future to settle from any thread (:func:`settle` / :func:`fail`)."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    return future


def claim_future(future: concurrent.futures.Future[Any]) -> bool:
    """Mark ``future`` running, so it can no longer be cancelled; False if it was."""
    return future.set_running_or_notify_cancel()


def settle(future: concurrent.futures.Future[Any], result: Any) -> None:
    """Give ``future`` its result (nothing if it is already done)."""
    if not future.done():
        with contextlib.suppress(InvalidStateError):  # cancelled just now by its owner
            future.set_result(result)


def fail(future: concurrent.futures.Future[Any], error: BaseException) -> None:
    """Give ``future`` its exception (nothing if it is already done)."""
    if not future.done():
        with contextlib.suppress(InvalidStateError):  # cancelled just now by its owner
            future.set_exception(error)

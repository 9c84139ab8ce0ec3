"""The sync flavour's runtime: threads, ``threading`` primitives, blocking sockets.

See :mod:`fencing._runtime` for the interface it shares with :mod:`fencing._runtime.tasks`.
"""

from __future__ import annotations

import _thread
import concurrent.futures
import contextlib
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import InvalidStateError
from typing import Annotated, Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")
H = TypeVar("H")

#: What a coroutine function of the async source returns, as the sync code sees it: the
#: value itself (``Later[Grant]`` is ``Grant`` here, a coroutine of it under asyncio).
Later = Annotated[T, "returned at once"]

#: False here, True in :mod:`fencing._runtime.tasks`.
IS_ASYNC = False

Event = threading.Event

#: What ``send_async`` returns: a ``concurrent.futures.Future`` here, an ``asyncio.Future``
#: under asyncio.
Future = concurrent.futures.Future


def opening(fn: Callable[P, H]) -> Callable[P, H]:
    """A factory that opens a handle returns the handle, which ``with`` enters (the asyncio
    twin returns an ``Opening``, to be awaited or entered)."""
    return fn


class Ready:
    """Nothing here (under asyncio, a handle that can be awaited as itself)."""

    __slots__ = ()


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
        try:
            self._lock.release()
        except RuntimeError:  # already set (a try, not contextlib.suppress: a hot path)
            return

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


def spawn(
    fn: Callable[[], Any], name: str, on_done: Callable[[], None] | None = None
) -> threading.Thread:
    """Run ``fn`` on a daemon thread; returns the thread. ``on_done()`` runs once it
    ended, whatever way."""
    target = fn
    if on_done is not None:
        done = on_done

        def target() -> Any:
            try:
                return fn()
            finally:
                done()

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def running(thread: object) -> bool:
    """Whether a thread :func:`spawn` returned is still running (False for None)."""
    return isinstance(thread, threading.Thread) and thread.is_alive()


def current() -> object:
    """The running thread (compared with what :func:`spawn` returned)."""
    return threading.current_thread()


def call(fn: Callable[..., T], *args: Any) -> T:
    """Call a user's callback."""
    return fn(*args)


def require_open(handle: Any) -> None:
    """Open ``handle`` if it is not (sync handles open on first use)."""
    handle.open()


_STATES = concurrent.futures._base  # the state names of concurrent.futures
_PENDING, _RUNNING, _FINISHED = _STATES.PENDING, _STATES.RUNNING, _STATES.FINISHED
_DONE = (_STATES.CANCELLED, _STATES.CANCELLED_AND_NOTIFIED, _FINISHED)
_CANCELLED = (_STATES.CANCELLED, _STATES.CANCELLED_AND_NOTIFIED)
#: Makes a future's Condition once, and settles futures that have none (see _Future).
#: Reentrant: a signal handler run while it is held may cancel or wait on a future too.
_MAKING = _thread.RLock()
# Never held across a fork: a child would find it taken for ever.
os.register_at_fork(
    before=_MAKING.acquire,
    after_in_parent=_MAKING.release,
    after_in_child=_MAKING._at_fork_reinit,  # type: ignore[attr-defined]
)


#: What a _Future makes on first use.
_LAZY: dict[str, Callable[[], Any]] = {
    "_condition": threading.Condition,
    "_waiters": list,
    "_done_callbacks": list,
}


class _Future(concurrent.futures.Future[Any]):
    """A ``concurrent.futures.Future`` that makes its ``threading.Condition`` only once
    somebody waits on it, adds a callback or cancels it (all go through ``_condition``).

    ``send_async()`` makes one per record and most are read only once done, so the
    Condition (with its RLock) was most of what a queued record cost. Until a Condition
    exists nobody can be waiting, so settling one then is a plain store: made and stored
    under one module lock, the two never cross. Every other path is the standard one."""

    __slots__ = (
        "_condition",
        "_done_callbacks",
        "_exception",
        "_made",
        "_result",
        "_state",
        "_waiters",
    )

    def __init__(self) -> None:
        """The base's fields but the Condition and lists (made on first use, see
        :meth:`__getattr__`); in slots, so no instance dict is made either (a future is
        made per record: fewer objects for the garbage collector to go over)."""
        self._state = _PENDING
        self._result = None
        self._exception = None
        #: Whether the Condition was made (then every path is the standard one).
        self._made = False

    def __getattr__(self, name: str) -> Any:
        # Only reached while the slot is empty: the Condition, and the lists of waiters and
        # callbacks, are made on first use (once, under a lock).
        make = _LAZY.get(name)
        if make is None:
            raise AttributeError(name)
        # Made outside the lock: it is Python code, where a signal handler (or a collection's
        # __del__) may run and touch futures too.
        made = make()
        with _MAKING:
            try:
                return object.__getattribute__(self, name)  # made meanwhile
            except AttributeError:
                if name == "_condition":
                    # Before the store: an interrupt after a call (the store) may not leave a
                    # Condition that settling would not notify.
                    self._made = True
                object.__setattr__(self, name, made)
                return made

    def done(self) -> bool:
        return self._state in _DONE

    def cancelled(self) -> bool:
        return self._state in _CANCELLED

    def running(self) -> bool:
        return self._state is _RUNNING

    def result(self, timeout: float | None = None) -> Any:
        if self._state is _FINISHED and self._exception is None:
            return self._result
        return super().result(timeout)

    def set_running_or_notify_cancel(self) -> bool:
        with _MAKING:
            if not self._made and self._state is _PENDING:
                self._state = _RUNNING
                return True
        return super().set_running_or_notify_cancel()

    def set_result(self, result: Any) -> None:
        with _MAKING:
            if not self._made and self._state in (_PENDING, _RUNNING):
                self._result = result
                self._state = _FINISHED  # after the result: a reader of the state sees it
                return
        super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        with _MAKING:
            if not self._made and self._state in (_PENDING, _RUNNING):
                self._exception = exception
                self._state = _FINISHED
                return
        super().set_exception(exception)


def new_future() -> concurrent.futures.Future[Any]:
    """A future to settle from any thread (:func:`settle` / :func:`fail`): a
    ``concurrent.futures.Future`` (one that makes its Condition only when waited on)."""
    return _Future()


def claim_future(future: concurrent.futures.Future[Any]) -> bool:
    """Mark ``future`` running, so it can no longer be cancelled; False if it was. A future
    claimed before (its entry was put back after an interrupted call) stays claimed."""
    if future.running():
        return True
    return future.set_running_or_notify_cancel()


def _notify_cancelled(future: concurrent.futures.Future[Any]) -> None:
    """A future cancelled before it was claimed is only counted done by ``wait()`` and
    ``as_completed()`` once marked so: answer it that way (nothing if it was already)."""
    if future.cancelled():
        with contextlib.suppress(RuntimeError):  # notified already
            future.set_running_or_notify_cancel()


def settle(future: concurrent.futures.Future[Any], result: Any) -> None:
    """Give ``future`` its result (nothing if it is already done)."""
    try:
        future.set_result(result)
    except InvalidStateError:  # done already (cancelled by its owner, say)
        _notify_cancelled(future)


def fail(future: concurrent.futures.Future[Any], error: BaseException) -> None:
    """Give ``future`` its exception (nothing if it is already done)."""
    try:
        future.set_exception(error)
    except InvalidStateError:  # done already (cancelled by its owner, say)
        _notify_cancelled(future)

"""The asyncio flavour's runtime: tasks, ``asyncio`` primitives, ``redis.asyncio``.

See :mod:`fencing._runtime` for the interface it shares with :mod:`fencing._runtime.threads`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import sys
from asyncio import InvalidStateError
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, Self, TypeVar

from ...errors import InvalidArgument, InvalidArgumentType

T = TypeVar("T")
P = ParamSpec("P")

#: What a coroutine function of the async source returns (``Later[Grant]``): a coroutine
#: here, the value itself in the sync code.
Later = Coroutine[Any, Any, T]

#: True here, False in :mod:`fencing._runtime.threads`.
IS_ASYNC = True

Event = asyncio.Event

#: What ``send_async`` returns: an ``asyncio.Future`` here, a ``concurrent.futures.Future``
#: in the sync flavour.
Future = asyncio.Future


class Handle(Protocol):
    """What a handle factory opens: an async context manager that enters as itself."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...


H = TypeVar("H", bound=Handle)


class Opening(Coroutine[Any, Any, H]):
    """A handle being opened: await it (``h = await topic.producer()``, then
    ``await h.close()``) or enter it (``async with topic.producer() as h``), as aiohttp's
    ``session.get(url)``. Entering it is ``async with await topic.producer() as h``: the
    handle is opened, then entered, and left (closed) when the block ends, whatever ends it.
    The threads twin of :func:`opening` returns the handle itself.

    A coroutine too (``send``, ``throw``, ``close``), so ``asyncio.create_task`` takes it.
    Awaited or entered once; one never awaited warns as a coroutine never awaited does."""

    __slots__ = ("_coro", "_handle")

    def __init__(self, coro: Coroutine[Any, Any, H]) -> None:
        self._coro = coro
        self._handle: H | None = None

    def send(self, value: Any) -> Any:
        if value is not None:  # (the event loop sends None; a value is a forgotten await)
            raise InvalidArgumentType(f"send() of an opening: {self._await_it()}")
        return self._coro.send(value)

    def throw(self, *exc: Any) -> Any:
        return self._coro.throw(*exc)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, H]:
        return self._coro.__await__()

    async def __aenter__(self) -> H:
        handle = await self._coro
        try:
            entered = await handle.__aenter__()
        except BaseException:
            # Not entered (a closed handle refused, or cancelled on the way in): never
            # left held.
            await handle.__aexit__(*sys.exc_info())
            raise
        self._handle = entered
        return entered

    async def __aexit__(self, *exc: object) -> None:
        handle = self._handle
        assert handle is not None, "left without being entered"
        self._handle = None
        await handle.__aexit__(*exc)

    if not TYPE_CHECKING:  # (a type checker still flags the handle's names on an opening)

        def __getattr__(self, name: str) -> Any:
            # Only for names an opening lacks: the handle's own (a forgotten await).
            if name.startswith("_"):
                raise AttributeError(name)
            raise AttributeError(
                f"{name!r} belongs to the handle, not its opening: {self._await_it()}"
            )

    def _await_it(self) -> str:
        """What to write instead: ``await topic.producer()`` (from the factory's name)."""
        owner, _, factory = getattr(self._coro, "__qualname__", "handle.open").rpartition(".")
        call = f"{owner.lower() or 'handle'}.{factory}()"
        return (
            f"await {call} first (h = await {call[:-1]}...)), or enter it (async with "
            f"{call[:-1]}...) as h)"
        )

    def __repr__(self) -> str:
        name = getattr(self._coro, "__qualname__", "a handle")
        return f"<fencing opening of {name}>"


def opening(fn: Callable[P, Coroutine[Any, Any, H]]) -> Callable[P, Opening[H]]:
    """Make a coroutine function that opens a handle return an :class:`Opening` of it, to
    be awaited or entered (``async with topic.producer() as p``). Its threads twin is the
    identity: a sync factory returns the handle, which ``with`` enters."""

    @functools.wraps(fn)
    def opener(*args: P.args, **kwargs: P.kwargs) -> Opening[H]:
        return Opening(fn(*args, **kwargs))

    return opener


class Ready:
    """A handle whose factory does no I/O, awaitable as the ones that open with I/O are:
    ``owner = await client.ownership(...)`` is ``client.ownership(...)`` (the threads twin
    is an empty class)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, Self]:
        yield from ()
        return self


def io_lock() -> asyncio.Lock:
    """A lock held across calls to Redis."""
    return asyncio.Lock()


class Signal:
    """A wake-up for one waiter: :meth:`set` any number of times; :meth:`wait` returns once
    it was set since the last wait, and clears it (the threads twin is a bare lock).

    A flag and, while somebody waits, a bare future of the loop: an ``asyncio.Event`` under
    ``asyncio.timeout`` cost several times as much, and every queued send waits on one.
    Timeouts are kept by one ticker per loop (:class:`_Ticker`), not a timer per wait, and
    end a wait up to ``_TICK`` seconds late. A cancelled waiter gets CancelledError as
    from any await."""

    __slots__ = ("_deadline", "_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None
        self._deadline = 0.0

    def set(self) -> None:
        """Wake the waiter (or the next wait)."""
        if not self._set:
            self._set = True
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def wait(self, timeout: float) -> bool:
        """Wait until set (True), or ``timeout`` seconds (False); clears it."""
        if not self._set:
            loop = asyncio.get_running_loop()
            ticker = getattr(loop, _TICKER, None)
            if ticker is None:
                ticker = _ticker_of(loop)
            waiter = self._waiter = loop.create_future()
            self._deadline = loop.time() + timeout
            timer = None
            if ticker is not None:
                ticker.add(self, loop)
            else:  # a loop that takes no attribute (uvloop's, say): a timer of its own
                timer = loop.call_later(max(0.0, timeout), self._expire, float("inf"))
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
                elif ticker is not None:
                    ticker.waiting.discard(self)
                self._waiter = None
        got = self._set
        self._set = False
        return got

    def _expire(self, now: float) -> bool:
        """End the wait if its time ran out (the ticker's call); True if it is over."""
        waiter = self._waiter
        if waiter is None or waiter.done():
            return True
        if now < self._deadline:
            return False
        waiter.set_result(None)
        return True


#: How often a loop's ticker looks at the signals waited on (while any is).
_TICK = 0.05


class _Ticker:
    """The timeouts of one loop's signal waits: one timer while any wait runs, every
    ``_TICK`` seconds, instead of a timer made and cancelled per wait. Kept on its loop
    (an attribute), never in a module global: the waits it holds hold their futures, which
    hold the loop, so a loop closed with waits still pending is freed with them (a cycle
    the collector takes), as it would be with a timer per wait."""

    __slots__ = ("_armed", "waiting")

    def __init__(self) -> None:
        self.waiting: set[Signal] = set()
        self._armed = False

    def add(self, signal: Signal, loop: asyncio.AbstractEventLoop) -> None:
        self.waiting.add(signal)
        if not self._armed:
            self._armed = True
            loop.call_later(_TICK, self._tick)

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for signal in [s for s in self.waiting if s._expire(now)]:
            self.waiting.discard(signal)
        if self.waiting:
            loop.call_later(_TICK, self._tick)
        else:
            self._armed = False


#: The loop attribute a loop's ticker is kept in.
_TICKER = "_fencing_ticker"
#: Loop classes that take no attribute (their waits get a timer each).
_NO_TICKER: set[type] = set()


def _ticker_of(loop: asyncio.AbstractEventLoop) -> _Ticker | None:
    """The loop's ticker, made on first use; None if the loop takes no attribute."""
    ticker: _Ticker | None = getattr(loop, _TICKER, None)
    if ticker is None and type(loop) not in _NO_TICKER:
        ticker = _Ticker()
        try:
            setattr(loop, _TICKER, ticker)
        except (AttributeError, TypeError):
            _NO_TICKER.add(type(loop))
            return None
    return ticker


async def try_lock(lock: asyncio.Lock) -> bool:
    """Take ``lock`` if it is free, without waiting for its holder; True if taken (release
    it after)."""
    if lock.locked():
        return False
    await lock.acquire()  # free: taken at once (behind any task already queued for it)
    return True


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


async def within(timeout: float | None, waiting: Coroutine[Any, Any, Any]) -> None:
    """Await ``waiting`` for up to ``timeout`` seconds (None: for ever); a timeout just ends
    the wait. Never ``asyncio.wait_for``: before Python 3.12 it can swallow a cancellation
    that arrives as the awaited thing completes, and a cancelled task would wait on."""
    try:
        async with asyncio.timeout(None if timeout is None else max(0.0, timeout)):
            await waiting
    except TimeoutError:
        pass


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait for ``event`` up to ``timeout`` seconds (None: for ever); True if it is set."""
    if not event.is_set():
        await within(timeout, event.wait())
    return event.is_set()


async def base_wait(event: asyncio.Event, timeout: float | None) -> bool:
    """``asyncio.Event.wait`` itself (with a timeout), past any override of a subclass."""
    if not asyncio.Event.is_set(event):
        await within(timeout, asyncio.Event.wait(event))
    return asyncio.Event.is_set(event)


def cancel_mark() -> int:
    """How many cancellations of the running task are pending now (see :func:`check_cancel`)."""
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


def check_cancel(mark: int) -> None:
    """Raise ``CancelledError`` if the running task was cancelled since :func:`cancel_mark`
    returned ``mark`` and nobody raised it.

    redis-py's asyncio connections await ``asyncio.wait_for`` inside every send, and before
    Python 3.12 ``wait_for`` drops a cancellation that arrives as the awaited thing
    completes: the call returns normally, the task goes on, and a cancelled waiter would
    wait on. The request did complete, so raising here means "cancelled after it
    happened", which callers already handle (a send stays pending and is resolved).
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling() > mark:
        raise asyncio.CancelledError


async def sleep(seconds: float) -> None:
    """Sleep ``seconds``."""
    await asyncio.sleep(seconds)


def spawn(
    fn: Callable[[], Coroutine[Any, Any, Any]],
    name: str,
    on_done: Callable[[], None] | None = None,
) -> asyncio.Task[Any]:
    """Run ``fn()`` as a task of the running loop; returns the task. ``on_done()`` runs
    once it ended, whatever way (even cancelled before its first step)."""
    task = asyncio.get_running_loop().create_task(fn(), name=name)
    if on_done is not None:
        task.add_done_callback(lambda _: on_done())
    return task


def running(task: object) -> bool:
    """Whether a task :func:`spawn` returned is still running (False for None)."""
    return isinstance(task, asyncio.Task) and not task.done()


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


def new_future() -> asyncio.Future[Any]:
    """A future of the running loop (:func:`settle` / :func:`fail`)."""
    return asyncio.get_running_loop().create_future()


def claim_future(future: asyncio.Future[Any]) -> bool:
    """False if ``future`` was cancelled (an asyncio future cannot be marked running: one
    cancelled later just drops its result)."""
    return not future.cancelled()


def settle(future: asyncio.Future[Any], result: Any) -> None:
    """Give ``future`` its result (nothing if it is already done)."""
    if not future.done():
        with contextlib.suppress(InvalidStateError):  # cancelled just now by its owner
            future.set_result(result)


def fail(future: asyncio.Future[Any], error: BaseException) -> None:
    """Give ``future`` its exception (nothing if it is already done)."""
    if not future.done():
        with contextlib.suppress(InvalidStateError):  # cancelled just now by its owner
            future.set_exception(error)

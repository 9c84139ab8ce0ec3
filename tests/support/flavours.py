"""One suite for both flavours: tests are written once against ``fencing.aio``; the sync
flavour runs the very same test through :class:`Sync`, which calls the sync object on a
thread for every method that is a coroutine in its asyncio twin (so concurrent tasks of a
test are concurrent threads of the sync flavour: its thread safety is exercised too).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Generator
from typing import Any

import fencing
import fencing.aio
from fencing._async.term_producer import TermProducer as AsyncTermProducer
from fencing._sync.term_producer import TermProducer

TWINS: dict[type, type] = {
    fencing.Client: fencing.aio.Client,
    fencing.Topic: fencing.aio.Topic,
    fencing.Producer: fencing.aio.Producer,
    fencing.Reader: fencing.aio.Reader,
    fencing.Consumer: fencing.aio.Consumer,
    fencing.Ownership: fencing.aio.Ownership,
    fencing.Election: fencing.aio.Election,
    fencing.Leadership: fencing.aio.Leadership,
    TermProducer: AsyncTermProducer,
}


def wrap(value: Any) -> Any:
    """A sync handle as the asyncio API shows it; anything else as it is."""
    if type(value) in TWINS:
        return Sync(value)
    if isinstance(value, threading.Event):
        return _Event(value)
    return value


def unwrap(value: Any) -> Any:
    return value._obj if isinstance(value, Sync) else value


def _unwrap_all(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: unwrap(v) for k, v in kwargs.items()}


async def _on_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    args = tuple(unwrap(a) for a in args)
    kwargs = {k: unwrap(v) for k, v in kwargs.items()}
    return wrap(await asyncio.to_thread(fn, *args, **kwargs))


class _Event:
    """A ``threading.Event`` seen as ``fencing.aio`` shows its events."""

    def __init__(self, event: threading.Event) -> None:
        self._event = event

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float | None = None) -> bool:
        return bool(await asyncio.to_thread(self._event.wait, timeout))


class _ThreadIter:
    def __init__(self, it: Any) -> None:
        self._it = iter(it)

    def __aiter__(self) -> _ThreadIter:
        return self

    async def __anext__(self) -> Any:
        done = object()
        value = await asyncio.to_thread(next, self._it, done)
        if value is done:
            raise StopAsyncIteration
        return wrap(value)

    async def aclose(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            await asyncio.to_thread(close)


class _ThreadOpening:
    """What a sync handle factory returns, as ``fencing.aio`` shows it (an ``Opening``):
    awaited, it is the handle; entered, the handle is entered, and left after the block."""

    def __init__(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._call = (fn, args, kwargs)
        self._handle: Any = None

    def __await__(self) -> Generator[Any, None, Any]:
        fn, args, kwargs = self._call
        return _on_thread(fn, *args, **kwargs).__await__()

    async def __aenter__(self) -> Any:
        self._handle = await self
        return await self._handle.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._handle.__aexit__(*exc)


class Sync:
    """A sync handle driven from a test written for the asyncio API."""

    def __init__(self, obj: Any) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_twin", TWINS[type(obj)])

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._obj, name)
        twin = inspect.getattr_static(self._twin, name, None)
        if isinstance(twin, (staticmethod, classmethod)):
            twin = twin.__func__
        if inspect.iscoroutinefunction(twin):
            return lambda *a, **k: _on_thread(value, *a, **k)
        if inspect.isasyncgenfunction(twin):
            return lambda *a, **k: _ThreadIter(value(*a, **k))
        wrapped = getattr(twin, "__wrapped__", None)
        if wrapped is not None and inspect.iscoroutinefunction(wrapped):  # a handle factory
            return lambda *a, **k: _ThreadOpening(value, a, k)
        if callable(value) and inspect.ismethod(value):
            return lambda *a, **k: wrap(value(*map(unwrap, a), **_unwrap_all(k)))
        return wrap(value)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._obj, name, value)

    async def __aenter__(self) -> Any:
        return wrap(await asyncio.to_thread(self._obj.__enter__))

    async def __aexit__(self, *exc: Any) -> Any:
        return await asyncio.to_thread(self._obj.__exit__, *exc)

    def __aiter__(self) -> _ThreadIter:
        return _ThreadIter(self._obj)

    def __await__(self) -> Generator[Any, None, Sync]:
        """A handle awaitable in ``fencing.aio`` (made with no I/O) is itself, awaited."""
        if not hasattr(self._twin, "__await__"):
            raise TypeError(f"a {self._twin.__name__} cannot be awaited in fencing.aio either")
        yield from ()
        return self

    def __repr__(self) -> str:
        return f"Sync({self._obj!r})"


class Api:
    """Makes clients of one flavour on the test server; closes them after the test."""

    def __init__(self, flavor: str, url: str, namespace: str) -> None:
        self.flavor = flavor
        self.url = url
        self.namespace = namespace
        self._clients: list[Any] = []

    @property
    def is_async(self) -> bool:
        return self.flavor == "async"

    def client(self, url: str | None = None, namespace: str | None = None, **kwargs: Any) -> Any:
        """A client of this flavour (no I/O yet)."""
        url = url or self.url
        namespace = namespace or self.namespace
        made: Any
        if self.is_async:
            made = fencing.aio.Client.from_url(url, namespace=namespace, **kwargs)
        else:
            made = Sync(fencing.Client.from_url(url, namespace=namespace, **kwargs))
        self._clients.append(made)
        return made

    async def close(self) -> None:
        for made in self._clients:
            await made.close()
        self._clients.clear()

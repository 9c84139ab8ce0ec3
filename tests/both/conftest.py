"""Runs the coroutine tests of this folder once per flavour (sync and asyncio) and server."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from ..conftest import ServerInfo
from .flavors import Api


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, server: ServerInfo, namespace: str) -> Iterator[Api]:
    """Clients of one flavour on the test server, in this test's namespace."""
    yield Api(request.param, server.url, namespace)


@pytest.fixture
def aio_api(server: ServerInfo, namespace: str) -> Iterator[Api]:
    """Clients of the asyncio flavour only (task cancellation has no sync twin)."""
    yield Api("async", server.url, namespace)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}

    async def main() -> None:
        # Every blocking call of the sync flavour takes a thread: enough for the tests'
        # concurrent tasks (the default pool has cpu + 4).
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(64))
        try:
            await pyfuncitem.obj(**kwargs)
        finally:
            for value in kwargs.values():
                if isinstance(value, Api):
                    await value.close()

    asyncio.run(main())
    return True

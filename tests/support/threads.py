"""A call run in a thread of its own, for a test that does something else meanwhile.

>>> thread, out, done = in_thread(lambda: owner.claim("r", wait=True))  # doctest: +SKIP
>>> holder.release("r"); thread.join(10)                               # doctest: +SKIP
>>> (grants,) = out                   # what it returned, or what it raised
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["in_thread"]


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any], threading.Event]:
    """Start ``fn()`` on a daemon thread. ``out`` gets what it returned, or the exception it
    raised (a BaseException too: the test reports it); ``done`` is set once it ended."""
    out: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # reported by the test
            out.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out, done

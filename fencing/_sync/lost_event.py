# GENERATED from fencing/_async/lost_event.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""``Leadership.lost``: an event that also reads as set once a deadline has passed."""

from __future__ import annotations

import time
from collections.abc import Callable

from .._runtime.threads import primitives as runtime


class LostEvent(runtime.Event):
    """An event (``threading.Event``, or ``asyncio.Event`` in ``fencing``) that also
    reads as set once ``deadline()`` (by ``time.monotonic()``) has passed, even before a
    timer got to set it (a process resumed from a pause sees it set at its very first
    look), and whose ``wait`` ends at the deadline. A look that finds the deadline passed
    calls ``expired()``, then sets the event.

    >>> lost = LostEvent(lambda: time.monotonic() + 5.0, expired=lambda: None)
    >>> lost.is_set()
    False
    """

    def __init__(self, deadline: Callable[[], float], expired: Callable[[], None]) -> None:
        super().__init__()
        self._deadline = deadline
        self._expired = expired

    def is_set(self) -> bool:
        if super().is_set():
            return True
        if time.monotonic() >= self._deadline():
            self._expired()
            super().set()
            return True
        return False

    isSet = is_set  # noqa: N815 - threading.Event's old alias

    def wait(self, timeout: float | None = None) -> bool:  # type: ignore[override, unused-ignore]
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            now = time.monotonic()
            bound = self._deadline() - now
            if end is not None:
                bound = min(bound, end - now)
            if runtime.base_wait(self, max(0.0, bound)) or self.is_set():
                return True
            if end is not None and time.monotonic() >= end:
                return False

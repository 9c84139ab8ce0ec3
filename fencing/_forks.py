"""After ``fork()``: the child's copies of the library's threads, locks and subscriptions
start afresh (handles are bound to one process; a client works in the child).

A fork copies memory, not threads. Whatever a background thread of the parent held at that
moment (the keeper's lock, the notifier's lock, a client's lock) stays held for ever in the
child, and the parent's schedule of lease renewals would be run by the child's first new
keeper thread, renewing leases the child does not own. Objects that own such state register
here; in the child, each one's ``_after_fork_in_child()`` runs before ``fork()`` returns,
while the child has only one thread.

>>> register(obj)                      # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Protocol

log = logging.getLogger(__name__)


class ForkAware(Protocol):
    """An object whose threads, locks or connections must be made afresh in a child."""

    def _after_fork_in_child(self) -> None: ...


_registered: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def register(obj: ForkAware) -> None:
    """Have ``obj._after_fork_in_child()`` run in every child forked from now on."""
    _registered.add(obj)


def _reset_in_child() -> None:
    for obj in list(_registered):
        try:
            obj._after_fork_in_child()
        except Exception:  # pragma: no cover - a reset must never break the child's fork
            log.exception("redis-fencing: resetting %r after fork failed", obj)


os.register_at_fork(after_in_child=_reset_in_child)

# GENERATED from fencing/_async/session_channels.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""How an ownership handle hears that one of its grants was severed: :class:`SessionChannels`.

A claim that severs a holder publishes ``severed <old token> <new token> <row key>`` on
that holder's session channel of the row. The channel lives in the row's hash slot, so on
a cluster the sharded message of the claim reaches the holder too. A handle listens on it,
per resource, from just before it claims the resource until it no longer holds it.
"""

from __future__ import annotations

from collections.abc import Callable

from .._grant import Grant
from .._protocol.ownership import Target
from .._runtime.threads import primitives as runtime
from .._runtime.threads.notify import Notifier, Subscription
from .holdings import Holdings

#: Called, on the notifier's thread or task, with a grant that was superseded and the token
#: that superseded it.
Told = Callable[[Grant, int], None]


class SessionChannels:
    """One session's "severed" subscriptions, one per resource it claims or holds.

    A message marks the grant superseded in ``holdings`` for good, then calls ``told``.

    >>> channels = SessionChannels(notifier, session, holdings, told=on_severed)
    >>> channels.listen(target)                  # before claiming target's resource
    >>> channels.leave(["orders/0"])       # once it is no longer held
    """

    def __init__(self, notifier: Notifier, session: str, holdings: Holdings, told: Told) -> None:
        self._notifier = notifier
        self._session = session
        self._holdings = holdings
        self._told = told
        self._lock = runtime.state_lock()
        self._subs: dict[str, Subscription] = {}

    def listen(self, target: Target) -> None:
        """Listen on this session's "severed" channel of ``target`` (once per resource)."""
        if target.resource not in self._subs:
            sub = self._notifier.subscribe(target.session_channel(self._session), self._on_message)
            with self._lock:
                self._subs[target.resource] = sub

    def leave(self, resources: list[str]) -> None:
        """Stop listening on the "severed" channels of ``resources``."""
        for resource in resources:
            with self._lock:
                sub = self._subs.pop(resource, None)
            if sub is not None:
                sub.close()

    def leave_all(self) -> None:
        """Stop listening on every channel."""
        self.leave(list(self._subs))

    def _on_message(self, data: bytes | None) -> None:
        if data is None:
            return
        parts = data.decode("utf-8", "replace").split(" ")
        if len(parts) != 4 or parts[0] != "severed":
            return
        _, old_token, new_token, key = parts
        for grant in self._holdings.supersede(key, int(old_token), int(new_token)):
            self._told(grant, int(new_token))

"""Settings fixed when a handle is made."""

from __future__ import annotations

from typing import ClassVar


class FixedSettings:
    """Mixin: the attributes named in ``_FIXED`` are set once, when the handle is made, and
    never changed. A handle hands its settings to its parts as it is made, so a later
    change would be silently ignored: it is refused instead.

    >>> producer.lease_ttl = 5.0                     # doctest: +SKIP
    AttributeError: a producer's lease_ttl is fixed when it is made: ...
    """

    #: The fixed attributes.
    _FIXED: ClassVar[frozenset[str]] = frozenset()
    #: What the handle is called in the refusal.
    _KIND: ClassVar[str] = "handle"

    def __setattr__(self, name: str, value: object) -> None:
        if name in self._FIXED and name in self.__dict__:
            kind = self._KIND
            msg = f"a {kind}'s {name} is fixed when it is made: make a new {kind} to change it"
            raise AttributeError(msg)
        super().__setattr__(name, value)

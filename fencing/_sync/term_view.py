# GENERATED from fencing/_async/term_view.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""What a term of an election knows of the election that won it (:mod:`.leadership`).

A term reads its election's settings and callbacks through :class:`ElectionView` (a
protocol, so that the term's module needs no import of the campaign's) and asks it for the
few things it needs through :class:`TermHooks`, handed over as functions.

>>> term = Leadership(election, owner, grant, sent=sent, started=started,
...                   hooks=TermHooks(check_process=..., in_own_process=..., peek=...,
...                                   publish_change=..., ended=..., fence=...,
...                                   guard=...))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .._protocol.election import LeaderInfo, RowView
from .._runtime.threads import primitives as runtime
from .metadata import TopicMetadata

#: The term (:class:`~.leadership.Leadership`): a parameter here, so that this module needs
#: no import of the term's, which imports this one.
TermT = TypeVar("TermT")


class ElectionView(Protocol[TermT]):
    """The :class:`~fencing.Election` that won a term, as the term sees it: its settings,
    and what a callback may ask of it (``term.election.leader()``...) - a protocol, so that
    a term needs no import of the campaign's module. Its callbacks (on_elected,
    on_revoked; under fencing, possibly coroutine functions) are called with the
    term."""

    name: str
    candidate_id: str
    ttl: float
    renew_deadline: float
    retry_period: float
    on_elected: Callable[[TermT], Any] | None
    on_revoked: Callable[[TermT], Any] | None
    exit_on_loss: bool

    def leader(self) -> LeaderInfo | None: ...
    def candidates(self) -> int: ...
    def observe(self, timeout: float | None = None) -> Iterator[LeaderInfo | None]: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class TermHooks(Generic[TermT]):
    """What a term asks of the election that won it, handed over as functions.

    >>> hooks = TermHooks(check_process=..., in_own_process=..., peek=..., publish_change=...,
    ...                   ended=..., fence=..., guard=...)            # doctest: +SKIP
    """

    #: Raise :class:`~fencing.ProcessBoundError` in a process forked from the election's.
    check_process: Callable[[], None]
    #: False in a process forked from the election's (the term is the parent's there).
    in_own_process: Callable[[], bool]
    #: Read the election's row by server time.
    peek: Callable[[], runtime.Later[RowView]]
    #: Tell observers of the election that its leader changed (best effort).
    publish_change: Callable[[str], runtime.Later[None]]
    #: The term ended (released, and observers told): the election forgets it.
    ended: Callable[[TermT], None]
    #: Fence every topic the election guards at the term's token, before the term is
    #: announced: True once done, False if the term ended meanwhile (see .guards).
    fence: Callable[[TermT], runtime.Later[bool]]
    #: Register a topic with the election while the term holds (its producers' first open).
    guard: Callable[[TopicMetadata], runtime.Later[None]]

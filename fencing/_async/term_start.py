"""How a term of an election starts: :func:`begin_term`, the start-up half of the callback
contract that :mod:`.leadership` carries out.

A term just granted is not yet held: its renewals and deadline timer start, every topic the
election guards is fenced at its token (a term whose topics cannot be fenced is never
announced), observers are told, and only then does ``on_elected`` run - unless the term
ended meanwhile. The term's own module ends it; this one only starts it, through the
members a term keeps for its start-up (``_start``, ``_announce``, ``_elected_returned``,
``_complete``, ``_wait_ended``).

>>> term = Leadership(election, owner, grant, sent=s, started=t, hooks=h)  # doctest: +SKIP
>>> if await begin_term(term):                                        # doctest: +SKIP
...     return term
"""

from __future__ import annotations

from .._runtime.tasks import primitives as runtime
from .leadership import Leadership


async def begin_term(term: Leadership) -> bool:
    """Start ``term``: its renewals and deadline timer run, observers are told, and
    ``on_elected`` runs under the callback contract.

    First every topic the election guards is fenced at the term's token (a term whose
    topics cannot be fenced is never announced). Returns False when the term ended before
    ``on_elected`` could start (its deadline passed, another candidate took over,
    ``close()``): never announced, never held; the campaign goes on. If ``on_elected``
    fails, or the caller is interrupted, the term ends here (released, its runners
    stopped) and the error is raised.

    >>> if await begin_term(term):                                    # doctest: +SKIP
    ...     return term                                               # the caller leads
    """
    try:
        term._start()
        if not await term._hooks.fence(term):
            # The term ended while the topics it guards were fenced: never announced.
            term._elected_returned()
            await term.resign()
            return False
        await term._hooks.publish_change(f"elected {term.token}")
        if not term._announce():
            term._elected_returned()
            await term._wait_ended()
            return False
        on_elected = term.election.on_elected
        if on_elected is not None:
            await runtime.call(on_elected, term)
    except BaseException:
        # The caller never gets this term (on_elected failed, or the campaign was
        # interrupted): it ends here, released, its runners stopped.
        if term._elected_returned():
            await term._complete(term._ended_reason(), resign=True, me=runtime.current())
        await term.resign()
        raise
    if term._elected_returned():
        await term._complete(term._ended_reason(), resign=True, me=runtime.current())
    return True

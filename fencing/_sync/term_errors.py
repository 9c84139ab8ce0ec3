# GENERATED from fencing/_async/term_errors.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""What a leader is told when its term ends: the errors of :class:`Leadership`.

Each names the election and the term's token and says what to do: stop acting as leader,
and campaign again to lead.

>>> resigned("scheduler", 8).args[0]
"the term of token 8 in election 'scheduler' was resigned: campaign again to lead"
"""

from __future__ import annotations

from .._keys import ELECTION_GROUP
from .._protocol.election import RowView
from ..errors import Fenced, LeaseExpired


def deadline_passed(
    election: str, token: int, *, late: float, renew_deadline: float, retry_period: float
) -> LeaseExpired:
    """The term ended here at its renew deadline, noticed ``late`` seconds past it."""
    if late > retry_period:
        # Noticed long after the deadline: the process (or its timer) did not run.
        why = (
            f"this process was paused (or starved) until {late:.3f}s past its renew "
            f"deadline, so the term of token {token} ended before it could renew"
        )
    else:
        why = (
            f"no renewal of the term of token {token} succeeded within "
            f"renew_deadline={renew_deadline:.3f}s (Redis unreachable or too "
            "slow), so this process stepped down before its lease could lapse by server "
            "time"
        )
    return LeaseExpired(
        f"election {election!r}: {why}. Stop acting as leader; campaign again",
        token=token,
        expired_ago=0.0,
        group=ELECTION_GROUP,
        resource=election,
    )


def lapsed(election: str, token: int, *, lapsed: float, server_clock: bool) -> LeaseExpired:
    """A renewal found the term's lease ended ``lapsed`` seconds ago by server time."""
    if server_clock:
        # Renewed within the renew deadline, which is below the ttl: only a server clock
        # that ran ahead explains it.
        why = (
            f"the Redis server's clock jumped forward: the lease of the term of token "
            f"{token} had ended by server time {lapsed:.3f}s before a renewal sent within "
            "its renew deadline, so another candidate may have been elected meanwhile"
        )
    else:
        why = (
            f"the lease of the term of token {token} had ended by server time "
            f"{lapsed:.3f}s before this process renewed it"
        )
    return LeaseExpired(
        f"election {election!r}: {why}. Stop acting as leader; campaign again",
        token=token,
        expired_ago=lapsed,
        group=ELECTION_GROUP,
        resource=election,
    )


def granted_since(election: str, token: int, reason: LeaseExpired, view: RowView) -> Fenced:
    """The term ended here (``reason``), and the row shows a later term granted since."""
    return Fenced(
        f"election {election!r}: the term of token {token} ended "
        f"({reason.args[0]}), and token {view.token} was granted since "
        f"({view.holder_label or 'no live holder now'}): stop acting as leader",
        token=token,
        holder_token=view.token,
        holder_label=view.holder_label,
        group=ELECTION_GROUP,
        resource=election,
    )


def superseded(election: str, token: int, new_token: int) -> Fenced:
    """A notification said the term's grant was superseded by ``new_token``."""
    return Fenced(
        f"election {election!r}: the term of token {token} was "
        f"superseded by token {new_token}: stop acting as leader",
        token=token,
        holder_token=new_token,
        holder_label="",
        group=ELECTION_GROUP,
        resource=election,
    )


def resigned(election: str, token: int) -> Fenced:
    """The term was given up here (resigned, the block left, the election closed)."""
    return Fenced(
        f"the term of token {token} in election {election!r} was resigned: campaign again to lead",
        token=token,
        holder_token=token,
        holder_label="",
        group=ELECTION_GROUP,
        resource=election,
    )

"""The one place the verifier reaches into a :class:`~fencing.Client` (through
:func:`~fencing._sync.context.context_of`): its driver (its own connections, which never
decode replies) and its retry budget for reads.

>>> driver, budget = driver_and_budget(client)                        # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._sync.context import context_of

if TYPE_CHECKING:
    from .._retry import RetryBudget
    from .._sync.client import Client
    from .._sync.driver import Driver


def driver_and_budget(client: Client) -> tuple[Driver, RetryBudget]:
    """The client's driver and the budget every read of the verifier retries within."""
    context = context_of(client)
    budget = context.budget_default()
    return context.driver(budget.timeout), budget

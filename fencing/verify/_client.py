"""The one place the verifier reaches into a :class:`~fencing.Client`: its driver (its own
connections, which never decode replies) and its retry budget for reads.

>>> driver, budget = driver_and_budget(client)                        # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._retry import RetryBudget
    from .._sync.client import Client
    from .._sync.driver import Driver


def driver_and_budget(client: Client) -> tuple[Driver, RetryBudget]:
    """The client's driver and the budget every read of the verifier retries within."""
    budget = client._budget_default()
    return client._driver(budget.timeout), budget

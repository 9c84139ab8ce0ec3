"""The library's own bounded retries (redis-py's are turned off).

A call is retried on connection errors and timeouts with exponential backoff and jitter,
and stops early enough that the whole budget of a call stays below the lease it protects:
the budget is spent before the next attempt would start, and each attempt is bounded by a
socket timeout below ttl/3.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.exceptions
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

#: Errors after which the same request may be sent again.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)


@dataclass(frozen=True, slots=True)
class RetryBudget:
    """How long and how often one call may be retried.

    ``timeout`` bounds each attempt (socket and connect timeouts); ``deadline`` bounds the
    whole call including backoff sleeps.

    >>> RetryBudget.for_ttl(8.0).timeout
    1.0
    """

    timeout: float
    deadline: float
    attempts: int = 5

    @classmethod
    def for_ttl(cls, ttl: float, *, cap: float = 5.0) -> RetryBudget:
        """A budget safe for a lease of ``ttl`` seconds.

        One attempt may take up to four socket timeouts (connect, send and read, and a
        NOSCRIPT reload: SCRIPT LOAD plus EVALSHA again). Attempts start only within the
        first ttl/3, and each socket step is bounded by ttl/8, so the worst case of a whole
        call is ttl/3 + 4 * ttl/8 = 5/6 of the lease.
        """
        timeout = min(cap, ttl / 8.0)
        return cls(timeout=round(timeout, 4), deadline=ttl / 3.0)

    @property
    def worst_case(self) -> float:
        """The longest a call under this budget can take (see :meth:`for_ttl`)."""
        return self.deadline + 4 * self.timeout

    def retrying(self, *, spent: float = 0.0, attempts_made: int = 0) -> Retrying:
        """A tenacity engine for what is left of this budget after ``spent`` seconds and
        ``attempts_made`` attempts (re-raises the last error when it gives up)."""
        left = max(0.0, self.deadline - spent)
        return Retrying(
            retry=retry_if_exception_type(TRANSIENT_ERRORS),
            stop=stop_after_attempt(max(1, self.attempts - attempts_made))
            | stop_before_delay(left),
            wait=wait_random_exponential(multiplier=0.02, max=max(0.02, self.deadline / 4)),
            reraise=True,
        )

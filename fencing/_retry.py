"""The library's own bounded retries (redis-py's are turned off).

A call is retried on connection errors and timeouts with exponential backoff and jitter,
and stops early enough that the whole budget of a call stays below the lease it protects:
the budget (ttl/3) is spent before the next attempt would start, and each attempt is
bounded by a socket timeout of at most ttl/8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import redis.exceptions
from tenacity import (
    AsyncRetrying,
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
    # A cluster client that could not reach any node to map the slots.
    redis.exceptions.RedisClusterException,
)


#: Socket timeouts come in steps of this ratio (see :func:`quantized_timeout`).
TIMEOUT_STEP = 2**0.25


def quantized_timeout(seconds: float) -> float:
    """The largest step of a fixed ladder (1 s times powers of 2**(1/4)) not above
    ``seconds``.

    A client keeps one connection pool per socket timeout: a timeout per distinct lease
    would make a pool per handle. Rounding down keeps every bound the timeout protects
    (a shorter timeout only gives up sooner), at most 16% below the exact value; the ladder
    has about 30 steps between 5 ms and 1 minute.

    >>> quantized_timeout(1.0), quantized_timeout(1.25), quantized_timeout(0.125)
    (1.0, 1.1892, 0.125)
    """
    if seconds <= 0:
        raise ValueError("a timeout must be positive")
    steps = math.floor(math.log(seconds, TIMEOUT_STEP) + 1e-9)
    # Never 0 (a socket timeout of 0 is non-blocking): leases start at 50 ms, so ttl/8 is
    # 6.25 ms at the least.
    return max(0.001, round(TIMEOUT_STEP**steps, 4))


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
        return cls(timeout=quantized_timeout(min(cap, ttl / 8.0)), deadline=ttl / 3.0)

    @property
    def worst_case(self) -> float:
        """The longest a call under this budget can take (see :meth:`for_ttl`)."""
        return self.deadline + 4 * self.timeout

    def retrying(self, *, spent: float = 0.0, attempts_made: int = 0) -> Retrying:
        """A tenacity engine for what is left of this budget after ``spent`` seconds and
        ``attempts_made`` attempts (re-raises the last error when it gives up)."""
        return Retrying(**self._policy(spent, attempts_made))

    def retrying_async(self, *, spent: float = 0.0, attempts_made: int = 0) -> AsyncRetrying:
        """:meth:`retrying` for asyncio (its sleeps are ``asyncio.sleep``)."""
        return AsyncRetrying(**self._policy(spent, attempts_made))

    def _policy(self, spent: float, attempts_made: int) -> dict[str, Any]:
        left = max(0.0, self.deadline - spent)
        return dict(
            retry=retry_if_exception_type(TRANSIENT_ERRORS),
            stop=stop_after_attempt(max(1, self.attempts - attempts_made))
            | stop_before_delay(left),
            wait=wait_random_exponential(multiplier=0.02, max=max(0.02, self.deadline / 4)),
            reraise=True,
        )

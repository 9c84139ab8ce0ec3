"""Checks of plain arguments shared by the handles (names live in :mod:`fencing._keys`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from ._keys import validate_resource
from ._modes import AccessMode
from ._state import ProducerState
from .errors import InvalidArgument, InvalidArgumentType


def check_int(what: str, value: object, *, minimum: int = 0) -> int:
    """``value`` if it is an int (not a bool) >= ``minimum``, else a typed error.

    >>> check_int("partition", 3)
    3
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentType(f"{what} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise InvalidArgument(f"{what} must be >= {minimum}, got {value}")
    return value


#: The largest offset a partition can reach (Lua numbers are doubles: exact to 2**53).
MAX_OFFSET = 2**53 - 1


def check_expected_offset(expected_offset: object) -> None:
    """A send's ``expected_offset``: None, or an offset a partition can reach."""
    if expected_offset is not None and check_int("expected_offset", expected_offset) > MAX_OFFSET:
        raise InvalidArgument(
            f"expected_offset {expected_offset} is beyond any offset a partition can "
            f"reach ({MAX_OFFSET})"
        )

MIN_TTL = 0.05
MAX_TTL = 7 * 24 * 3600.0
#: A waiting claim tries again at least this often (seconds), even while the holder's lease
#: runs longer: a release notification can be missed (a holder whose ACL forbids PUBLISH, a
#: pub/sub connection that dropped it), and a waiter must not then sleep out the whole lease.
RECHECK_INTERVAL = 1.0


def validate_ttl(ttl: object, name: str = "ttl") -> float:
    """Return ``ttl`` as seconds if it is a usable lease length, else raise."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise InvalidArgumentType(
            f"{name} must be a number of seconds, got {type(ttl).__name__}: pass e.g. 10.0"
        )
    if not math.isfinite(ttl) or ttl <= 0:
        raise InvalidArgument(f"{name} must be a positive number of seconds, got {ttl!r}")
    if ttl < MIN_TTL:
        raise InvalidArgument(
            f"{name}={ttl!r}s is under {MIN_TTL} seconds: leases shorter than 50 ms cannot be "
            "renewed reliably over a network"
        )
    if ttl > MAX_TTL:
        raise InvalidArgument(
            f"{name}={ttl!r}s is over {MAX_TTL:.0f} seconds (7 days): a holder that dies keeps "
            "its lease that long; pass a lease its renewals can keep (e.g. 10.0)"
        )
    return float(ttl)


def lease_ms(ttl: float) -> int:
    """A lease of ``ttl`` seconds as the scripts take it: whole milliseconds, at least 1.

    >>> lease_ms(10.0)
    10000
    """
    return max(1, round(ttl * 1000))


def resource_list(resources: object) -> list[str]:
    if isinstance(resources, str):
        return [validate_resource(resources)]
    if not isinstance(resources, Iterable) or isinstance(resources, (bytes, bytearray, dict)):
        raise InvalidArgumentType(
            f"resources must be a list of str, got {type(resources).__name__}: "
            "pass e.g. ['orders/0', 'orders/1']"
        )
    out = list(dict.fromkeys(validate_resource(r) for r in resources))
    if not out:
        raise InvalidArgument("resources must not be empty: name at least one resource")
    return out


def generation_arg(generation: object) -> int | None:
    if generation is None:
        return None
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise InvalidArgumentType(
            f"generation must be None or an int >= 0, got {type(generation).__name__}"
        )
    if generation < 0:
        raise InvalidArgument(
            f"generation must be None or an int >= 0, got {generation}: 0 resets, a positive "
            "number claims at that generation, None takes the next one"
        )
    return generation


def timeout_arg(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidArgumentType(f"timeout must be None or seconds, got {type(timeout).__name__}")
    if not math.isfinite(timeout) or timeout < 0:
        raise InvalidArgument(f"timeout must be None or >= 0 seconds, got {timeout!r}")
    return float(timeout)


#: Bounds of a topic's producer state expiry, in seconds.
MIN_STATE_TTL = 1.0
MAX_STATE_TTL = 10 * 365 * 24 * 3600.0


def validate_state_ttl(value: object) -> float:
    """``value`` as seconds if it can be a producer state expiry, else a typed error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentType(
            f"producer_state_ttl must be seconds, got {type(value).__name__}: pass e.g. 604800"
        )
    if not math.isfinite(value) or not MIN_STATE_TTL <= value <= MAX_STATE_TTL:
        why = (
            "shorter would expire an idempotent producer's state between two of its sends"
            if math.isfinite(value) and value < MIN_STATE_TTL
            else "pass seconds, e.g. 604800 (7 days, the default)"
        )
        raise InvalidArgument(
            f"producer_state_ttl must be between {MIN_STATE_TTL:g} and {MAX_STATE_TTL:g} "
            f"seconds, got {value!r}: {why}"
        )
    return float(value)


#: The message id window a topic may keep: up to a million ids per partition, for up to
#: 7 days (at least a second: judged by the server's clock in milliseconds).
MAX_MESSAGE_ID_WINDOW = 1_000_000
MAX_MESSAGE_ID_TTL = 7 * 24 * 3600.0


def message_id_window_arg(window: object, ttl: object) -> tuple[int | None, int | None]:
    """A topic's ``message_id_window`` and ``message_id_ttl`` (seconds) checked: the count,
    and the age in ms (None where not given), else a typed error.

    >>> message_id_window_arg(500, 60)
    (500, 60000)
    """
    if window is not None:
        check_int("message_id_window", window, minimum=1)
        assert isinstance(window, int)
        if window > MAX_MESSAGE_ID_WINDOW:
            raise InvalidArgument(
                f"message_id_window={window} is over the limit of {MAX_MESSAGE_ID_WINDOW} ids "
                "per partition: each id kept costs about 150 bytes of Redis memory"
            )
    ttl_ms = None
    if ttl is not None:
        seconds = seconds_arg(ttl, "message_id_ttl")
        if not 1.0 <= seconds <= MAX_MESSAGE_ID_TTL:
            raise InvalidArgument(
                f"message_id_ttl must be between 1 and {MAX_MESSAGE_ID_TTL:g} seconds (7 days), "
                f"got {ttl!r}"
            )
        ttl_ms = round(seconds * 1000)
    return window, ttl_ms


def seconds_arg(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentType(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidArgument(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def callback_arg(value: object, name: str) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise InvalidArgumentType(
            f"{name} must be a callable taking the Leadership, got {type(value).__name__}"
        )
    return value


#: The most records one read returns, and the longest a read may block (one day).
MAX_READ_RECORDS = 10_000
MAX_BLOCK_MS = 86_400_000


def read_limits(max_records: object, block_ms: object) -> tuple[int, int]:
    """``(count, block_ms)`` of a read (readers and consumers), checked; None blocks 0 ms."""
    count = check_int("max_records", max_records, minimum=1)
    if count > MAX_READ_RECORDS:
        raise InvalidArgument(f"max_records is capped at {MAX_READ_RECORDS}, got {count}")
    block = 0 if block_ms is None else check_int("block_ms", block_ms)
    if block > MAX_BLOCK_MS:
        raise InvalidArgument(f"block_ms is capped at {MAX_BLOCK_MS} (one day), got {block}")
    return count, block


def producer_args(
    topic: str,
    access_mode: object,
    *,
    wait_timeout: object,
    idempotent: object,
    resume: object,
    linger_ms: object,
    batch_size: object,
) -> None:
    """Refuse, before anything is made, the arguments of a producer that cannot work.

    >>> producer_args("orders", AccessMode.SHARED, wait_timeout=None, idempotent=True,
    ...               resume=None, linger_ms=0.0, batch_size=16384)
    """
    if isinstance(linger_ms, bool) or not isinstance(linger_ms, (int, float)):
        raise InvalidArgumentType(
            f"linger_ms must be a number of milliseconds, got {type(linger_ms).__name__}"
        )
    if not math.isfinite(linger_ms) or not 0 <= linger_ms <= 60_000:
        raise InvalidArgument(
            f"linger_ms must be between 0 and 60000 milliseconds, got {linger_ms!r}"
        )
    check_int("batch_size", batch_size, minimum=1)
    if not isinstance(idempotent, bool):
        raise InvalidArgumentType("idempotent must be a bool")
    if resume is not None:
        if not isinstance(resume, ProducerState):
            raise InvalidArgumentType(
                f"resume must be a fencing.ProducerState, got {type(resume).__name__}"
            )
        if resume.topic != topic:
            raise InvalidArgument(
                f"resume= holds the state of topic {resume.topic!r}, not {topic!r}"
            )
        if not idempotent:
            raise InvalidArgument("resume= needs an idempotent producer")
    if not isinstance(access_mode, AccessMode):
        raise InvalidArgumentType(
            f"access_mode must be a fencing.AccessMode, got {type(access_mode).__name__}"
        )


def wait_timeout_arg(wait_timeout: object) -> float | None:
    """``wait_timeout`` as seconds (None: wait for ever), else a typed error."""
    if wait_timeout is None:
        return None
    if isinstance(wait_timeout, bool) or not isinstance(wait_timeout, (int, float)):
        raise InvalidArgumentType("wait_timeout must be None or seconds")
    if not math.isfinite(wait_timeout) or wait_timeout < 0:
        raise InvalidArgument(
            f"wait_timeout must be None (wait for ever) or a finite number of seconds "
            f">= 0, got {wait_timeout!r}"
        )
    return wait_timeout

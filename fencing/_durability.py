"""Durability per handle: ``acks="leader" | "replicated" | "fsync"`` (no I/O).

After a write, the driver sends a wait on the very connection that wrote (a server counts
only that connection's writes), in the same round trip as the script:

- ``"leader"`` (default): nothing more. The primary applied it; a failover before its
  replicas copied it loses it (handles then see ``StateLost``).
- ``"replicated"``: ``WAIT <replicas> <timeout>``: at least ``replicas`` replicas (default
  1) acknowledged the write. A failover that promotes such a replica keeps it; a failover
  that promotes another one, or losing every copy at once, still can lose it (Redis's
  replication is asynchronous; WAIT "does not make Redis a strongly consistent store").
- ``"fsync"``: ``WAITAOF 1 0 <timeout>`` (Redis/Valkey 7.2+, ``appendonly yes``): the
  primary fsynced the write to its append-only file, so it survives a restart of that
  server; a failover to a replica can still lose it. The server's ``appendfsync`` decides
  when that fsync comes: ``always`` before the reply; ``everysec`` at once for a waiting
  WAITAOF on Valkey 8, but on Redis only at its once-a-second fsync, up to a second later,
  so on Redis a handle is refused at open unless its wait outlasts a second
  (:func:`fsync_refusal`); ``no`` never, and is refused.

A wait that falls short raises :class:`~fencing.NotEnoughReplicas` (an ``OutcomeUnknown``):
never a silent success.

>>> Durability.of("replicated").command
('WAIT', 1, 1000)
>>> Durability.of("leader").command is None
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from ._retry import TIMEOUT_STEP
from .errors import InvalidArgument, InvalidArgumentType, NotEnoughReplicas

Acks = Literal["leader", "replicated", "fsync"]
ACKS: tuple[str, ...] = ("leader", "replicated", "fsync")
#: The shortest fsync wait a server with ``appendfsync everysec`` is given: its fsync comes
#: once a second, seen by an event loop that wakes every 100 ms (hz 10), and the waiter is
#: woken on a later turn of that loop; with room for a busy machine.
EVERYSEC_WAIT_MS = 1400


def _everysec_advice() -> str:
    """The smallest socket_timeout and lease ttl whose handle waits EVERYSEC_WAIT_MS: the
    wait is half the socket step, min(socket_timeout, ttl / 8), rounded down to the
    timeouts' ladder (:func:`fencing._retry.quantized_timeout`)."""
    wanted = 2 * EVERYSEC_WAIT_MS / 1000
    step = TIMEOUT_STEP ** math.ceil(math.log(wanted, TIMEOUT_STEP) - 1e-9)
    return f"socket_timeout >= {math.ceil(step * 100) / 100:g} and a lease ttl >= " + (
        f"{math.ceil(step * 80) / 10:g} s"
    )


def fsync_refusal(appendfsync: str, timeout_ms: int, *, on_demand: bool = False) -> str | None:
    """Why a server with this ``appendfsync`` cannot confirm an ``acks="fsync"`` wait of
    ``timeout_ms``, or None when it can (the end of a ConfigurationError's sentence).
    ``on_demand``: the server fsyncs at once for a waiting WAITAOF under ``everysec``
    (Valkey 8); Redis answers only at its once-a-second fsync.

    >>> fsync_refusal("always", 500) is None
    True
    >>> fsync_refusal("everysec", 2000) is None
    True
    >>> fsync_refusal("everysec", 595, on_demand=True) is None
    True
    >>> fsync_refusal("everysec", 595)[:40]
    "runs with appendfsync 'everysec': it fsy"
    """
    if appendfsync == "always":
        return None
    if appendfsync == "everysec":
        if on_demand or timeout_ms >= EVERYSEC_WAIT_MS:
            return None
        return (
            "runs with appendfsync 'everysec': it fsyncs once a second, and a wait for that "
            f"fsync can take a second, while this handle waits {timeout_ms} ms (half its "
            "socket step: min(socket_timeout, lease ttl / 8)). Run CONFIG SET appendfsync "
            f"always (each write is fsynced before its reply), or give the handle a wait of "
            f"{EVERYSEC_WAIT_MS} ms or more ({_everysec_advice()}), or use acks='replicated'"
        )
    return (
        f"runs with appendfsync {appendfsync!r}: the server leaves the fsync to the "
        "operating system, and no wait ever confirms one. Run CONFIG SET appendfsync always "
        "(or everysec), or use acks='replicated' or 'leader'"
    )


@dataclass(frozen=True, slots=True)
class Durability:
    """What a handle's writes wait for (see the module docstring)."""

    acks: str = "leader"
    replicas: int = 1
    timeout_ms: int = 1000

    @classmethod
    def of(cls, acks: object, *, replicas: object = 1, timeout: object = 1.0) -> Durability:
        """Validated settings: ``timeout`` (seconds) bounds each wait."""
        if not isinstance(acks, str):
            raise InvalidArgumentType(f"acks must be a str, got {type(acks).__name__}")
        if acks not in ACKS:
            raise InvalidArgument(f"acks must be one of {', '.join(ACKS)}, got {acks!r}")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise InvalidArgument(f"ack_replicas must be an int >= 1, got {replicas!r}")
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise InvalidArgument(
                f"ack_timeout must be a positive number of seconds, got {timeout!r}"
            )
        return cls(acks, replicas, max(1, round(timeout * 1000)))

    @property
    def command(self) -> tuple[str | int, ...] | None:
        """The wait to send after a write on the same connection (None for ``"leader"``)."""
        if self.acks == "replicated":
            return ("WAIT", self.replicas, self.timeout_ms)
        if self.acks == "fsync":
            return ("WAITAOF", 1, 0, self.timeout_ms)
        return None

    def check(self, what: str, reply: Any) -> None:
        """Raise NotEnoughReplicas when the wait's ``reply`` fell short."""
        if self.acks == "replicated":
            confirmed, wanted = int(reply), self.replicas
            kind = f"{wanted} replica(s) to acknowledge it"
        else:
            confirmed, wanted = int(reply[0]), 1
            kind = "the primary to fsync it to its append-only file"
        if confirmed < wanted:
            raise NotEnoughReplicas(
                f"{what}: applied on the primary, but acks={self.acks!r} waited "
                f"{self.timeout_ms} ms for {kind} and got {confirmed}. It may not survive a "
                "failover. A resend of the same batch by an idempotent producer is safe (it "
                "is deduplicated); check the replicas (INFO replication) or the AOF",
                acks=self.acks,
                wanted=wanted,
                confirmed=confirmed,
            )

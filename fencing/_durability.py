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
  server; a failover to a replica can still lose it.

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

from .errors import InvalidArgument, InvalidArgumentType, NotEnoughReplicas

Acks = Literal["leader", "replicated", "fsync"]
ACKS: tuple[str, ...] = ("leader", "replicated", "fsync")


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

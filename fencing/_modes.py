"""What a producer is: its access mode, and a batch of unknown outcome (shared by sync and
async producers)."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field


class AccessMode(enum.Enum):
    """How a producer shares its partitions (Pulsar's PIP-68 modes, plus fencing).

    >>> producer = topic.producer(access_mode=fencing.AccessMode.EXCLUSIVE)
    >>> fencing.AccessMode("wait_for_exclusive")
    <AccessMode.WAIT_FOR_EXCLUSIVE: 'wait_for_exclusive'>
    """

    SHARED = "shared"
    EXCLUSIVE = "exclusive"
    WAIT_FOR_EXCLUSIVE = "wait_for_exclusive"
    EXCLUSIVE_WITH_FENCING = "exclusive_with_fencing"


@dataclass(frozen=True, slots=True)
class Pending:
    """A batch whose outcome is unknown (retries ran out): resolved before the next send."""

    records: int
    generation: int
    first_sequence: int
    checksum: str
    #: When the batch was first sent (time.monotonic()): a resolution long after may find
    #: the state expired, and then cannot tell "never landed" from "landed, then expired".
    sent_at: float = field(default_factory=time.monotonic)
    #: Whether it was sent as a batch never sent before (the append's fresh flag): only
    #: then can a resolution that finds no state conclude from its age that it never landed.
    fresh: bool = True

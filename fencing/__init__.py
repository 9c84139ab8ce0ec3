"""redis-fencing: Kafka- and Pulsar-grade single-writer guarantees for Redis Streams.

>>> import fencing
>>> client = fencing.Client.from_url("redis://localhost:6379/0")
>>> owner = client.ownership("journal", owner_id="host-a", ttl=10.0)
>>> grant = owner.claim(["orders/0"])["orders/0"]                    # doctest: +SKIP

The documentation (docs/: guarantees, how-to guides, the API, the failure modes) is
built with ``mkdocs``; docs/explanation/guarantees.md lists what the library keeps.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._grant import Grant
from ._modes import AccessMode
from ._record import Record, RecordMetadata
from ._state import ProducerState
from .errors import (
    CheckpointReset,
    ConfigurationError,
    DuplicateMessageId,
    DuplicateSequence,
    Fenced,
    FencingError,
    InvalidArgument,
    InvalidArgumentType,
    InvalidName,
    LeaseExpired,
    NondeterministicBatch,
    NotEnoughReplicas,
    OffsetMismatch,
    OffsetOutOfRange,
    OutcomeUnknown,
    OutOfOrderSequence,
    OwnershipConflict,
    ProcessBoundError,
    ProducerBusy,
    ProducerFenced,
    RecordTooLarge,
    SinkError,
    StaleGeneration,
    StateLost,
    Unavailable,
    UnknownProducerId,
    UnknownTopic,
    WrongKeyType,
)

if TYPE_CHECKING:
    from ._protocol.election import LeaderInfo
    from ._settings import FencingSettings
    from ._sync.client import Client
    from ._sync.consumer import Consumer
    from ._sync.election import Election
    from ._sync.leadership import Leadership
    from ._sync.ownership import Ownership
    from ._sync.producer import Producer
    from ._sync.reader import Reader
    from ._sync.topic import Topic

    __version__: str

#: The handles and where they live: loaded with the first one asked for (``fencing.Client``,
#: ``from fencing import Topic``), not by ``import fencing``.
_HANDLES = {
    "Client": "._sync.client",
    "Consumer": "._sync.consumer",
    "Election": "._sync.election",
    "LeaderInfo": "._protocol.election",
    "Leadership": "._sync.leadership",
    "Ownership": "._sync.ownership",
    "Producer": "._sync.producer",
    "Reader": "._sync.reader",
    "Topic": "._sync.topic",
}


def __getattr__(name: str) -> Any:
    """Load what a plain ``import fencing`` does not need until it is asked for.

    ``import fencing`` loads the errors, records, modes and states: what a module that only
    catches the library's errors, or a command that only prints its help, needs. The
    handles (the client, its topics, producers, readers, elections: about seventy modules
    and the retry engine) load with the first of them used; the settings model pulls in
    pydantic, and the version reads the installed package's metadata.
    """
    module = _HANDLES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value  # later lookups are plain attribute reads
        return value
    if name == "FencingSettings":
        from ._settings import FencingSettings  # noqa: PLC0415 - lazy: pydantic loads when used

        return FencingSettings
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - lazy

        try:
            return version("redis-fencing")
        except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
            return "0+unknown"
    raise AttributeError(f"module 'fencing' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "AccessMode",
    "CheckpointReset",
    "Client",
    "ConfigurationError",
    "Consumer",
    "DuplicateMessageId",
    "DuplicateSequence",
    "Election",
    "Fenced",
    "FencingError",
    "FencingSettings",
    "Grant",
    "InvalidArgument",
    "InvalidArgumentType",
    "InvalidName",
    "LeaderInfo",
    "Leadership",
    "LeaseExpired",
    "NondeterministicBatch",
    "NotEnoughReplicas",
    "OffsetMismatch",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "OutcomeUnknown",
    "Ownership",
    "OwnershipConflict",
    "ProcessBoundError",
    "Producer",
    "ProducerBusy",
    "ProducerFenced",
    "ProducerState",
    "Reader",
    "Record",
    "RecordMetadata",
    "RecordTooLarge",
    "SinkError",
    "StaleGeneration",
    "StateLost",
    "Topic",
    "Unavailable",
    "UnknownProducerId",
    "UnknownTopic",
    "WrongKeyType",
    "__version__",
]

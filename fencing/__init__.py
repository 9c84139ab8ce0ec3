"""redis-fencing: Kafka- and Pulsar-grade single-writer guarantees for Redis Streams.

>>> import fencing
>>> client = fencing.Client.from_url("redis://localhost:6379/0")
>>> owner = client.ownership("journal", owner_id="host-a", ttl=10.0)
>>> grant = owner.claim(["orders/0"])["orders/0"]                    # doctest: +SKIP

See the README for the guarantees, the API and the failure modes.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._grant import Grant
from ._modes import AccessMode
from ._protocol.election import LeaderInfo
from ._record import Record, RecordMetadata
from ._settings import FencingSettings
from ._state import ProducerState
from ._sync.client import Client
from ._sync.consumer import Consumer
from ._sync.election import Election, Leadership
from ._sync.ownership import Ownership
from ._sync.producer import Producer
from ._sync.reader import Reader
from ._sync.topic import Topic
from .errors import (
    CheckpointReset,
    ConfigurationError,
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

try:
    __version__ = version("redis-fencing")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0+unknown"

__all__ = [
    "AccessMode",
    "CheckpointReset",
    "Client",
    "ConfigurationError",
    "Consumer",
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

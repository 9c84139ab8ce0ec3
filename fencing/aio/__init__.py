"""redis-fencing for asyncio: the same names, arguments, errors and semantics as :mod:`fencing`.

Built on ``redis.asyncio``. Every call that talks to Redis is awaited; lease renewals and
waits run as tasks of the loop; notifications come through async pub/sub. The objects here
are the source the sync ones are generated from (``fencing/_async/``), so the two cannot
drift. Errors, records, states and modes are the very same classes as in :mod:`fencing`.

>>> import fencing.aio
>>> async def main() -> None:
...     async with fencing.aio.Client.from_url("redis://localhost:6379/0") as client:
...         topic = client.topic("orders", partitions=4)
...         async with topic.producer() as producer:
...             md = await producer.send(b"hello", key=b"user-1")
...         reader = await topic.reader(md.partition, md.offset)
...         records = await reader.read()

Differences that asyncio imposes, and only those:

- handles open on their first awaited call, or with ``await x.open()``; a property that
  needs an open handle (``topic.partitions``, ``producer.producer_id``, ``producer.state``)
  raises :class:`~fencing.InvalidArgument` before that, where the sync flavour opens it;
- a handle's factory (``topic.producer()``, ``topic.consumer()``, ``topic.reader()``,
  ``client.ownership()``, ``election.campaign()``) is entered, ``async with topic.producer()
  as producer`` (closed, or resigned, when the block ends), or awaited, ``producer = await
  topic.producer()`` (then ``await producer.close()``, or ``await leadership.resign()``);
- ``on_elected`` / ``on_revoked`` may be coroutine functions; ``leadership.lost`` is an
  ``asyncio.Event`` whose ``wait(timeout)`` is awaited;
- a cancelled ``send`` either happened or did not: the producer keeps the batch pending, as
  after a lost reply, and resolves it before its next send on that partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._async.client import Client
from .._async.consumer import Consumer
from .._async.election import Election
from .._async.leadership import Leadership
from .._async.ownership import Ownership
from .._async.producer import Producer
from .._async.reader import Reader
from .._async.topic import Topic
from .._grant import Grant
from .._modes import AccessMode
from .._protocol.election import LeaderInfo
from .._record import Record, RecordMetadata
from .._state import ProducerState
from ..errors import (
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
    from .._settings import FencingSettings


def __getattr__(name: str) -> Any:
    """Load the settings model (and pydantic with it) only when it is asked for."""
    if name == "FencingSettings":
        from .._settings import FencingSettings  # noqa: PLC0415 - lazy: pydantic loads when used

        return FencingSettings
    raise AttributeError(f"module 'fencing.aio' has no attribute {name!r}")


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
]

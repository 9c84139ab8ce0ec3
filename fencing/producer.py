"""Producers: ``topic.producer()``. Append records with conditional, all-or-nothing batches.

Every send is one script call (one round trip). A batch lands whole or not at all (G4);
with ``expected_offset`` it lands only at that offset (G3), otherwise nothing is written
and :class:`~fencing.OffsetMismatch` tells the real next offset.

Access modes (DESIGN section 4b) are named here; this release implements SHARED.
"""

from __future__ import annotations

import enum
import itertools
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from . import protocol
from .errors import InvalidArgument, InvalidArgumentType
from .keys import validate_name
from .process import ProcessBound
from .record import Record, RecordMetadata, to_bytes
from .validate import check_int

if TYPE_CHECKING:
    from .topic import Topic


class AccessMode(enum.Enum):
    """How a producer shares its partitions (Pulsar's PIP-68 modes)."""

    SHARED = "shared"
    EXCLUSIVE = "exclusive"
    WAIT_FOR_EXCLUSIVE = "wait_for_exclusive"
    EXCLUSIVE_WITH_FENCING = "exclusive_with_fencing"


class Producer(ProcessBound):
    """Appends records to a topic. Thread-safe; bound to the process that made it.

    >>> with topic.producer() as producer:
    ...     md = producer.send(b"v", key=b"k")                 # partition by murmur2(key)
    ...     mds = producer.send_batch([fencing.Record(b"a"), fencing.Record(b"b")],
    ...                               partition=0, expected_offset=md.offset + 1)
    """

    def __init__(self, topic: Topic, access_mode: AccessMode, name: str | None) -> None:
        if not isinstance(access_mode, AccessMode):
            raise InvalidArgumentType(
                f"access_mode must be a fencing.AccessMode, got {type(access_mode).__name__}"
            )
        if access_mode is not AccessMode.SHARED:
            raise InvalidArgument(
                f"access mode {access_mode.name} is not available in this release; "
                "use AccessMode.SHARED"
            )
        self.topic = topic
        self.access_mode = access_mode
        self.name = None if name is None else validate_name("producer name", name)
        self._lock = threading.Lock()
        self._partition_locks: list[threading.Lock] = []
        self._round_robin = itertools.count()
        self._producer_id: int | None = None
        self._epoch = 0
        self._closed = False
        self._bind_process()

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> Producer:
        """Open the topic and register the producer (done on first send otherwise)."""
        self._check_process()
        if self._closed:
            raise InvalidArgument("this producer is closed: make a new one with topic.producer()")
        if self._producer_id is None:
            with self._lock:
                if self._producer_id is None:
                    n = self.topic.partitions
                    self._partition_locks = [threading.Lock() for _ in range(n)]
                    self._producer_id = self.topic._client._allocate_producer_id()
        return self

    @property
    def producer_id(self) -> int:
        """The producer id written with every record (opens the producer)."""
        self.open()
        assert self._producer_id is not None
        return self._producer_id

    def epoch(self, partition: int) -> int:
        """The epoch this producer writes on ``partition``."""
        self.topic.partition_keys(partition)
        return self._epoch

    def close(self) -> None:
        """Close the producer. Idempotent."""
        self._closed = True

    def __enter__(self) -> Producer:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending -----------------------------------------------------------------------------

    def send(
        self,
        value: bytes | str,
        key: bytes | str | None = None,
        headers: Mapping[str, bytes | str] | None = None,
        partition: int | None = None,
        expected_offset: int | None = None,
    ) -> RecordMetadata:
        """Append one record; returns where it landed.

        Without ``partition`` the key picks one (Kafka's murmur2); records without a key go
        round-robin. ``expected_offset`` needs an explicit partition unless the topic has one.
        """
        record = Record(
            to_bytes("value", value),
            None if key is None else to_bytes("key", key),
            headers,  # type: ignore[arg-type]  # str values are encoded by Record
        )
        if partition is None:
            partition = self._choose_partition(record.key, expected_offset)
        return self.send_batch((record,), partition=partition, expected_offset=expected_offset)[0]

    def send_batch(
        self,
        records: Iterable[Record | bytes | str],
        partition: int | None = None,
        expected_offset: int | None = None,
    ) -> list[RecordMetadata]:
        """Append a batch to one partition, all or nothing, in one round trip.

        With ``expected_offset=k`` the batch lands at offsets k, k+1, ... or not at all
        (:class:`~fencing.OffsetMismatch` carries the real next offset).
        """
        self.open()
        batch = self._batch(records)
        if partition is None:
            keys = {r.key for r in batch}
            first_key = next(iter(keys))
            if self.topic.partitions == 1:
                partition = 0
            elif len(keys) == 1 and first_key is not None and expected_offset is None:
                partition = self.topic.partition_for(first_key)
            else:
                raise InvalidArgument(
                    "a batch goes to one partition: pass partition= (it is required with "
                    "expected_offset on a topic of several partitions)"
                )
        pk = self.topic.partition_keys(partition)
        if expected_offset is not None:
            check_int("expected_offset", expected_offset)
        p = pk.partition
        topic = self.topic
        with self._partition_locks[p]:
            call = protocol.topic.append(
                pk,
                batch,
                incarnation=topic.incarnation_of(p),
                seen_next=topic.seen_next(p),
                expected_offset=expected_offset,
                producer_id=str(self._producer_id),
                epoch=self._epoch,
            )
            appended = topic._driver().execute(call, topic.budget)
            topic.saw_next(p, appended.first_offset + len(batch))
        name, epoch, first = topic.name, self._epoch, appended.first_offset
        return [RecordMetadata(name, p, first + i, epoch) for i in range(len(batch))]

    # -- internals ---------------------------------------------------------------------------

    def _batch(self, records: Iterable[Record | bytes | str]) -> list[Record]:
        if isinstance(records, (bytes, str, Record)):
            raise InvalidArgumentType(
                "send_batch takes a list of records; use send() for a single record"
            )
        limits = self.topic.limits
        batch: list[Record] = []
        total = 0
        for item in records:
            record = item if isinstance(item, Record) else Record(to_bytes("record", item))
            size = record.size
            limits.check_record(size)
            total += size
            batch.append(record)
        limits.check_batch(len(batch), total)
        return batch

    def _choose_partition(self, key: bytes | None, expected_offset: int | None) -> int:
        n = self.topic.partitions
        if n == 1:
            return 0
        if expected_offset is not None:
            raise InvalidArgument(
                f"expected_offset needs an explicit partition: topic {self.topic.name!r} has "
                f"{n} partitions"
            )
        if key is not None:
            return self.topic.partition_for(key)
        return next(self._round_robin) % n

    def __repr__(self) -> str:
        return (
            f"<fencing.Producer topic={self.topic.name!r} mode={self.access_mode.name} "
            f"id={self._producer_id}>"
        )

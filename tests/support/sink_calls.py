"""The append calls a Spark sink task builds, without a server or Spark: the writer's
producer, topic metadata and ``fenced_call`` replaced by stand-ins that record each call
(partition, keys, args) and answer it as if every row were new."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from unittest import mock

from fencing._keys import Keys
from fencing._protocol.sink import SinkWritten
from fencing._protocol.topic import Writer
from fencing._record import Limits
from fencing.spark import writer as sink_writer

WRITER = Writer("pid-1", "session-1", "s", 3, 30_000, "rowinc-1")


@dataclass
class Calls:
    """The calls recorded, in the order the task made them."""

    made: list[tuple[int, tuple[Any, ...], tuple[Any, ...]]] = field(default_factory=list)

    def clear(self) -> None:
        self.made.clear()


class _Meta:
    def __init__(self, topic: str, partitions: int) -> None:
        keys = Keys("bench")
        self._parts = [keys.partition(topic, t) for t in range(partitions)]
        self.context = SimpleNamespace(keys=keys)

    def partition_keys(self, t: int) -> Any:
        return self._parts[t]

    def incarnation_of(self, t: int) -> str:
        return f"inc{t}"

    def seen_next(self, t: int) -> int:
        return 0

    def saw_next(self, t: int, next_offset: int) -> None:
        pass


@contextmanager
def recorded_calls(partitions: int, limits: Limits | None = None) -> Iterator[Calls]:
    """While open, :mod:`fencing.spark.writer` writes to a topic of ``partitions`` that
    records its calls instead of running them."""
    calls = Calls()
    meta = _Meta("orders", partitions)
    topic = SimpleNamespace(partitions=partitions, limits=limits or Limits(), name="orders")

    def fenced_call(producer: object, t: int, build: Any) -> Any:
        call = build(WRITER)
        calls.made.append((t, tuple(call.keys), tuple(call.args)))
        rows = len(call.args[12].split())
        return SinkWritten(0, rows, 0, 0)

    with (
        mock.patch.object(sink_writer, "shared_producer", lambda config: (topic, None)),
        mock.patch.object(sink_writer, "enlist", lambda *a: None),
        mock.patch.object(sink_writer, "metadata_of", lambda t: meta),
        mock.patch.object(sink_writer, "fenced_call", fenced_call),
    ):
        yield calls

# GENERATED from fencing/_async/held_calls.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""Calls a producer makes on a partition outside its queue, holding the partition: settling
a batch whose outcome is unknown (:meth:`Producer.resolve`) and the Spark sink's fenced
appends. A fence either meets ends the producer, as a send's does.

>>> held = HeldCalls(calls, durability, renew_call=lease.renew_call, fence=producer_fence)
>>> landed = held.resolve(queue)                 # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .. import _protocol as protocol
from .._durability import Durability
from .._protocol.topic import Writer
from .._record import RecordMetadata
from .._runtime.threads import primitives as runtime
from ..errors import FencingError, ProducerFenced, StateLost
from .partition_queue import PartitionQueue
from .standing import Calls, Standing

T = TypeVar("T")


class HeldCalls:
    """Runs calls on a held partition with the producer's durability; ``fence`` ends the
    producer when one of them finds it superseded or the partition's state lost."""

    def __init__(
        self,
        calls: Calls,
        durability: Durability,
        *,
        renew_call: Callable[[Standing], protocol.ScriptCall[tuple[int, int]]],
        fence: Callable[[FencingError], runtime.Later[None]],
    ) -> None:
        self._calls = calls
        self._durability = durability
        self._renew_call = renew_call
        self._fence = fence

    def resolve(self, queue: PartitionQueue) -> list[RecordMetadata] | None:
        """Settle the partition's pending batch (None when nothing is pending, or when it
        did not land). A batch that landed is also waited for under the producer's acks: a
        lease renewal written on the same connection carries the wait, which then covers
        the batch."""
        standing = queue.standing
        with queue.holding():
            if standing.pending is None:
                return None
            result = queue.sending.resolve_pending()
            if result is not None and self._durability.command is not None:
                self._run(self._renew_call(standing))
            return result

    def run(
        self,
        queue: PartitionQueue,
        build: Callable[[Writer], protocol.ScriptCall[T]],
        fenced: Callable[[], FencingError | None],
    ) -> T:
        """The call ``build(writer)`` makes, fenced by the partition's standing, holding the
        partition; ``fenced`` tells whether the producer was fenced meanwhile (then it
        raises that, sending nothing)."""
        with queue.holding():
            error = fenced()
            if error is not None:
                raise error
            return self._run(build(queue.standing.writer))

    def _run(self, call: protocol.ScriptCall[T]) -> T:
        try:
            return self._calls.execute(call, self._durability)
        except (ProducerFenced, StateLost) as exc:
            self._fence(exc)
            raise

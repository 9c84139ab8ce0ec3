"""The background sender of ``send_async`` (Kafka's sender thread): it sends what is
queued on each partition, lingering up to ``linger_ms`` for more records unless
``batch_size`` bytes wait, and :meth:`Sender.flush` sends what is queued and waits.

>>> sender = Sender(queues, status, answers, wakeup, linger_ms=5.0, batch_size=16384)
>>> sender.queued(entry.size)          # after a record was queued: starts or wakes it
>>> await sender.flush()
"""

from __future__ import annotations

import logging
import time

from .._group_commit import Entry
from .._runtime.tasks import primitives as runtime
from .partition_queue import SERVE_AFTER_OWN, PartitionQueue, settled
from .standing import Answers, Status, Wakeup

log = logging.getLogger(__name__)


class Sender:
    """Sends the ``send_async`` records of one producer, partition by partition."""

    def __init__(
        self,
        queues: dict[int, PartitionQueue],
        status: Status,
        answers: Answers,
        wakeup: Wakeup,
        *,
        linger_ms: float,
        batch_size: int,
        name: str,
    ) -> None:
        #: The producer's queues by partition (filled as it opens).
        self._queues = queues
        self._status = status
        self._answers = answers
        self._wakeup = wakeup
        self.linger_ms = linger_ms
        self.batch_size = batch_size
        self._name = name
        #: The running sender (a thread, or a task), once a record was queued.
        self.running: object | None = None

    def enqueue(self, queue: PartitionQueue, entry: Entry) -> None:
        """Queue ``entry`` on its partition for the sender; taken back at once if the
        producer was closed or fenced since its caller checked."""
        queue.enqueue(entry)
        if self._status.closed or self._status.fenced is not None:
            queue.withdraw(entry)  # close() or a fence came since the caller's check
        self.queued(entry.size)

    def queued(self, size: int) -> None:
        """A record of ``size`` bytes was queued: start the sender, or wake it unless it
        lingers short of ``batch_size``."""
        if self.running is None:
            self.running = runtime.spawn(self._run, self._name)
        wakeup = self._wakeup
        wakeup.queued_bytes += size
        if not wakeup.event.is_set() and (
            not wakeup.lingering or wakeup.queued_bytes >= self.batch_size
        ):  # (set means: the sender has yet to look at the queues)
            wakeup.set()

    async def flush(self) -> None:
        """Send every record queued and wait until each is answered (errors go to their
        futures)."""
        self._wakeup.flushing = True
        try:
            for queue in list(self._queues.values()):
                mark = queue.last_unsettled()
                # What was queued before this flush began is answered when it returns
                # (a streamer that keeps queueing cannot keep it going). The partition is
                # held even with nothing queued: a call in flight may carry the last records.
                async with queue.holding():
                    while mark is not None and queue.queue and not settled(mark):
                        await queue.sending.send_next()
            self._answers.deliver()  # (waits for a delivery under way in another thread)
        finally:
            self._wakeup.flushing = False

    async def _run(self) -> None:
        """Send what send_async() queued, partition by partition, until the producer
        closes. It lets each partition go every few calls, so flush(), resolve() and
        callers of send() are never starved by it."""
        status, wakeup = self._status, self._wakeup
        while True:
            if not any(q.queue for q in list(self._queues.values())):
                if status.closed or status.fenced is not None:
                    return
                await runtime.wait_event(wakeup.event, None)
                wakeup.event.clear()
            if self.linger_ms > 0 and not wakeup.flushing and not status.closed:
                wakeup.lingering = True
                try:
                    await self._linger()  # each batch waits for more, unless batch_size is met
                finally:
                    wakeup.lingering = False
            wakeup.queued_bytes = 0  # what is queued now goes in the calls below
            for queue in list(self._queues.values()):
                if not queue.queue:
                    continue
                try:
                    async with queue.holding():
                        for _ in range(SERVE_AFTER_OWN):
                            if not queue.queue:
                                break
                            await queue.sending.send_next()
                except Exception:  # pragma: no cover - send_next answers every entry
                    log.exception("redis-fencing: the sender %s failed", self._name)

    async def _linger(self) -> None:
        """Wait up to ``linger_ms`` for more records, unless ``batch_size`` bytes wait
        (the send_async() that queues them wakes the sender)."""
        status, wakeup = self._status, self._wakeup
        deadline = time.monotonic() + self.linger_ms / 1000.0
        while not wakeup.flushing and not status.closed:
            left = deadline - time.monotonic()
            if wakeup.queued_bytes >= self.batch_size or left <= 0:
                return
            wakeup.event.clear()
            if wakeup.queued_bytes >= self.batch_size:
                return  # (reached between the check and the clear: its wake-up is gone)
            await runtime.wait_event(wakeup.event, left)

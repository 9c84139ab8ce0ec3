"""A term's producers: ``leadership.producer(topic)``, whose right to write is the term.

Their epoch on every partition is the term's token, and the topic is guarded by the
election (:mod:`.guards`): every later term fences it before its campaign returns, so no
record of this term lands after that. Locally, a send after the term ended here (its renew
deadline passed, it was superseded or resigned) is refused without a round trip, and the
term's producers end before ``on_revoked`` runs: closed (flushed) on a resign, fenced with
the term's end (their queued ``send_async`` futures fail with it) on a loss.

>>> async with election.campaign() as leadership:
...     async with leadership.producer(topic) as producer:
...         await producer.send(b"decision")
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from typing import Any

from .. import _protocol as protocol
from .._group_commit import Entry
from .._keys import PartitionKeys
from .._modes import AccessMode
from .._record import RecordMetadata
from .._runtime.tasks import primitives as runtime
from ..errors import FencingError
from .lease import Lease
from .metadata import TopicFace, TopicMetadata
from .producer import Producer

log = logging.getLogger(__name__)


class TermProducers:
    """What a term's producers know of their term, and the producers it made (so that the
    term ends them before ``on_revoked``). Made by the term; never built by hand."""

    def __init__(
        self,
        election: str,
        token: int,
        lost: runtime.Event,
        ended: Callable[[], FencingError],
        guard: Callable[[TopicMetadata], runtime.Later[None]],
    ) -> None:
        self.election = election
        self.token = token
        #: Set once the term ended here (or its renew deadline passed).
        self.lost = lost
        #: Why the term ended, as known here (no round trip).
        self.ended = ended
        #: Registers a topic with the election while the term holds (see .guards).
        self.guard = guard
        self._lock = runtime.state_lock()
        self._producers: list[TermProducer] = []
        self._closed = False

    def admit(self, producer: TermProducer) -> None:
        """Count ``producer`` among the term's; refused once the term ended."""
        with self._lock:
            if not self._closed and not self.lost.is_set():
                self._producers.append(producer)
                return
        raise self.ended()

    async def end(self, reason: FencingError, *, resign: bool) -> None:
        """End every producer of the term: closed (flushed first) on a resign, fenced with
        ``reason`` on a loss (nothing more is sent)."""
        with self._lock:
            self._closed = True
            producers, self._producers = self._producers, []
        for producer in producers:
            if not resign:
                producer.term_ended(reason)
                continue
            try:
                await producer.close()
            except FencingError as exc:
                log.warning("redis-fencing: closing a producer of a term: %s", exc)


class _TermLease(Lease):
    """The lease of a term's producer: opened in mode 'term', at the term's token."""

    def __init__(self, seat: TermProducers, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._seat = seat

    def _open_call(
        self, pk: PartitionKeys, mode: str, wgen: int | None, label: str, seen: str = ""
    ) -> protocol.ScriptCall[protocol.producer.Opened]:
        return protocol.guards.term_open(
            pk,
            session=self.session,
            label=label,
            ttl_ms=self.ttl_ms,
            new_incarnation=secrets.token_hex(8),
            partition_incarnation=self._meta.incarnation_of(pk.partition),
            election=self._seat.election,
            token=self._seat.token,
        )


class TermProducer(Producer):
    """A producer bound to one term of an election. Made by
    :meth:`Leadership.producer`; never built by hand.

    It sends as any producer does (idempotence, acks, linger, batches); its epoch on every
    partition is the term's token. Once the term ends it is fenced (or closed, on a
    resign): sends raise the term's end (:class:`~fencing.LeaseExpired` past the renew
    deadline, :class:`~fencing.Fenced` once superseded) without a round trip, and a send
    the server refuses raises :class:`~fencing.ProducerFenced` naming the later token.

    >>> async with leadership.producer(topic) as producer:
    ...     await producer.send(b"decision")
    """

    def __init__(
        self,
        seat: TermProducers,
        topic: TopicFace,
        *,
        lease_ttl: float,
        idempotent: bool,
        acks: str,
        linger_ms: float,
        batch_size: int,
    ) -> None:
        super().__init__(
            topic,
            AccessMode.EXCLUSIVE,
            lease_ttl=lease_ttl,
            idempotent=idempotent,
            acks=acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
        )
        self._seat = seat
        self._lease = _TermLease(
            seat,
            self._context,
            self._meta,
            self._calls,
            status=self._status,
            session=self.session,
            access_mode=self.access_mode,
            name=None,
            lease_ttl=self.lease_ttl,
            wait_timeout=None,
        )

    @property
    def token(self) -> int:
        """The token of the term, which is this producer's epoch on every partition.

        >>> producer.token == leadership.token == producer.epoch(0)      # doctest: +SKIP
        True
        """
        return self._seat.token

    async def open(self) -> TermProducer:
        """Guard the topic with the election (first use), then open every partition at
        the term's token. Refused once the term ended here.

        >>> producer = await leadership.producer(topic)                 # opens
        """
        self._check_process()
        if self._status.opened or self._status.closed:
            await super().open()  # nothing more to do, or refused as closed
            return self
        seat = self._seat
        seat.admit(self)
        await self._meta.open()
        await seat.guard(self._meta)
        await super().open()
        if seat.lost.is_set():
            self.term_ended(seat.ended())
        return self

    async def __aenter__(self) -> TermProducer:
        return await self.open()

    def term_ended(self, reason: FencingError) -> None:
        """The term ended by a loss: fenced for good with ``reason`` at once, without a
        round trip (queued sends fail with it; nothing more is sent or renewed)."""
        status = self._status
        if status.fenced is not None or status.closed or not self._in_own_process():
            return  # (in a forked child the producer is the parent's: nothing is touched)
        status.fenced = reason
        if self._renewal is not None:
            self._renewal.cancel()
        for queue in list(self._queues.values()):
            queue.sending.fail_all(reason)
        self._wakeup.set()
        self._answers.deliver()

    def _check_term(self) -> None:
        """Refused at once once the term ended here. In a forked child, refused as the
        parent's handle first: the term reads as ended there, but it is not the child's
        to end, and the producer's queued sends are the parent's."""
        self._check_process()
        if self._seat.lost.is_set() and self._status.opened:
            self.term_ended(self._seat.ended())

    async def _send(self, entry: Entry, partition: int) -> list[RecordMetadata]:
        self._check_term()
        return await super()._send(entry, partition)

    async def send_async(self, *args: Any, **kwargs: Any) -> runtime.Future[RecordMetadata]:
        """As :meth:`Producer.send_async`; refused once the term ended here.

        >>> future = await producer.send_async(b"v")
        """
        self._check_term()
        return await super().send_async(*args, **kwargs)

    def __repr__(self) -> str:
        return (
            f"<fencing.TermProducer topic={self.topic.name!r} election="
            f"{self._seat.election!r} token={self._seat.token} session={self.session[:8]}…>"
        )

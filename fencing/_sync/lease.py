# GENERATED from fencing/_async/lease.py by tools/unasync.py: do not edit.
# Edit the async source, then run `python tools/unasync.py` (CI checks this file).
"""A producer's lease on each partition: registration in its access mode (Pulsar's),
the WAIT_FOR_EXCLUSIVE queue, renewals, and leaving.

- ``SHARED``: many producers append; refused while an exclusive producer or a waiter
  lives; fenced once an exclusive producer moves the epoch.
- ``EXCLUSIVE``: refused at once (:class:`~fencing.ProducerBusy`) while any other producer
  lives; otherwise epoch + 1 and nobody else may append.
- ``WAIT_FOR_EXCLUSIVE``: queues (FIFO, each waiter holding its own lease) until it can be
  exclusive; woken by pub/sub when the holder closes, or when its lease lapses.
- ``EXCLUSIVE_WITH_FENCING``: always takes over: epoch + 1; the holder, the shared
  producers and the waiters are fenced.

>>> lease = Lease(context, meta, calls, access_mode=AccessMode.EXCLUSIVE, ...)
>>> standing = lease.register(pk, deadline, pid_opened, pid)
>>> lease.renew(standing)                    # every ttl/3, from the keeper
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from collections.abc import Iterable

from .. import _protocol as protocol
from .._keys import PartitionKeys
from .._modes import AccessMode
from .._protocol.producer import OPEN_MODES
from .._protocol.topic import Writer
from .._runtime.threads import primitives as runtime
from .._runtime.threads.notify import Subscription
from .._telemetry import LeaseMeter, outcome_of
from .._validate import lease_ms
from ..errors import (
    FencingError,
    OutcomeUnknown,
    ProducerBusy,
    ProducerFenced,
    StateLost,
    Unavailable,
    UnknownTopic,
)
from .context import Context
from .metadata import TopicMetadata
from .standing import Calls, Standing, Status

log = logging.getLogger(__name__)

#: How long a waiter pauses while a delete checks whether its topic is in use (ms).
DELETE_PAUSE_MS = 50
#: A waiter's pauses between attempts while the server does not answer (s): doubled from
#: the first up to the most.
_OUTAGE_FIRST_PAUSE = 0.1
_OUTAGE_MAX_PAUSE = 5.0


class Lease:
    """The leases of one producer object (its session) on a topic's partitions."""

    def __init__(
        self,
        context: Context,
        meta: TopicMetadata,
        calls: Calls,
        *,
        status: Status,
        session: str,
        access_mode: AccessMode,
        name: str | None,
        lease_ttl: float,
        wait_timeout: float | None,
    ) -> None:
        self._context = context
        self._meta = meta
        self._calls = calls
        self._status = status
        self.session = session
        self.access_mode = access_mode
        self.name = name
        self.lease_ttl = lease_ttl
        self.wait_timeout = wait_timeout
        self.ttl_ms = lease_ms(lease_ttl)
        #: Set once every partition was left (an interrupted release can run again).
        self.released = False
        #: The subscription an open() waiting in a queue sleeps on (close() wakes it).
        self._wait_sub: Subscription | None = None
        #: The producer's lease instruments.
        self.meter = LeaseMeter("producer")
        #: Per partition, when the lease ends by this producer's clock (time.monotonic()).
        self._due: dict[int, float] = {}
        self._clock_warned = False

    # -- registration ------------------------------------------------------------------------

    def register(
        self,
        pk: PartitionKeys,
        deadline: float | None,
        pid_opened: protocol.producer.PidOpened,
        pid: int,
    ) -> Standing:
        """Register on ``pk`` in the access mode (waits in WAIT_FOR_EXCLUSIVE, up to
        ``deadline``); the standing of ``pid_opened`` there."""
        mode = OPEN_MODES[self.access_mode.name]
        label = self.name or f"producer-{pid}"
        call = self._open_call(pk, mode, None, label)
        try:
            opened = self._calls.execute(call)
            if opened.status == "waiting":
                queued = time.monotonic()
                opened = self._wait(pk, opened, deadline, label)
                self.meter.handed_over(time.monotonic() - queued)
        except BaseException as exc:
            if not isinstance(exc, FencingError) or isinstance(exc, OutcomeUnknown):
                # Interrupted (a cancelled task, KeyboardInterrupt) or a lost reply: the
                # open may have registered this session in any of the three ways. Leave
                # them all, or a queue entry or a lease would outlive the producer.
                for left_mode, epoch in (("w", 0), ("s", 0), ("x", -1)):
                    self.leave(pk, left_mode, epoch)
            raise
        writer = Writer(
            producer_id=str(pid_opened.pid),
            session=self.session,
            mode="s" if opened.status == "shared" else "x",
            epoch=opened.epoch,
            ttl_ms=self.ttl_ms,
            row_incarnation=opened.incarnation,
        )
        self._due[pk.partition] = time.monotonic() + self.lease_ttl
        return Standing(
            pk,
            writer,
            pid_opened.pid,
            pid_opened.generation,
            pid_opened.next_sequence,
            floor=pid_opened.written_next,
        )

    def _open_call(
        self, pk: PartitionKeys, mode: str, wgen: int | None, label: str, seen: str = ""
    ) -> protocol.ScriptCall[protocol.producer.Opened]:
        return protocol.producer.producer_open(
            pk,
            session=self.session,
            label=label,
            mode=mode,
            ttl_ms=self.ttl_ms,
            new_incarnation=secrets.token_hex(8),
            seen_incarnation=seen,
            wgen=wgen,
            session_channel_prefix=pk.session_prefix,
            partition_incarnation=self._meta.incarnation_of(pk.partition),
            named=self.name is not None,
        )

    def _wait(
        self,
        pk: PartitionKeys,
        opened: protocol.producer.Opened,
        deadline: float | None,
        label: str,
    ) -> protocol.producer.Opened:
        # Queued. Each attempt also renews this waiter's own lease, so attempts come at
        # least every ttl/3; between them sleep until the lease in the way ends (server
        # time, told by the script) or a release notification arrives.
        wgen, inc = opened.wgen, opened.incarnation
        topic = self._meta.name
        outage = _OUTAGE_FIRST_PAUSE  # the pause after a failed attempt, doubled each time
        try:
            with self._context.notifier.subscribe(pk.released) as sub:
                self._wait_sub = sub
                while True:
                    if self._status.closed:
                        raise ProducerBusy(
                            f"partition {pk.partition} of topic {topic!r}: the "
                            "producer was closed while it waited",
                            topic=topic,
                            partition=pk.partition,
                            reason="closed",
                            remaining=0.0,
                        )
                    call = self._open_call(pk, "wait", wgen, label, inc)
                    try:
                        opened = self._calls.execute(call)
                    except (Unavailable, OutcomeUnknown) as exc:
                        # The server is away (a master being replaced, a restart): a
                        # waiter rides through it, trying again with backoff; its open is
                        # safe to repeat. A bounded wait gives up at its deadline.
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            raise
                        log.warning(
                            "redis-fencing: %s partition %d: waiting for exclusivity, the "
                            "server did not answer (%s); trying again in %.1fs",
                            topic,
                            pk.partition,
                            exc,
                            outage,
                        )
                        # (not woken early: the notifier's reconnects wake it too)
                        runtime.sleep(outage if left is None else min(outage, left))
                        outage = min(2 * outage, _OUTAGE_MAX_PAUSE)
                        continue
                    except UnknownTopic as exc:
                        if not exc.deleting:
                            raise
                        # A delete is checking whether the topic is in use (this waiter
                        # is): it is refused and the waiter goes on, or it removes the
                        # partition and the next attempt raises StateLost.
                        opened = dataclasses.replace(
                            opened, status="waiting", remaining_ms=DELETE_PAUSE_MS
                        )
                    outage = _OUTAGE_FIRST_PAUSE
                    if opened.status != "waiting":
                        return opened
                    pause = min(opened.remaining_ms / 1000.0 + 0.002, self.lease_ttl / 3.0)
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise ProducerBusy(
                                f"partition {pk.partition} of topic {topic!r}: still "
                                f"queued (position {opened.position}) after wait_timeout="
                                f"{self.wait_timeout}s",
                                topic=topic,
                                partition=pk.partition,
                                reason="waiting",
                                remaining=opened.remaining_ms / 1000.0,
                            )
                        pause = min(pause, left)
                    sub.wait(pause)
        except BaseException:
            self.leave(pk, "w", 0)
            raise
        finally:
            self._wait_sub = None

    def wake_waiter(self) -> None:
        """Wake an open() waiting in the queue now, not at its next turn (it gives up)."""
        waiting = self._wait_sub
        if waiting is not None:
            waiting.wake()

    # -- renewals ----------------------------------------------------------------------------

    def renew_all(self, standings: Iterable[Standing]) -> FencingError | None:
        """Renew the lease on every partition; the error that fenced it, if one did (the
        rest are not tried then). An unreachable server is logged: tried again next turn."""
        meter = self.meter
        for standing in standings:
            sent = time.monotonic()
            try:
                _, lapsed_ms = self._calls.execute(self.renew_call(standing))
            except (ProducerFenced, StateLost) as exc:
                meter.renewed(outcome_of(exc), time.monotonic() - sent)
                return exc
            except Unavailable:
                meter.renewed("unavailable", time.monotonic() - sent)
                log.warning(
                    "redis-fencing: renewing %s partition %d failed; trying again",
                    self._meta.name,
                    standing.pk.partition,
                )
            else:
                received = time.monotonic()
                meter.renewed("ok", received - sent)
                due, self._due[standing.pk.partition] = (
                    self._due.get(standing.pk.partition),
                    (sent + self.lease_ttl),
                )
                if lapsed_ms > 0:
                    self._lapsed(standing.pk.partition, lapsed_ms, received < (due or 0.0))
        return None

    def _lapsed(self, partition: int, lapsed_ms: int, server_clock: bool) -> None:
        """A renewal found the lease already ended by server time. Its reply came before the
        lease's end by this producer's own clock: the server's clock jumped forward (an NTP
        step, a migrated VM), ending every lease on it at once; otherwise the producer was
        late (paused, unreachable). Writes stay safe either way: the epoch check fences."""
        self.meter.lapsed("server-clock" if server_clock else "late")
        if server_clock and not self._clock_warned:
            self._clock_warned = True
            log.warning(
                "redis-fencing: producer on %s partition %d: the Redis server's clock jumped "
                "forward: the lease had ended by server time %.3fs before this renewal, which "
                "came before the lease's end by this producer's clock; it was renewed (nobody "
                "took the partition meanwhile), but any lease on that server may have ended "
                "early",
                self._meta.name,
                partition,
                lapsed_ms / 1000.0,
            )

    def renew_call(self, standing: Standing) -> protocol.ScriptCall[tuple[int, int]]:
        """The renewal of the lease (and of the PID's state) on one partition."""
        w = standing.writer
        return protocol.producer.producer_renew(
            standing.pk,
            session=self.session,
            mode=w.mode,
            epoch=w.epoch,
            ttl_ms=self.ttl_ms,
            incarnation=w.row_incarnation,
            pid=standing.pid,
            pid_generation=standing.generation,
            name=self.name,
            partition_incarnation=self._meta.incarnation_of(standing.pk.partition),
        )

    # -- leaving -----------------------------------------------------------------------------

    def release(self, standings: Iterable[Standing]) -> StateLost | None:
        """Leave every partition not left yet (waiters are woken); the first loss of state
        a partition showed while it was left (G9: it was left all the same), else None."""
        first: StateLost | None = None
        for standing in standings:
            if not standing.left:
                lost = self.leave(standing.pk, standing.writer.mode, standing.writer.epoch)
                standing.left = True
                first = first or lost
        # Only once every partition was left: an interrupted close() can run again.
        self.released = True
        # The standings stay: a closed producer's state (to save) and epochs can be read.
        return first

    def leave(self, pk: PartitionKeys, mode: str, epoch: int) -> StateLost | None:
        """Leave one partition as registered in ``mode`` (best effort: the lease lapses);
        the loss of state it showed (the store went back under this handle), else None."""
        call = protocol.producer.producer_close(
            pk,
            session=self.session,
            mode=mode,
            epoch=epoch,
            partition_incarnation=self._meta.incarnation_of(pk.partition),
            seen_next=self._meta.seen_next(pk.partition),
        )
        try:
            left = self._calls.execute(call)
        except FencingError:
            log.warning(
                "redis-fencing: leaving %s partition %d failed; the lease lapses in %.3fs",
                pk.topic,
                pk.partition,
                self.lease_ttl,
            )
            return None
        if left.lost is None:
            return None
        try:
            return self._meta.explain(pk, left.lost)
        except FencingError:
            return left.lost  # (whether an operator deleted it stays unknown)

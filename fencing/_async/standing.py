"""What a producer's parts share: its standing on each partition (:class:`Standing`), how
it stands as a whole (:class:`Status`), its script calls (:class:`Calls`), the answers of
``send_async`` futures (:class:`Answers`) and the wake-up of its sender (:class:`Wakeup`).

>>> standing = Standing(pk, writer, pid=7, generation=0, seq=0)
>>> status = Status()
>>> status.fenced is None                       # until a successor fences the producer
True
"""

from __future__ import annotations

from typing import TypeAlias, TypeVar

from .. import _protocol as protocol
from .._durability import Durability
from .._keys import PartitionKeys
from .._modes import Pending
from .._protocol.topic import Writer
from .._record import RecordMetadata
from .._retry import RetryBudget
from .._runtime.tasks import primitives as runtime
from .._telemetry import PartitionMeter
from ..errors import DuplicateSequence, FencingError
from .context import Context

T = TypeVar("T")
#: How a pending batch was resolved: its metadata if it landed; the DuplicateSequence that
#: refused it if its sequences were written before (its records are in the log, their
#: offsets not known here); None if it did not land (and never will).
Resolution: TypeAlias = list[RecordMetadata] | DuplicateSequence | None


class Standing:
    """What a producer holds on one partition: its writer (lease), PID, generation and
    sequences. Mutated only by whoever holds the partition's call (its queue's lock)."""

    __slots__ = (
        "errors",
        "floor",
        "generation",
        "left",
        "meter",
        "next_sequence",
        "pending",
        "pid",
        "pk",
        "resolved",
        "writer",
    )

    def __init__(
        self,
        pk: PartitionKeys,
        writer: Writer,
        pid: int,
        generation: int,
        seq: int,
        *,
        floor: int = 0,
    ):
        self.pk = pk
        self.writer = writer
        self.pid = pid
        self.generation = generation
        self.next_sequence = seq
        #: Sequences from here on were never sent by an older incarnation of this PID: the
        #: first attempt of a batch at or past it is fresh (may start the PID's state anew).
        #: Below it a batch may be a resend (a resumed state behind the server's).
        self.floor = floor
        self.pending: Pending | None = None
        #: The last pending batch resolved and its outcome (see Status.last_resolution),
        #: recorded before ``pending`` is cleared (see GroupSend.settle_carried).
        self.resolved: tuple[Pending, Resolution] | None = None
        #: Set once this producer left the partition (closed or gave up opening).
        self.left = False
        self.errors = protocol.producer.producer_errors(pk)  # built once, not per send
        #: The partition's producer instruments.
        self.meter = PartitionMeter(pk.topic, pk.partition)


class Status:
    """How a producer stands as a whole (shared by its parts)."""

    __slots__ = ("closed", "fenced", "last_resolution", "opened")

    def __init__(self) -> None:
        self.opened = False
        #: No new send from then on (an open() waiting gives up on it).
        self.closed = False
        #: Why it was fenced, for good: every later send raises it.
        self.fenced: FencingError | None = None
        #: How the last pending batch was resolved: (partition, its metadata if it
        #: landed, the DuplicateSequence refusing it if its sequences were written before,
        #: or None if it did not land).
        self.last_resolution: tuple[int, Resolution] | None = None


class Calls:
    """Runs a producer's script calls, retried within the budget below its lease. (No
    slots: a test may stand in for :meth:`execute` on one producer.)"""

    def __init__(self, context: Context, budget: RetryBudget) -> None:
        self._context = context
        self.budget = budget

    async def execute(
        self, call: protocol.ScriptCall[T], durability: Durability | None = None
    ) -> T:
        """Run ``call`` (waiting for ``durability`` after it, if given)."""
        budget = self.budget
        return await self._context.driver(budget.timeout).execute(call, budget, durability)


class Answers:
    """The answers of ``send_async`` futures, kept until no partition's call is held: the
    futures' callbacks may send or flush, and must never run under the call that
    answered them."""

    __slots__ = ("_delivering", "_guard", "_kept")

    def __init__(self) -> None:
        self._kept: list[tuple[list[runtime.Future[RecordMetadata]], list[object]]] = []
        self._guard = runtime.state_lock()
        self._delivering = runtime.state_lock()

    def __bool__(self) -> bool:
        """Whether answers wait to be delivered."""
        return bool(self._kept)

    def give(self, futures: list[runtime.Future[RecordMetadata]], answers: list[object]) -> None:
        """Keep the answers of ``futures`` (results or errors) for :meth:`deliver`."""
        with self._guard:
            self._kept.append((futures, answers))

    def deliver(self) -> None:
        """Give the answers kept (call with no partition's call held). One delivery at a
        time: once this returns, every answer given before it was delivered (what
        flush() promises)."""
        with self._delivering:
            with self._guard:
                kept, self._kept = self._kept, []
            settle, fail = runtime.settle, runtime.fail
            pairs = [
                pair for futures, answers in kept for pair in zip(futures, answers, strict=True)
            ]
            done = 0
            try:
                for future, value in pairs:
                    if isinstance(value, BaseException):
                        fail(future, value)
                    else:
                        settle(future, value)
                    done += 1
            except BaseException:
                # A done callback raised an interrupt (Ctrl-C, SystemExit): keep what is not
                # delivered yet, from the future it came from on (answering a future twice
                # does nothing), for the next delivery.
                rest = pairs[done:]
                with self._guard:
                    self._kept[:0] = [([f for f, _ in rest], [v for _, v in rest])]
                raise


class Wakeup:
    """How the partitions' queues and ``send_async`` wake the background sender."""

    __slots__ = ("event", "flushing", "lingering", "queued_bytes")

    def __init__(self) -> None:
        #: Set: the sender has yet to look at the queues.
        self.event = runtime.Event()
        #: Bytes send_async() queued since the sender last took the queues: while it
        #: lingers, only a send that brings this to batch_size wakes it. (A count kept
        #: without a lock: a lost update only ends one linger early or at its deadline.)
        self.queued_bytes = 0
        #: The sender is lingering (only a send that fills batch_size wakes it then).
        self.lingering = False
        #: A flush() runs: the sender does not linger.
        self.flushing = False

    def set(self) -> None:
        """Have the sender look at the queues."""
        self.event.set()

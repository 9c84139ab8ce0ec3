"""One producer process of ``fencing demo``: ``python -m fencing.demo.worker ...``.

The worker opens a ``WAIT_FOR_EXCLUSIVE`` producer on every partition of an existing topic,
then appends unique values (``w1-000123``, partition = sequence mod partitions) at a
steady pace until told to stop. It is a real process on purpose: the demo SIGKILLs,
SIGSTOPs and SIGCONTs it like a crash or a GC pause would.

The server URL comes from ``FENCING_REDIS_URL`` in the environment (never the command line,
where ``ps`` would show a password). Every event goes to stdout as one JSON line, flushed
at once, so a SIGKILL can never leave half an event behind:

- ``{"ev": "ready", "pid": 4242}`` when the process runs;
- ``{"ev": "waiting"}`` before it queues for exclusivity;
- ``{"ev": "acquired", "epochs": [3, 3], "producer_id": 7}`` once it holds every partition;
- ``{"ev": "acked", "value": "w1-000012", "partition": 0, "offset": 6, "epoch": 3}``;
- ``{"ev": "unknown", "value": ..., "partition": ...}`` for an outcome the client cannot know
  (retries ran out: the record may or may not be in the log);
- ``{"ev": "fenced", "value": ..., "partition": ..., "epoch": 3, "current_epoch": 4}`` for
  each send refused because a later epoch was granted. After the first one the worker tries
  ``--after-fence`` more sends (so the demo can prove none of them landed), then stops;
- ``{"ev": "error", "message": ...}`` for anything unexpected (the worker then exits 1);
- ``{"ev": "closed", "acked": 120}`` when it leaves.

A ``stop`` line on stdin, or stdin closing (the demo went away), ends the worker: a waiting
open gives up, a holder closes its producer (the next waiter is woken at once).

>>> # python -m fencing.demo.worker --namespace demo-1a2b --topic A --name w1 --lease-ttl 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

import fencing
from fencing import AccessMode, OutcomeUnknown, ProducerBusy, ProducerFenced, Unavailable

_emit_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    """Write one event as one JSON line and flush it (the demo reads lines as they come)."""
    line = json.dumps({"ev": event, **fields}, separators=(",", ":"))
    with _emit_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m fencing.demo.worker",
        description="A WAIT_FOR_EXCLUSIVE producer process of `fencing demo`.",
    )
    parser.add_argument("--namespace", required=True, help="the demo's key namespace")
    parser.add_argument("--topic", required=True, help="an existing topic")
    parser.add_argument("--name", required=True, help="this worker's name (w1, w2...)")
    parser.add_argument("--lease-ttl", type=float, default=1.0, help="producer lease (s)")
    parser.add_argument("--interval", type=float, default=0.02, help="pause between sends (s)")
    parser.add_argument("--after-fence", type=int, default=3, help="sends tried once fenced")
    parser.add_argument("--wait-timeout", type=float, default=60.0, help="give up queueing (s)")
    parser.add_argument("--max-sends", type=int, default=100_000, help="upper bound on sends")
    return parser.parse_args(argv)


class _Stopper:
    """Stops the worker on a ``stop`` line or at EOF on stdin.

    While the producer is still queueing, stopping closes it (its open() then gives up and
    leaves the queue). Once it holds, the send loop sees the flag and closes the producer
    itself, so a close never races a send.
    """

    def __init__(self, producer: fencing.Producer) -> None:
        self.producer = producer
        self.flag = threading.Event()
        self._lock = threading.Lock()
        self._opening = True

    def watch(self) -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        with self._lock:
            self.flag.set()
            close = self._opening
        if close:
            self.producer.close()

    def opened(self) -> bool:
        """Called once open() returned: True to go on, False if told to stop meanwhile."""
        with self._lock:
            self._opening = False
            return not self.flag.is_set()


class _Sender:
    """The send loop's state: one value per sequence number, reported as it ends."""

    def __init__(self, producer: fencing.Producer, name: str, partitions: int) -> None:
        self.producer = producer
        self.name = name
        self.partitions = partitions
        self.seq = 0
        self.acked = 0

    def send_next(self) -> str:
        """Send the next value; returns how it ended: acked, unknown or fenced."""
        value = f"{self.name}-{self.seq:06d}"
        partition = self.seq % self.partitions
        self.seq += 1
        try:
            md = self.producer.send(value.encode(), partition=partition)
        except ProducerFenced as exc:
            emit(
                "fenced",
                value=value,
                partition=partition,
                epoch=exc.epoch,
                current_epoch=exc.current_epoch,
            )
            return "fenced"
        except (OutcomeUnknown, Unavailable) as exc:
            # Unavailable without OutcomeUnknown never reached the server; either way the
            # demo counts it as "may be in the log" and the verifier accepts both.
            emit("unknown", value=value, partition=partition, message=str(exc)[:200])
            return "unknown"
        self.acked += 1
        emit("acked", value=value, partition=md.partition, offset=md.offset, epoch=md.epoch)
        return "acked"


def run(args: argparse.Namespace) -> int:
    """The worker's life: queue, hold and append, stop (or be fenced and stop)."""
    emit("ready", pid=os.getpid())
    client = fencing.Client.from_url(None, namespace=args.namespace)
    try:
        topic = client.topic(args.topic)
        producer = fencing.Producer(
            topic,
            AccessMode.WAIT_FOR_EXCLUSIVE,
            name=args.name,
            lease_ttl=args.lease_ttl,
            wait_timeout=args.wait_timeout,
        )
        stop = _Stopper(producer)
        threading.Thread(target=stop.watch, name="stdin", daemon=True).start()
        emit("waiting")
        try:
            producer.open()
        except ProducerBusy as exc:
            # Closed while queued (told to stop), or wait_timeout ran out.
            emit("closed", acked=0, reason="stopped" if stop.flag.is_set() else str(exc))
            return 0
        if not stop.opened():
            producer.close()
            emit("closed", acked=0, reason="stopped")
            return 0
        partitions = topic.partitions
        emit(
            "acquired",
            epochs=[producer.epoch(p) for p in range(partitions)],
            producer_id=producer.producer_id,
        )
        sender = _Sender(producer, args.name, partitions)
        with producer:
            while not stop.flag.is_set() and sender.seq < args.max_sends:
                if sender.send_next() == "fenced":
                    # G2: a fenced producer stays fenced. Keep trying so the demo can show
                    # that none of these attempts lands.
                    for _ in range(args.after_fence):
                        sender.send_next()
                    break
                stop.flag.wait(args.interval)
        emit("closed", acked=sender.acked, reason="fenced" if producer.fenced else "stopped")
        return 0
    except Exception as exc:
        emit("error", message=f"{type(exc).__name__}: {exc}")
        return 1
    finally:
        client.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m fencing.demo.worker``."""
    args = parse_args(argv)
    if not os.environ.get("FENCING_REDIS_URL"):
        # Never fall back to localhost:6379: that may be somebody's real server.
        print("fencing demo worker: set FENCING_REDIS_URL (the demo does)", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

"""``fencing tail TOPIC``: print a topic's records, up to the end or, with ``--follow``,
until Ctrl-C. Read-only.

>>> from fencing.cli import main
>>> main(["tail", "orders", "-p", "0", "--from", "100", "--max", "10"])  # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from .._record import Record
from ..errors import InvalidArgument
from ._argtypes import partition, positive, start
from ._connect import connect, existing_topic
from ._output import show

if TYPE_CHECKING:
    from ._command import AddCommand

_READ_BATCH = 500
_FOLLOW_BLOCK_MS = 1000


def register(add: AddCommand) -> None:
    """Add ``tail`` to the ``fencing`` parser."""
    tail = add(
        "tail",
        "print a topic's records (read-only; --follow tails until Ctrl-C)",
        "examples:\n  fencing tail orders                     every partition, to the end\n"
        "  fencing tail orders -p 0 --from 100 --max 10\n"
        "  fencing tail orders -p 0 --from latest --follow\n"
        "  fencing tail orders --json | jq .value  one JSON object per line\n\n"
        "Values and keys print as text when they are UTF-8, else as a Python bytes repr.",
        _tail,
    )
    tail.add_argument("topic", metavar="TOPIC")
    tail.add_argument("-p", "--partition", type=partition, help="only this partition")
    tail.add_argument(
        "--from",
        dest="start",
        type=start,
        default="earliest",
        metavar="earliest|latest|OFFSET",
        help="where to start in each partition; an OFFSET must exist in every partition "
        "tailed (default: earliest)",
    )
    tail.add_argument("--follow", "-f", action="store_true", help="wait for new records")
    tail.add_argument("--max", type=positive, metavar="N", help="stop after N records")


def _record_json(record: Record) -> dict[str, Any]:
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "epoch": record.epoch,
        "producer_id": record.producer_id,
        "timestamp_ms": record.timestamp_ms,
        "key": None if record.key is None else show(record.key),
        "value": show(record.value),
        "headers": {name: show(value) for name, value in record.headers.items()},
    }


def _tail(args: argparse.Namespace) -> int:
    with connect(args, read_only=True) as conn:
        meta = existing_topic(conn, args.topic)
        if args.partition is not None and args.partition >= meta.partitions:
            raise InvalidArgument(
                f"topic {meta.name!r} has partitions 0 to {meta.partitions - 1}; there is no "
                f"partition {args.partition}"
            )
        parts = [args.partition] if args.partition is not None else range(meta.partitions)
        topic = conn.client.topic(meta.name)
        readers = [topic.reader(p, args.start) for p in parts]
        left: int | None = args.max

        def emit(records: list[Record]) -> int:
            nonlocal left
            for record in records:
                if args.json:
                    print(json.dumps(_record_json(record)), flush=args.follow)
                else:
                    shown = f"{record.topic}/{record.partition}@{record.offset}"
                    line = (
                        f"{shown}\tepoch={record.epoch}\tproducer={record.producer_id}\t"
                        f"key={show(record.key)}\t{show(record.value)}"
                    )
                    if record.headers:
                        headers = {k: show(v) for k, v in record.headers.items()}
                        line += f"\theaders={json.dumps(headers)}"
                    print(line, flush=args.follow)
            if left is not None:
                left -= len(records)
            return len(records)

        def count() -> int:
            return _READ_BATCH if left is None else min(_READ_BATCH, left)

        try:
            # Up to the end as it is now, partition by partition.
            for reader in readers:
                end = topic.offsets(reader.partition)[1]
                while reader.position < end and left != 0:
                    if not emit(reader.read(max_records=count())):
                        break
            if not args.follow:
                return 0
            # Then round-robin; a round that found nothing blocks on each partition in turn.
            block = max(50, _FOLLOW_BLOCK_MS // len(readers))
            idle = False
            while left != 0:
                got = 0
                for reader in readers:
                    if left == 0:
                        break
                    got += emit(reader.read(max_records=count(), block_ms=block if idle else None))
                idle = got == 0
        except KeyboardInterrupt:
            if not args.follow:
                raise
        return 0

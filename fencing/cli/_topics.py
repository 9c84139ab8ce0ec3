"""``fencing topics`` (the namespace's topics) and ``fencing delete-topic`` (delete one,
with a confirmation flag: the second command that writes).

>>> from fencing.cli import main
>>> main(["topics"])                                                   # doctest: +SKIP
orders
0
>>> main(["delete-topic", "orders", "--yes"])                          # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .. import _inspection as insp
from .._keys import validate_name
from ..errors import InvalidArgument
from ._connect import connect
from ._output import print_json, warn_skipped

if TYPE_CHECKING:
    from ._command import AddCommand


def register(add: AddCommand) -> None:
    """Add ``topics`` and ``delete-topic`` to the ``fencing`` parser."""
    add(
        "topics",
        "list the namespace's topics",
        "example:\n  fencing topics --json\n\nOne name a line, sorted (a topic being deleted "
        "is left out). Never writes.",
        _topics,
    )
    delete = add(
        "delete-topic",
        "delete a topic and every key it has (needs --yes)",
        "examples:\n  fencing delete-topic orders --yes\n"
        "  fencing delete-topic orders --yes --force\n\n"
        "Removes the topic's records, offsets, producer state, consumer groups' rows and\n"
        "the Spark sink's dedupe state, in bounded steps (SCAN and UNLINK a page at a\n"
        "time). Refused while the topic is in use (a live producer, shared or exclusive,\n"
        "a waiting one, a consumer's live grant, or a Spark sink batch begun and not\n"
        "finished), unless --force: then every live handle's next call raises StateLost.\n"
        "A delete cut short leaves the topic refusing opens: run it again to finish it.\n"
        "Each partition keeps a mark of the delete for --mark-ttl seconds (default: the\n"
        "topic's producer state expiry): until then a live handle of the deleted topic\n"
        "gets StateLost(reason='deleted') naming the delete.",
        _delete,
    )
    delete.add_argument("topic", metavar="TOPIC", help="the topic to delete")
    delete.add_argument("--yes", action="store_true", help="really do it (it is destructive)")
    delete.add_argument(
        "--force", action="store_true", help="even while producers or consumers use it"
    )
    delete.add_argument(
        "--mark-ttl",
        type=float,
        metavar="SECONDS",
        help="how long live handles are told of the delete (default: the topic's producer "
        "state expiry)",
    )


def _topics(args: argparse.Namespace) -> int:
    with connect(args, read_only=True) as conn:
        names = conn.client.topics()
        # The topics the library lists leave out a metadata key of another type silently;
        # the operator is told which (the same SCAN, through the views).
        skipped: list[insp.SkippedKey] = []
        insp.topics(conn.r, conn.keys, skipped=skipped)
    warn_skipped(skipped)
    if args.json:
        print_json(names)
    else:
        for name in names:
            print(name)
    return 0


def _delete(args: argparse.Namespace) -> int:
    topic = validate_name("topic", args.topic)
    if not args.yes:
        raise InvalidArgument(
            f"delete-topic removes topic {topic!r} and every record it holds: add --yes to do it"
        )
    with connect(args, read_only=False) as conn:
        conn.client.delete_topic(topic, force=args.force, mark_ttl=args.mark_ttl)
        namespace = conn.keys.namespace
    if args.json:
        print_json({"deleted": topic, "namespace": namespace, "forced": args.force})
    else:
        print(f"deleted topic {topic!r} of namespace {namespace!r}")
    return 0

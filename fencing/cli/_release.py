"""``fencing release``: an operator's force-release, the only command that writes. Ownership
rows are claimed with generation 0 and released (the holder is severed); ``--producer
TOPIC`` severs a topic's writers with epoch + 1 and hands each partition to its first
waiting producer (``--evict-waiters``: fences the waiters too).

>>> from fencing.cli import main
>>> main(["release", "journal", "orders/0", "--yes"])                 # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from .. import _inspection as insp
from .._keys import ELECTION_GROUP, PRODUCER_GROUP, RESERVED_PREFIX, validate_name
from .._protocol.admin import Evicted
from .._sync.admin import release_producers
from .._sync.context import context_of
from ..errors import InvalidArgument
from ._client import operator_ownership
from ._connect import Conn, connect, existing_topic
from ._output import print_json

if TYPE_CHECKING:
    from ._command import AddCommand

#: The label a force-release claims under, so holders' logs say who severed them.
OPERATOR_LABEL = "fencing-cli (operator release)"
_RELEASE_TTL = 10.0


def register(add: AddCommand) -> None:
    """Add ``release`` to the ``fencing`` parser."""
    release = add(
        "release",
        "force-release ownership rows (generation 0) or hand a topic to its waiting producers",
        "examples:\n  fencing release journal orders/0 orders/1 --yes\n"
        "  fencing release billing orders/0 --yes       take partition 0 of topic orders\n"
        "                                               from consumer group billing\n"
        "  fencing release __election__ scheduler --yes end the term of election scheduler\n"
        "  fencing release --producer orders --yes\n\n"
        "GROUP RESOURCE...: each resource is claimed with generation=0 through the public\n"
        "ownership API, then released. Generation 0 always wins: it severs any live holder\n"
        "(which gets Fenced at its next check, renew or fenced write), restarts the\n"
        "generation at 0 and bumps the fencing token. The row is left free.\n"
        "A consumer group's partition P of TOPIC is the resource TOPIC/P: its member gets\n"
        "Fenced at its next poll or commit (a commit it had under way writes nothing).\n"
        "An election is the group __election__ with the election's name as resource: its\n"
        "leader's term ends (lost is set, on_revoked runs) and a waiting candidate, if any,\n"
        "is elected with a higher token. Other reserved groups (__producer__) are refused.\n\n"
        "--producer TOPIC: on every partition, severs the exclusive holder and every shared\n"
        "producer with epoch + 1 (their next send raises ProducerFenced) and hands the\n"
        "partition to the queue: the first live WAIT_FOR_EXCLUSIVE waiter holds it at the\n"
        "new epoch (it is woken), the others stay queued in order. --evict-waiters fences\n"
        "the waiters too (Pulsar's evict-all) and leaves the partition free.\n\n"
        "Both are destructive and need --yes.",
        _release,
    )
    release.add_argument("names", nargs="*", metavar="GROUP RESOURCE", help="group, resources")
    release.add_argument("--producer", metavar="TOPIC", help="fence this topic's producers")
    release.add_argument(
        "--evict-waiters",
        action="store_true",
        help="with --producer: fence the queued waiters too, leaving the partition free",
    )
    release.add_argument("--yes", action="store_true", help="really do it (it is destructive)")


def _release(args: argparse.Namespace) -> int:
    if args.producer is not None and args.names:
        raise InvalidArgument("release --producer TOPIC takes no GROUP or RESOURCE")
    if args.producer is None and len(args.names) < 2:
        raise InvalidArgument(
            "release needs GROUP and at least one RESOURCE (or --producer TOPIC): e.g. "
            "fencing release journal orders/0 --yes"
        )
    if args.evict_waiters and args.producer is None:
        raise InvalidArgument(
            "--evict-waiters goes with --producer TOPIC: e.g. fencing release --producer "
            "orders --evict-waiters --yes"
        )
    if not args.yes:
        raise InvalidArgument(
            "release is destructive (generation 0 severs live ownership holders; --producer "
            "severs the topic's writers with epoch + 1): add --yes to do it"
        )
    with connect(args, read_only=False) as conn:
        if args.producer is not None:
            results = _release_producers(
                conn, args.producer, evict_waiters=args.evict_waiters, text=not args.json
            )
        else:
            results = _release_rows(conn, args.names[0], args.names[1:], text=not args.json)
    if args.json:
        print_json(results)
    return 0


def _release_rows(
    conn: Conn, group: str, resources: list[str], *, text: bool
) -> list[dict[str, Any]]:
    validate_name("group", group, allow_reserved=True)
    election = group == ELECTION_GROUP
    if group == PRODUCER_GROUP:
        raise InvalidArgument(
            f"the rows of group {PRODUCER_GROUP!r} are partitions' exclusive-producer rows "
            "(their token is the epoch): fence a topic's producers with 'fencing release "
            "--producer TOPIC --yes'"
        )
    if group.startswith(RESERVED_PREFIX) and not election:
        raise InvalidArgument(
            f"group {group!r} is reserved for redis-fencing itself: of the reserved groups "
            f"only {ELECTION_GROUP!r} (elections) can be released here"
        )
    names = list(dict.fromkeys(resources))
    before = {res: insp.ownership_row(conn.r, conn.keys, group, res) for res in names}
    missing = [res for res, row in before.items() if row is None]
    if missing:
        # Claiming would create the row: a typo would leave a stray row behind.
        listing = "fencing elections" if election else f"fencing owners {group}"
        raise InvalidArgument(
            f"no ownership row for {', '.join(map(repr, missing))} in group {group!r} "
            f"(namespace {conn.keys.namespace!r}); nothing was released. List the rows with "
            f"'{listing}'"
        )
    owner = operator_ownership(
        conn.client, group, OPERATOR_LABEL, _RELEASE_TTL, allow_reserved=election
    )
    with owner:
        grants = owner.claim(names, generation=0)
        released = owner.release(names)
    results: list[dict[str, Any]] = []
    if text:
        print(
            f"force-release in group {group!r} with generation 0 (always wins: severs any "
            "live holder, restarts the generation at 0, bumps the token):"
        )
    for res in names:
        old, grant = before[res], grants[res]
        assert old is not None
        severed = None if old.state == "free" else dataclasses.asdict(old)
        results.append(
            {
                "group": group,
                "resource": res,
                "semantics": "generation 0",
                "severed": severed,
                "token": {"old": old.token, "new": grant.token},
                "generation": {"old": old.generation, "new": grant.generation},
                "released": released.get(res, False),
            }
        )
        if text:
            who = "no holder to sever"
            if old.state != "free" and election:
                who = (
                    f"severed {old.state} leader {old.label!r} (session {old.session[:8]}); "
                    "its term ends (lost is set; Fenced at its next check or renewal); a "
                    "waiting candidate, if any, is elected with a higher token"
                )
            elif old.state != "free":
                who = (
                    f"severed {old.state} holder {old.label!r} (session {old.session[:8]}); "
                    "it gets Fenced at its next check, renew or fenced write"
                )
            print(
                f"  {res}: token {old.token} -> {grant.token}, generation {old.generation} -> "
                f"{grant.generation}; {who}; released, the row is free"
            )
    return results


def _release_producers(
    conn: Conn, name: str, *, evict_waiters: bool, text: bool
) -> list[dict[str, Any]]:
    meta = existing_topic(conn, name)
    before = insp.topic_status(conn.r, conn.keys, meta.name)
    incarnations = {p.partition: p.incarnation for p in before.partitions if p.present}
    done = release_producers(
        context_of(conn.client), meta.name, incarnations, evict_waiters=evict_waiters
    )
    if text:
        then = (
            "every waiter is fenced too and the partition is left free"
            if evict_waiters
            else "the first live WAIT_FOR_EXCLUSIVE waiter now holds the partition at the new "
            "epoch (it is woken; its label shows once it has)"
        )
        print(
            f"released the producers of topic {meta.name!r}: the exclusive holder and every "
            f"shared producer are severed with epoch + 1 (ProducerFenced at their next send); "
            f"{then}:"
        )
    results: list[dict[str, Any]] = []
    for p in before.partitions:
        if p.partition not in done:
            continue
        ev = done[p.partition]
        results.append(
            {
                "topic": meta.name,
                "partition": p.partition,
                "semantics": "evict all" if evict_waiters else "hand to the queue",
                "epoch": {"old": ev.old_epoch, "new": ev.new_epoch},
                "severed": (
                    {"label": ev.severed_label, "session": ev.severed} if ev.severed else None
                ),
                "next_holder": {"session": ev.next_holder} if ev.next_holder else None,
                "shared_fenced": ev.shared_fenced,
                "waiters_fenced": ev.waiters_fenced,
            }
        )
        if text:
            print(f"  {meta.name}/{p.partition}: {_what_happened(ev, evict_waiters)}")
    return results


def _what_happened(ev: Evicted, evict_waiters: bool) -> str:
    """One partition's line: who held it, who holds it now."""
    if ev.new_epoch == ev.old_epoch:
        return f"epoch {ev.old_epoch}; no producer and no waiter: nothing to release"
    parts = [f"epoch {ev.old_epoch} -> {ev.new_epoch}"]
    if ev.severed:
        parts.append(
            f"severed exclusive holder {ev.severed_label or 'unnamed'!r} (session {ev.severed[:8]})"
        )
    else:
        parts.append("no exclusive holder")
    if ev.shared_fenced:
        parts.append(f"{ev.shared_fenced} shared producer(s) fenced")
    if ev.next_holder:
        parts.append(
            f"next: the first waiter (session {ev.next_holder[:8]}) holds epoch {ev.new_epoch}"
        )
    elif evict_waiters:
        parts.append(f"{ev.waiters_fenced} waiter(s) fenced; the partition is free")
    else:
        parts.append("no waiter: the partition is free")
    return "; ".join(parts)

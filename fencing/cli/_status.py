"""``fencing status``: a namespace (topics, elections, consumer groups) or a topic
(partitions, offsets, epochs, holders, producers, waiters, PIDs, consumer groups and Spark
sinks).
Read-only.

>>> from fencing.cli import main
>>> main(["status", "orders", "--partition", "0"])                    # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING

from .. import _inspection as insp
from ..errors import InvalidArgument
from ._argtypes import partition
from ._connect import connect
from ._elections import print_elections
from ._output import duration, lease, offsets, print_json, table, warn_skipped, when

if TYPE_CHECKING:
    from ._command import AddCommand


def register(add: AddCommand) -> None:
    """Add ``status`` to the ``fencing`` parser."""
    status = add(
        "status",
        "show a namespace (topics, elections, consumer groups) or a topic: partitions, "
        "offsets, epochs, holders, producers, waiters, PIDs and consumer groups (read-only)",
        "examples:\n  fencing status                          the whole namespace\n"
        "  fencing status orders\n  fencing status orders --partition 0 --json\n"
        "  fencing status orders --url redis://cache:6379/2 --namespace billing\n\n"
        "Consumer groups of a topic (like kafka-consumer-groups.sh --describe): every group\n"
        "with a committed offset or an ownership row (GROUP, 'TOPIC/P') on a partition, one\n"
        "line per such partition:\n"
        "  COMMITTED  the group's committed offset (the next offset it reads), - if none\n"
        "  NEXT       the partition's next offset (its end)\n"
        "  LAG        NEXT - COMMITTED; '(from start)' when nothing was committed: then\n"
        "             NEXT - the first retained offset, where a consumer starts\n"
        "  OWNER      the member holding the partition's row (state live, lapsed or free),\n"
        "             its session, the row's fencing TOKEN and its LEASE\n"
        "Spark sinks of a topic: one line per app id, over its partitions:\n"
        "  QUERY          the streaming query that holds the app id (its lineage)\n"
        "  LAST FINISHED  the last micro-batch whose write finished\n"
        "  WRITTEN        rows its finished batches wrote\n"
        "  SKIPPED        rows they skipped as written before (a replay, a new lineage)\n"
        "A Spark worker's shared producer that wrote an app and whose lease lapsed (its tasks\n"
        "finished, its worker went) is listed under its partition as one of the sink's lapsed\n"
        "task producers, not among the shared producers; the next batch the app finishes\n"
        "there removes it.\n"
        "Without TOPIC: the topics, the elections (as 'fencing elections') and one line per\n"
        "consumer group and topic with the total lag. A key of another Redis type where\n"
        "redis-fencing keeps state (another program wrote it) is skipped and named in one\n"
        "line on stderr, and what it is about is left out; with TOPIC it is an error naming\n"
        "the key.\n\n"
        "Leases are shown by the server's clock (TIME) as the time left ('expires in 8.2s')\n"
        "or since they lapsed ('lapsed 11m 34s ago'). Nothing is written.",
        _status,
    )
    status.add_argument("topic", metavar="TOPIC", nargs="?", help="a topic (default: all)")
    status.add_argument("-p", "--partition", type=partition, help="only this partition")


def _status(args: argparse.Namespace) -> int:
    if args.topic is None:
        return _status_namespace(args)
    wanted = None if args.partition is None else [args.partition]
    with connect(args, read_only=True) as conn:
        where = f"server {conn.where}"
        status = insp.topic_status(conn.r, conn.keys, args.topic, wanted, where=where)
        groups = insp.consumer_groups(conn.r, conn.keys, status.topic.name, wanted, where=where)
        sinks = insp.spark_sinks(conn.r, conn.keys, status.topic.name, wanted, where=where)
    if args.json:
        print_json(
            {
                **dataclasses.asdict(status),
                "groups": [dataclasses.asdict(g) for g in groups],
                "spark_sinks": [dataclasses.asdict(s) for s in sinks],
            }
        )
        return 0
    meta = status.topic
    print(
        f"topic {meta.name!r} in namespace {status.namespace!r}: {meta.partitions} "
        f"partition(s), incarnation {meta.incarnation}, created {when(meta.created_ms)}"
        + ("" if meta.ready else " (still being created)")
        + (f", guarded by election {meta.guard!r}" if meta.guard else "")
    )
    tasks: dict[int, dict[str, str]] = {}
    for sink in sinks:
        for sp in sink.partitions:
            for session in sp.task_producers:
                tasks.setdefault(sp.partition, {})[session] = sink.app_id
    for p in status.partitions:
        _print_partition(p, tasks.get(p.partition, {}))
    _print_groups(groups)
    _print_sinks(sinks)
    return 0


def _print_guarded(status: insp.NamespaceStatus) -> None:
    """The topics an election guards: their epoch is the token of its current term."""
    guarded = [t for t in status.topics if t.guard]
    if not guarded:
        return
    tokens = {e.name: e.token for e in status.elections}
    print("guarded topics (written only by leadership.producer of their election):")
    table(
        ("TOPIC", "ELECTION", "TOKEN"),
        [(t.name, t.guard, str(tokens.get(t.guard, "-"))) for t in guarded],
    )


def _say_empty(namespace: str, where: str, found: list[str]) -> None:
    """One stderr line for a namespace with nothing in it (a mistyped --namespace, or the
    wrong server): the namespaces that do have redis-fencing keys there."""
    others = [ns for ns in found if ns != namespace]
    there = (
        "namespaces with redis-fencing keys there: "
        + ", ".join(map(repr, others[:20]))
        + (" ..." if len(others) > 20 else "")
        + " (pass --namespace NAME)"
        if others
        else "no namespace has redis-fencing keys there (check --url)"
    )
    print(
        f"fencing: namespace {namespace!r} has no topics, elections or consumer groups on "
        f"{where}; {there}",
        file=sys.stderr,
    )


def _status_namespace(args: argparse.Namespace) -> int:
    if args.partition is not None:
        raise InvalidArgument("--partition needs a TOPIC: e.g. fencing status orders -p 0")
    with connect(args, read_only=True) as conn:
        status = insp.namespace_status(conn.r, conn.keys)
        empty = not (status.topics or status.elections or status.groups or status.skipped)
        if empty:
            _say_empty(status.namespace, conn.where, insp.namespaces_found(conn.r))
    warn_skipped(status.skipped)
    if args.json:
        print_json(dataclasses.asdict(status))
        return 0
    names = {g.group for g in status.groups}
    skipped = f", {len(status.skipped)} key(s) skipped" if status.skipped else ""
    print(
        f"namespace {status.namespace!r}: {len(status.topics)} topic(s), "
        f"{len(status.elections)} election(s), {len(names)} consumer group(s){skipped}"
    )
    if status.topics:
        print("topics:")
        table(
            ("TOPIC", "PARTITIONS", "CREATED", "STATE"),
            [
                (
                    t.name,
                    str(t.partitions),
                    when(t.created_ms),
                    "ready" if t.ready else "being created",
                )
                for t in status.topics
            ],
        )
    else:
        print("topics: none")
    _print_guarded(status)
    print_elections(status.elections, "elections:")
    if status.groups:
        print("consumer groups (details: fencing status TOPIC):")
        rows = []
        for g in status.groups:
            from_start = sum(1 for gp in g.partitions if gp.lag_from == "start")
            lag = f"{g.lag} ({from_start} from start)" if from_start else str(g.lag)
            rows.append((g.group, g.topic, str(len(g.partitions)), str(g.owned), lag))
        table(("GROUP", "TOPIC", "PARTITIONS", "OWNED", "LAG"), rows)
    else:
        print("consumer groups: none")
    return 0


def _print_groups(groups: list[insp.GroupStatus]) -> None:
    if not groups:
        print("consumer groups: none")
        return
    print(f"consumer groups: {len(groups)}")
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    for g in groups:
        for gp in g.partitions:
            committed = "-" if gp.committed_offset is None else str(gp.committed_offset)
            lag = f"{gp.lag} (from start)" if gp.lag_from == "start" else str(gp.lag)
            owner, state, session, token, left = "-", "-", "-", "-", "-"
            if gp.owner is not None:
                o = gp.owner
                state, token = o.state, str(o.token)
                if o.state != "free":
                    owner, session, left = o.label, o.session[:8], lease(o.lease_left_ms)
            offsets = (str(gp.partition), committed, str(gp.next_offset), lag)
            rows.append((g.group, *offsets, owner, state, session, token, left))
            if gp.note:
                notes.append(f"  {g.group} partition {gp.partition}: {gp.note}")
    header = ("GROUP", "PARTITION", "COMMITTED", "NEXT", "LAG", "OWNER", "STATE", "SESSION")
    table((*header, "TOKEN", "LEASE"), rows)
    for note in notes:
        print(note)


def _print_sinks(sinks: list[insp.SinkStatus]) -> None:
    """One line per app id of the Spark sinks that write the topic; none: nothing."""
    if not sinks:
        return
    print(f"spark sinks: {len(sinks)}")
    table(
        ("APP", "QUERY", "LAST FINISHED", "WRITTEN", "SKIPPED"),
        [
            (
                s.app_id,
                s.query or "-",
                "-" if s.finished_batch is None else f"batch {s.finished_batch}",
                str(s.written),
                str(s.skipped),
            )
            for s in sinks
        ],
    )


def _print_partition(p: insp.PartitionStatus, tasks: dict[str, str]) -> None:
    """One partition; ``tasks`` names the Spark sink app of each task producer there."""
    if not p.present:
        print(
            f"partition {p.partition}: METADATA MISSING - the server lost state; every handle "
            "on it raises StateLost"
        )
        return
    # An empty partition's log holds nothing either (unless the server lost state).
    empty = p.start_offset == p.next_offset and not p.retained
    retained = "" if empty else f", {p.retained} record(s) retained"
    held = offsets(p.start_offset, p.next_offset)
    limit = f", max_len {p.max_len}" if p.max_len else ""
    print(f"partition {p.partition}: {held}{retained}{limit}")
    holder = "none"
    if p.holder is not None:
        h = p.holder
        holder = f"{h.label} (session {h.session[:8]}, lease {lease(h.lease_left_ms)})"
    print(f"  epoch {p.epoch}, mode {p.mode}, holder {holder}")
    # A finished Spark task's producer is explained by its sink, not one more shared one.
    done = [s for s in p.shared if not s.live and s.session in tasks]
    others = [s for s in p.shared if s not in done]
    live = sum(1 for s in others if s.live)
    shared = ", ".join(f"{s.session[:8]} ({lease(s.lease_left_ms)})" for s in others)
    print(
        f"  shared producers: {live} live of {p.shared_count - len(done)}"
        + (f": {shared}" if shared else "")
    )
    for app in sorted({tasks[s.session] for s in done}):
        mine = [s for s in done if tasks[s.session] == app]
        listed = ", ".join(f"{s.session[:8]} ({lease(s.lease_left_ms)})" for s in mine)
        print(
            f"  spark sink {app!r}: {len(mine)} lapsed task producer(s) of finished tasks, "
            f"removed when the app finishes a batch here: {listed}"
        )
    waiters = ", ".join(
        f"{i}. {w.session[:8]} ({lease(w.lease_left_ms)})" for i, w in enumerate(p.waiters, 1)
    )
    print(f"  waiters (FIFO): {p.waiter_count}" + (f": {waiters}" if waiters else ""))
    for pid in p.pids:
        age = "never" if pid.last_write_age_ms is None else f"{duration(pid.last_write_age_ms)} ago"
        print(
            f"  pid {pid.pid}: generation {pid.generation}, last sequence {pid.last_sequence}, "
            f"last write {age}, window {pid.window}" + (" (expired)" if pid.expired else "")
        )
    for name in p.names:
        print(f"  name {name.name!r}: pid {name.pid}, generation {name.generation}")

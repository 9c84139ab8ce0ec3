"""``fencing elections [NAME...]``: leader, fencing token, term start, lease left and waiting
candidates of each election, and the table ``fencing status`` shows them in. Read-only.

>>> from fencing.cli import main
>>> main(["elections", "scheduler", "--json"])                        # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from .. import _inspection as insp
from ..errors import InvalidArgument
from ._connect import connect
from ._output import lease, print_json, table, warn_skipped, when

if TYPE_CHECKING:
    from ._command import AddCommand


def register(add: AddCommand) -> None:
    """Add ``elections`` to the ``fencing`` parser."""
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


def _elections(args: argparse.Namespace) -> int:
    names: list[str] | None = list(dict.fromkeys(args.names)) or None
    with connect(args, read_only=True) as conn:
        skipped: list[insp.SkippedKey] = []
        found = insp.elections(conn.r, conn.keys, names, skipped=skipped)
        namespace = conn.keys.namespace
    warn_skipped(skipped)
    if names is not None:
        missing = sorted(set(names) - {e.name for e in found} - {_name(k) for k in skipped})
        if missing:
            raise InvalidArgument(
                f"no election {', '.join(map(repr, missing))} in namespace {namespace!r} "
                "(list them with 'fencing elections'; check --namespace and --url)"
            )
    if args.json:
        print_json([dataclasses.asdict(e) for e in found])
        return 0
    print_elections(found, f"elections in namespace {namespace!r}: {len(found)}")
    return 0


def _name(skipped: insp.SkippedKey) -> str:
    """The election a skipped key left out (it exists: only its keys are unreadable)."""
    return skipped.left_out.removeprefix("election ").strip("'")


def print_elections(elections: list[insp.ElectionStatus], title: str) -> None:
    """``title``, then a table of the elections and a line per election with candidates
    waiting; a title ending in ':' says 'none' when there are no elections."""
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
        since = when(e.since_ms) if e.state != "free" and e.since_ms else "-"
        left = "-" if e.state == "free" else lease(e.lease_left_ms)
        session = e.session[:8] if e.session else "-"
        rows.append(
            (e.name, e.state, leader, session, str(e.token), since, str(e.candidate_count), left)
        )
        if e.candidates:
            listed = ", ".join(f"{c.label} (session {c.session[:8]})" for c in e.candidates)
            more = e.candidate_count - len(e.candidates)
            waiting.append(
                f"  waiting in {e.name}: {listed}" + (f", and {more} more" if more > 0 else "")
            )
    header = ("NAME", "STATE", "LEADER", "SESSION", "TOKEN", "SINCE", "WAITING", "LEASE")
    table(header, rows)
    for line in waiting:
        print(line)

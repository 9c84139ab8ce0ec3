"""``fencing owners GROUP``: the ownership rows of a group. Read-only.

>>> from fencing.cli import main
>>> main(["owners", "journal", "--json"])                             # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from .. import _inspection as insp
from .._keys import ELECTION_GROUP
from ._connect import connect
from ._output import lease, print_json, warn_skipped

if TYPE_CHECKING:
    from ._command import AddCommand


def register(add: AddCommand) -> None:
    """Add ``owners`` to the ``fencing`` parser."""
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


def _owners(args: argparse.Namespace) -> int:
    with connect(args, read_only=True) as conn:
        skipped: list[insp.SkippedKey] = []
        rows = insp.owners(conn.r, conn.keys, args.group, skipped=skipped)
        namespace = conn.keys.namespace
    warn_skipped(skipped)
    if args.json:
        print_json([dataclasses.asdict(row) for row in rows])
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
                f"{lease(row.lease_left_ms)}), "
            )
        print(
            f"  {row.resource}: {row.state}, {holder}generation {row.generation}, token {row.token}"
        )
    return 0

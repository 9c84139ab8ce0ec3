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
on loopback, stopped on exit) and ``--json``, before or after its name (the one after
wins). ``status``, ``owners``, ``elections`` and
``tail`` only read; ``release`` is the only command that writes.
Any error is one line on stderr starting with ``fencing: `` and exit status 2; so is a key
of another Redis type where the library keeps state (``WrongKeyType``, naming the key) for
a command about one thing (``status TOPIC``, ``release``, ``tail``). The listings
(``status``, ``topics``, ``owners``, ``elections``) skip such a key instead: they list the
rest, name the key in one ``fencing: skipped key ...`` line on stderr (``--json`` output
stays JSON) and exit 0.

>>> from fencing.cli import main
>>> main(["status", "orders", "--url", "redis://localhost:6379/0"])    # doctest: +SKIP
0
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ._command import Handler

# One job per module: _parser (the parser and the common options), _argtypes (option types),
# _connect (reaching the server and a topic), _client (the only reaches into a Client's
# internals), _output (printing), _exits (errors to exit statuses), and one module per
# command: _status, _owners, _elections, _tail, _release, _demo.
from ._connect import TIMEOUT as TIMEOUT
from ._demo import run_demo
from ._exits import exit_status
from ._parser import build_parser as build_parser
from ._parser import merge_common
from ._release import OPERATOR_LABEL as OPERATOR_LABEL


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fencing`` console script; returns the exit status.

    >>> main(["owners", "journal", "--json"])                        # doctest: +SKIP
    0
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    return exit_status(lambda: _run(args_list))


def _run(argv: list[str]) -> int:
    if argv[:1] == ["demo"]:
        return run_demo(argv[1:])
    parser = build_parser()
    args = merge_common(parser.parse_args(argv))
    if args.command is None:
        parser.print_help()
        return 0
    handler: Handler = args.handler
    return handler(args)

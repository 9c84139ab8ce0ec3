"""MkDocs hook: the ``fencing`` command's reference, generated from its argparse parsers.

``docs/reference/cli.md`` holds the prose and a marker line ``<!-- fencing-cli -->``; at build
time the marker becomes one section per command (description, usage, arguments, options,
examples), read from :func:`fencing.cli.build_parser` and the demo's own parser. A command or
option added to the parser is documented by the next build, with nothing to keep in step.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

from fencing.cli import build_parser
from fencing.cli._parser import Parser, common

MARKER = "<!-- fencing-cli -->"
PAGE = "reference/cli.md"


def demo_parser() -> argparse.ArgumentParser | None:
    """The parser ``fencing demo`` builds (fencing.cli._demo.run_demo builds it the same way:
    the common options, overridden by the demo's own), or None without the demo extra."""
    try:
        demo: Any = importlib.import_module("fencing.demo")
    except ImportError:
        return None
    parser = Parser(
        prog="fencing demo",
        parents=[common()],
        conflict_handler="resolve",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_arguments(parser)
    return parser


def commands() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every subcommand and its parser, in the order ``fencing --help`` lists them."""
    found: list[tuple[str, argparse.ArgumentParser]] = []
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if name == "demo":
                    made = demo_parser()
                    if made is not None:
                        found.append((name, made))
                else:
                    found.append((name, sub))
    return found


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    text = parser._get_formatter()._expand_help(action)
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        text += " (one of: " + ", ".join(f"`{c}`" for c in action.choices) + ")"
    return text


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    metavar = ""
    if action.nargs != 0:
        metavar = " " + str(action.metavar or action.dest.upper())
    return ", ".join(f"`{o}{metavar}`" for o in action.option_strings)


def _table(
    parser: argparse.ArgumentParser, actions: list[argparse.Action], title: str = "Option"
) -> list[str]:
    rows = [f"| {title} | Description |", "|---|---|"]
    rows += [f"| {_name(a)} | {_cell(_help(parser, a))} |" for a in actions]
    return [*rows, ""]


COMMON = {"--url", "--namespace", "--embedded", "--json", "-h", "--help"}


def section(name: str, parser: argparse.ArgumentParser) -> list[str]:
    """One command: description, usage, arguments, its own options, examples."""
    out = [f"## `fencing {name}`", ""]
    if parser.description:
        out += [parser.description.strip(), ""]
    usage = parser.format_usage().removeprefix("usage: ").strip()
    out += ["```text", usage, "```", ""]
    positionals = [a for a in parser._actions if not a.option_strings]
    options = [
        a for a in parser._actions if a.option_strings and not set(a.option_strings) & COMMON
    ]
    # The demo redefines some common options (its --url starts a server when unset).
    redefined = [
        a
        for a in parser._actions
        if name == "demo" and set(a.option_strings) & (COMMON - {"-h", "--help"})
    ]
    if positionals:
        out += _table(parser, positionals, "Argument")
    if options or redefined:
        out += _table(parser, options + redefined)
    out += ["And the [common options](#common-options).", ""]
    if parser.epilog:
        out += ["**Examples**", "", "```text", parser.epilog.strip("\n"), "```", ""]
    return out


def reference() -> str:
    """The generated part of the page."""
    main = build_parser()
    shared = common()
    out = ["```text", main.format_usage().removeprefix("usage: ").strip(), "```", ""]
    out += ["## Common options", "", "Every command takes these:", ""]
    out += _table(shared, [a for a in shared._actions if a.option_strings])
    for name, parser in commands():
        out += section(name, parser)
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace the marker on the CLI page with the generated reference."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its {MARKER} line: the CLI reference has nowhere to go")
    return markdown.replace(MARKER, reference())

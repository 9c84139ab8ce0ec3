"""MkDocs hook: the Lua scripts' reference, generated from the headers of ``lua/*.lua``.

Every script opens with a ``--[[ ... ]]`` header: ``name: purpose``, its ``KEYS[i]`` and
``ARGV[i]``, what it returns, its error codes and notes. ``docs/reference/lua.md`` holds the
prose and a marker line ``<!-- lua-scripts -->``; at build time the marker becomes one section
per script (and a list of the shared includes), so the page says what the scripts say.
"""

from __future__ import annotations

import html
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

MARKER = "<!-- lua-scripts -->"
PAGE = "reference/lua.md"
_FILE = re.compile(r"(?P<name>[a-z][a-z0-9_]*)-(?P<nkeys>\d+)\.lua")
_SLOT = re.compile(r"^(?P<slot>(?:KEYS|ARGV)\[[^\]]+\])\s*(?P<rest>.*)$")
_LABELLED = re.compile(r"^(?P<label>Returns|Errors|Notifies|Rules)\b:?\s*(?P<rest>.*)$")


@dataclass
class Header:
    """One script's header, split into the parts the page shows."""

    name: str
    nkeys: int
    purpose: str
    keys: list[tuple[str, str]] = field(default_factory=list)
    argv: list[tuple[str, str]] = field(default_factory=list)
    labelled: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def header_text(source: str) -> str:
    """The text of the ``--[[ ... ]]`` block a script opens with, dedented."""
    if not source.startswith("--[["):
        raise ValueError("a script must open with a --[[ ... ]] header")
    end = source.index("]]")
    return textwrap.dedent(source[4:end].strip("\n"))


def _escape(text: str) -> str:
    """Header prose as Markdown text: ``<ns>``, ``*`` and ``__producer__`` stay as written."""
    text = html.escape(text, quote=False)
    return re.sub(r"([*_|\\`])", r"\\\1", text)


def _column(text: str) -> str:
    """A key pattern (``<ns>:{<topic>/<p>}:part``) as code, anything else as text."""
    if " " not in text and ("<ns>" in text or text.startswith("<")):
        return f"`{text}`"
    return _escape(text)


def _slot_text(lines: list[str]) -> str:
    """A KEYS/ARGV entry: the first line's columns, then its continuation lines (a deeper
    line of the form ``word  text`` starts a sub-item of its own)."""
    first, *rest = lines
    columns = re.split(r"\s{2,}", first.strip())
    columns = [c for c in columns if c]
    if len(columns) > 1 and re.fullmatch(r"[A-Za-z_][\w.]*", columns[0]):
        # An argument's name ("session  the caller's session id"): as code.
        columns[0] = f"`{columns[0]}`"
        text = " — ".join([columns[0], *(_column(c) for c in columns[1:])])
    else:
        text = " — ".join(_column(c) for c in columns)
    for line in rest:
        sub = re.match(r"^\s+(?P<word>\S+)\s{2,}(?P<text>.+)$", line)
        if sub:
            text += f"<br>`{sub.group('word')}` {_escape(sub.group('text'))}"
        else:
            text += " " + _escape(line.strip())
    return text


def parse(path: Path) -> Header:
    """Split one script's header into purpose, KEYS, ARGV, labelled parts and notes."""
    match = _FILE.fullmatch(path.name)
    if match is None:
        raise ValueError(f"{path.name}: not <name>-<NKEYS>.lua")
    text = header_text(path.read_text(encoding="utf-8"))
    paragraphs: list[list[str]] = [[]]
    for line in text.splitlines():
        starts_item = bool(_SLOT.match(line) or _LABELLED.match(line))
        if not line.strip():
            paragraphs.append([])
        elif starts_item and paragraphs[-1]:
            paragraphs.append([line])
        else:
            paragraphs[-1].append(line)
    paragraphs = [p for p in paragraphs if p]
    title, *purpose_rest = paragraphs[0]
    name, _, purpose = title.partition(":")
    if name.strip() != match.group("name"):
        raise ValueError(f"{path.name}: its header names {name.strip()!r}")
    header = Header(
        name=match.group("name"),
        nkeys=int(match.group("nkeys")),
        purpose=" ".join([purpose.strip(), *(x.strip() for x in purpose_rest)]),
    )
    for para in paragraphs[1:]:
        slot = _SLOT.match(para[0])
        labelled = _LABELLED.match(para[0])
        if slot:
            entry = (slot.group("slot"), _slot_text([slot.group("rest"), *para[1:]]))
            (header.keys if slot.group("slot").startswith("KEYS") else header.argv).append(entry)
        elif labelled:
            body = " ".join([labelled.group("rest"), *(x.strip() for x in para[1:])])
            header.labelled.append((labelled.group("label"), body.strip()))
        else:
            header.notes.append(" ".join(x.strip() for x in para))
    return header


def section(header: Header) -> list[str]:
    """One script's section of the page."""
    keys = "1 key" if header.nkeys == 1 else f"{header.nkeys} keys"
    out = [f"## `{header.name}`", "", f"`lua/{header.name}-{header.nkeys}.lua` — {keys}.", ""]
    purpose = header.purpose[:1].upper() + header.purpose[1:]
    out += [_escape(purpose), ""]
    for title, entries in (("Key", header.keys), ("Argument", header.argv)):
        if entries:
            out += [f"| {title} | What it is |", "|---|---|"]
            out += [f"| `{slot}` | {text} |" for slot, text in entries]
            out += [""]
    for label, body in header.labelled:
        out += [f"**{label}**: {_escape(body)}", ""]
    for note in header.notes:
        out += [_escape(note), ""]
    return out


def includes(folder: Path) -> list[str]:
    """The shared includes: each one's first paragraph."""
    out = [
        "## Shared includes",
        "",
        'Pulled into a script where it names them (`--- @include "name"`), when the '
        "scripts are loaded.",
        "",
    ]
    for path in sorted(folder.glob("*.lua")):
        first = header_text(path.read_text(encoding="utf-8")).split("\n\n")[0]
        out += [f"- `include/{path.name}`: {_escape(' '.join(first.split()))}"]
    return [*out, ""]


def reference(lua: Path) -> str:
    """The generated part of the page."""
    out: list[str] = []
    for path in sorted(lua.glob("*.lua")):
        out += section(parse(path))
    if (lua / "include").is_dir():
        out += includes(lua / "include")
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace the marker on the Lua page with the generated reference."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its {MARKER} line: the scripts have nowhere to go")
    root = Path(config.config_file_path).parent
    return markdown.replace(MARKER, reference(root / "lua"))

"""The examples of the documentation: every ```` ```python ```` block of ``README.md`` and
``docs/**/*.md``, found by reading the Markdown (no server, no pytest).

A block is a fence whose info string starts with ``python``; a ``title="test_x.py"`` attribute
makes it a pytest file, and ``title="conftest.py"`` the conftest the page's pytest files after
it run with. The line ``<!-- example: skip — reason -->`` right before a block
(blank lines between allowed) skips it with that reason. Fences may be indented (in a list
item or an admonition): the block's text is taken relative to its fence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..support.paths import ROOT

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_TITLE = re.compile(r'title="(?P<title>[^"]*)"')
_SKIP = re.compile(r"^<!--\s*example:\s*skip\s*(?:[\u2014\u2013:-]+\s*)?(?P<reason>.*?)\s*-->$")
#: A pytest file name at the end of a block's title.
_TEST_FILE = re.compile(r"(?:^|[\\/\s])(?P<name>(?:test_[\w-]*|[\w-]*_test)\.py)$")


@dataclass(frozen=True)
class Block:
    """One python block of one page."""

    page: str  # relative to the docs root, or "README.md"
    index: int  # 1-based, among the page's python blocks
    code: str
    line: int  # the fence's line in the file, 1-based
    title: str | None = None
    skip: str | None = None  # the reason of an <!-- example: skip --> marker

    @property
    def id(self) -> str:
        """``README.md::block3``, ``how-to/copy-job.md::block2``."""
        return f"{self.page}::block{self.index}"

    @property
    def test_file(self) -> str | None:
        """The pytest file name the block's title ends with, if it is a pytest file."""
        if self.title is None:
            return None
        match = _TEST_FILE.search(self.title.strip())
        return match.group("name") if match else None

    @property
    def conftest(self) -> bool:
        """Whether the block is a ``conftest.py`` (run with the page's later pytest files)."""
        return (
            self.title is not None
            and re.search(r"(?:^|[\\/\s])conftest\.py$", self.title.strip()) is not None
        )


def pages(root: Path = ROOT) -> dict[str, Path]:
    """Every page with examples: README.md, then docs/**/*.md (not docs/_hooks), by name."""
    found = {"README.md": root / "README.md"}
    docs = root / "docs"
    for path in sorted(docs.rglob("*.md")):
        relative = path.relative_to(docs)
        if relative.parts[0].startswith("_"):
            continue
        found[relative.as_posix()] = path
    return {name: path for name, path in found.items() if path.is_file()}


def blocks_of(page: str, text: str) -> list[Block]:
    """The python blocks of one page's Markdown, in order."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent, ticks, info = fence.group("indent"), fence.group("ticks"), fence.group("info")
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines):
            close = lines[i].strip()
            if close.startswith(ticks) and not close.strip(ticks[0]):
                break
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1
        language = info.split(maxsplit=1)[0] if info.strip() else ""
        if language.lstrip(".{").lower() != "python":
            continue
        title = _TITLE.search(info)
        blocks.append(
            Block(
                page=page,
                index=len(blocks) + 1,
                code="\n".join(body) + "\n",
                line=start + 1,
                title=title.group("title") if title else None,
                skip=_skip_reason(lines, start),
            )
        )
    return blocks


def _skip_reason(lines: list[str], fence: int) -> str | None:
    j = fence - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0:
        return None
    match = _SKIP.match(lines[j].strip())
    if match is None:
        return None
    return match.group("reason") or "marked <!-- example: skip --> without a reason"


def all_blocks(root: Path = ROOT) -> list[Block]:
    """Every python block of every page, pages in order, blocks in order."""
    found: list[Block] = []
    for name, path in pages(root).items():
        found += blocks_of(name, path.read_text(encoding="utf-8"))
    return found

"""A griffe extension: the package's reStructuredText docstrings, as Markdown for mkdocstrings.

The docstrings are written for ``help()`` and doctest (rST roles, ````code````, ``>>>``
sessions, ``::`` literal blocks); mkdocstrings renders Markdown, where ``>>>`` is a nested
quote and a role is literal text. Before a docstring is parsed this rewrites, outside code:

- a doctest session (``>>>`` / ``...`` lines and their output) into a ``pycon`` fence,
  without its ``# doctest: +SKIP`` directives;
- a paragraph ending in ``::`` and the indented block after it into a colon and a fence
  (highlighted as Python when it parses as Python);
- ````code```` into ```code```;
- ``:class:`~fencing.X``` (and ``func``, ``meth``, ``mod``, ``attr``, ``exc``, ``data``) into
  an optional cross-reference: a link where the target is documented, plain code where not
  (an unresolved optional reference is not a warning, so ``--strict`` stays about pages).

Registered in mkdocs.yml under the python handler's ``extensions``.
"""

from __future__ import annotations

import ast
import html
import re
import textwrap
from typing import Any

from griffe import Extension, Object

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|data|obj):`(?P<tilde>~?)(?P<target>[^`]+)`")
_LITERAL = re.compile(r"``(?P<code>.+?)``")
_DOCTEST = re.compile(r"^(?P<indent>[ \t]*)>>>(?: |$)")
# A doctest directive is for doctest, not for the reader.
_DIRECTIVE = re.compile(r"\s*#\s*doctest:\s*[+-]\w+(?:\s*,\s*[+-]\w+)*\s*$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _fence(lines: list[str], indent: str, language: str) -> list[str]:
    width = min((_indent(x) for x in lines if x.strip()), default=0)
    body = [x[width:] if x.strip() else "" for x in lines]
    return [f"{indent}```{language}", *(indent + x if x else "" for x in body), f"{indent}```"]


def _language(block: list[str]) -> str:
    """``python`` for a literal block that is Python (highlighted), else ``text``."""
    try:
        ast.parse(textwrap.dedent("\n".join(block)))
    except SyntaxError:
        return "text"
    return "python"


def _blocks(text: str) -> list[str]:
    """The docstring with doctest sessions and literal blocks fenced."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```"):
            in_fence = not in_fence
            out.append(line)
            i += 1
            continue
        if in_fence:
            out.append(line)
            i += 1
            continue
        match = _DOCTEST.match(line)
        if match:
            indent = match.group("indent")
            session = []
            while i < len(lines) and lines[i].strip():
                session.append(_DIRECTIVE.sub("", lines[i]))
                i += 1
            if out and out[-1].strip():
                out.append("")
            out.extend(_fence(session, indent, "pycon"))
            continue
        if stripped.endswith("::") and not stripped.startswith(".."):
            # A paragraph "Text::" keeps one colon; a line "::" alone disappears.
            head = line.rstrip()[:-2].rstrip()
            base = _indent(line)
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            block_end = j
            while block_end < len(lines) and (
                not lines[block_end].strip() or _indent(lines[block_end]) > base
            ):
                block_end += 1
            while block_end > j and not lines[block_end - 1].strip():
                block_end -= 1
            if block_end > j:
                if head.strip():
                    out.append(head + ":")
                out.append("")
                block = lines[j:block_end]
                out.extend(_fence(block, " " * base, _language(block)))
                i = block_end
                continue
        out.append(line)
        i += 1
    return out


def _crossref(match: re.Match[str], here: Object) -> str:
    target = match.group("target").strip()
    shown = target.rsplit(".", 1)[-1] if match.group("tilde") else target
    shown = shown.removesuffix("()")
    target = target.removesuffix("()").lstrip(".")
    if not target.startswith("fencing"):
        # A name relative to where the docstring stands: a method of its class, else a
        # member of its module.
        scope = here if here.is_class else (here.parent if here.parent is not None else here)
        if not scope.is_class and not scope.is_module:
            scope = here.module
        target = f"{scope.path}.{target}"
    code = f"<code>{html.escape(shown)}</code>"
    return f'<autoref identifier="{html.escape(target)}" optional>{code}</autoref>'


def _inline(line: str, here: Object) -> str:
    line = _ROLE.sub(lambda m: _crossref(m, here), line)
    return _LITERAL.sub(lambda m: f"`{m.group('code')}`", line)


def rst_to_markdown(text: str, here: Object) -> str:
    """One docstring, rewritten (see the module docstring)."""
    out = []
    in_fence = False
    for line in _blocks(text):
        if line.strip().startswith("```"):
            in_fence = not in_fence
            out.append(line)
        else:
            out.append(line if in_fence else _inline(line, here))
    return "\n".join(out)


class RstDocstrings(Extension):
    """Rewrites every docstring the python handler loads."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value, obj)

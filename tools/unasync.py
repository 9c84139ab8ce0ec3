"""Generate the sync code from the async source: ``fencing/_async/*.py`` -> ``fencing/_sync/``.

The async modules are the one source of truth for the user-facing objects (client, topic,
producers, readers, consumers, ownership, election) and the driver's retry logic. The sync
modules are derived from them token by token (never by regex over code, which could miss a
new name silently):

- ``async`` before ``def``, ``with`` and ``for`` is dropped, and so is every ``await``;
- names in :data:`NAMES` are renamed (``__aenter__`` -> ``__enter__``, ...);
- dotted module paths in :data:`MODULES` are rewritten (``redis.asyncio`` -> ``redis``,
  ``runtime.tasks`` -> ``runtime.threads``: the only code that differs between the two
  flavours lives in ``fencing/_runtime/``);
- docstrings and comments get the same rewriting, so their examples read as sync code.

``python tools/unasync.py`` writes the files; ``--check`` writes nothing and fails when a
generated file is stale or missing, when ``fencing/_sync/`` holds a file with no source,
when a rule was never used (a rule nobody needs hides a mistake), or when an ``async`` or
``await`` survives. CI runs the check.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "fencing" / "_async"
TARGET = ROOT / "fencing" / "_sync"

#: Names renamed wherever they appear as a whole token.
NAMES: dict[str, str] = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    "retrying_async": "retrying",
}

#: Dotted module paths rewritten as a whole (the first name, then ``.name`` pairs).
MODULES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("redis", "asyncio"): ("redis",),
    ("_runtime", "tasks"): ("_runtime", "threads"),
    ("fencing", "aio"): ("fencing",),
}

HEADER = (
    "# GENERATED from fencing/_async/{name} by tools/unasync.py: do not edit.\n"
    "# Edit the async source, then run `python tools/unasync.py` (CI checks this file).\n"
)

#: The same rewriting for docstrings and comments: (rule, pattern, replacement).
_TEXT_RULES: list[tuple[str, re.Pattern[str], str]] = [
    ("async", re.compile(r"\basync (def|with|for)\b"), r"\1"),
    ("await", re.compile(r"\bawait "), ""),
    *[(a, re.compile(rf"\b{re.escape(a)}\b"), b) for a, b in NAMES.items()],
    *[
        (".".join(a), re.compile(r"\b" + r"\.".join(map(re.escape, a)) + r"\b"), ".".join(b))
        for a, b in MODULES.items()
    ],
]


class Unasync:
    """Converts one module's source text; remembers which rules fired."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def convert(self, source: str) -> str:
        lines = source.splitlines(keepends=True)
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line))

        def at(pos: tuple[int, int]) -> int:
            return starts[pos[0] - 1] + pos[1]

        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        edits: list[tuple[int, int, str]] = []
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if tok.type == tokenize.NAME and tok.string == "async" and nxt is not None:
                if nxt.string in ("def", "with", "for"):
                    edits.append((at(tok.start), at(nxt.start), ""))
                    self.used.add("async")
            elif tok.type == tokenize.NAME and tok.string == "await" and nxt is not None:
                edits.append((at(tok.start), at(nxt.start), ""))
                self.used.add("await")
            elif tok.type == tokenize.NAME:
                module = self._module_at(tokens, i)
                if module is not None:
                    old, new = module
                    last = tokens[i + 2 * (len(old) - 1)]
                    edits.append((at(tok.start), at(last.end), ".".join(new)))
                    self.used.add(".".join(old))
                    i += 2 * (len(old) - 1) + 1
                    continue
                if tok.string in NAMES:
                    edits.append((at(tok.start), at(tok.end), NAMES[tok.string]))
                    self.used.add(tok.string)
            elif tok.type in (tokenize.STRING, tokenize.COMMENT):
                text = tok.string
                for rule, pattern, replacement in _TEXT_RULES:
                    text, count = pattern.subn(replacement, text)
                    if count:
                        self.used.add(rule)
                if text != tok.string:
                    edits.append((at(tok.start), at(tok.end), text))
            i += 1
        out = source
        for start, end, text in sorted(edits, reverse=True):
            out = out[:start] + text + out[end:]
        return out

    @staticmethod
    def _module_at(
        tokens: list[tokenize.TokenInfo], i: int
    ) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        for old, new in MODULES.items():
            n = len(tokens)
            parts = [tokens[i + 2 * k] for k in range(len(old)) if i + 2 * k < n]
            dots = [tokens[i + 2 * k + 1] for k in range(len(old) - 1) if i + 2 * k + 1 < n]
            if (
                len(parts) == len(old)
                and all(
                    t.type == tokenize.NAME and t.string == s
                    for t, s in zip(parts, old, strict=True)
                )
                and all(d.string == "." for d in dots)
            ):
                return old, new
        return None


def leftovers(text: str) -> list[str]:
    """Lines of generated code where ``async`` or ``await`` survived as a keyword."""
    bad = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NAME and tok.string in ("async", "await"):
            bad.append(f"line {tok.start[0]}: {tok.line.strip()}")
    return bad


def generate() -> tuple[dict[Path, str], set[str]]:
    """Every generated file's path and text, and the rules that fired."""
    converter = Unasync()
    out: dict[Path, str] = {}
    for src in sorted(SOURCE.glob("*.py")):
        text = converter.convert(src.read_text())
        bad = leftovers(text)
        if bad:
            raise SystemExit(f"unasync: {src.name}: async code survived: {bad}")
        out[TARGET / src.name] = HEADER.format(name=src.name) + text
    return out, converter.used


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail on stale output; write nothing")
    args = parser.parse_args(argv)
    files, used = generate()
    rules = set(NAMES) | {".".join(old) for old in MODULES} | {"async", "await"}
    problems = [f"rule {rule!r} is never used: remove it" for rule in sorted(rules - used)]
    existing = set(TARGET.glob("*.py"))
    for path in sorted(existing - set(files)):
        problems.append(f"{path.relative_to(ROOT)} has no source in fencing/_async/")
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            if args.check:
                problems.append(f"{path.relative_to(ROOT)} is stale: run python tools/unasync.py")
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                print(f"wrote {path.relative_to(ROOT)}")
    for problem in problems:
        print(f"unasync: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

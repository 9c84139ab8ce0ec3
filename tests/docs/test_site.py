"""The documentation site: it builds with ``--strict``, the API pages cover the public API,
every how-to has an example that runs, public objects carry usage examples, and the docs
say the rule, never the history that brought it."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import fencing

from ..support.paths import ROOT
from .examples import all_blocks, pages

#: Each public module and its API page (docs/reference/api/<page>).
API_PAGES = {
    "fencing": "fencing.md",
    "fencing.aio": "aio.md",
    "fencing.errors": "errors.md",
    "fencing.spark": "spark.md",
    "fencing.testing": "testing.md",
    "fencing.verify": "verify.md",
    "fencing.faults": "faults.md",
    "fencing.embedded": "embedded.md",
    "fencing.acl": "acl.md",
}
HOW_TO = ROOT / "docs" / "how-to"


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path: Path) -> None:
    # A broken link or anchor, a page missing from the nav, a docstring griffe cannot read,
    # a CLI or Lua reference that cannot be generated: each is a warning, and --strict
    # fails on any warning.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["NO_MKDOCS_2_WARNING"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "reference" / "cli" / "index.html").is_file()
    cli = (tmp_path / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    lua = (tmp_path / "reference" / "lua" / "index.html").read_text(encoding="utf-8")
    assert "fencing delete-topic" in cli
    assert "--producer" in cli
    for script in (ROOT / "lua").glob("*.lua"):
        assert f"lua/{script.name}" in lua


def public_names(module: ModuleType) -> list[str]:
    """``__all__``, else the public names the module itself defines."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return [n for n in names if not n.startswith("_")]
    return [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__ == module.__name__
    ]


def documented_on_page(module_name: str) -> list[str]:
    """The names an API page renders: all of a module rendered whole (``::: mod`` without
    ``members: false``), else the objects it names one by one (``::: mod.Name``)."""
    text = (ROOT / "docs" / "reference" / "api" / API_PAGES[module_name]).read_text()
    module = importlib.import_module(module_name)
    whole = re.search(rf"^::: {re.escape(module_name)}\n((?:    .*\n)*)", text, re.MULTILINE)
    if whole and "members: false" not in whole.group(1):
        return public_names(module)
    return re.findall(rf"^::: {re.escape(module_name)}\.(\w+)\s*$", text, re.MULTILINE)


@pytest.mark.parametrize("module_name", API_PAGES)
def test_every_public_name_has_its_place_on_an_api_page(module_name: str) -> None:
    module = importlib.import_module(module_name)
    expected = set(public_names(module))
    if module_name in ("fencing", "fencing.aio"):
        # Their exceptions are fencing.errors' (errors.md); fencing.aio's records, modes and
        # settings are fencing's own objects (fencing.md).
        expected -= set(fencing.errors.__all__)
    if module_name == "fencing.aio":
        expected = {n for n in expected if getattr(module, n) is not getattr(fencing, n)}
    missing = expected - set(documented_on_page(module_name))
    assert not missing, f"not on docs/reference/api/{API_PAGES[module_name]}: {sorted(missing)}"


@pytest.mark.parametrize("page", sorted(p.name for p in HOW_TO.glob("*.md")))
def test_every_how_to_has_an_example_that_runs(page: str) -> None:
    runnable = [b for b in all_blocks() if b.page == f"how-to/{page}" and b.skip is None]
    assert runnable, f"how-to/{page} has no ```python example that CI runs"


def _has_example(doc: str | None) -> bool:
    if not doc:
        return False
    return ">>>" in doc or re.search(r"\bExamples?\b|::\s*$", doc, re.MULTILINE) is not None


def objects_without_examples() -> list[str]:
    """Public classes, functions and public methods (of the API modules' public names)
    whose docstring shows no usage (``>>>``, an Example section or a ``::`` block)."""
    missing: list[str] = []
    seen: set[int] = set()
    for module_name in API_PAGES:
        module = importlib.import_module(module_name)
        for name in public_names(module):
            obj = getattr(module, name)
            if id(obj) in seen or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            seen.add(id(obj))
            if not _has_example(obj.__doc__):
                missing.append(f"{module_name}.{name}")
            if not inspect.isclass(obj):
                continue
            for attr, member in vars(obj).items():
                function = (
                    member.__func__ if isinstance(member, classmethod | staticmethod) else member
                )
                if attr.startswith("_") or not inspect.isfunction(function):
                    continue
                if not _has_example(function.__doc__):
                    missing.append(f"{module_name}.{name}.{attr}")
    return missing


def test_public_objects_carry_a_usage_example() -> None:
    missing = objects_without_examples()
    assert not missing, f"{len(missing)} without a usage example: " + ", ".join(missing)


#: History in the docs: review sessions, issues, seeds of runs, the old design file's name.
#: The docs say the rule, and git keeps the history.
HISTORY = re.compile(
    r"(?i:\bsession\s+#?\d+\b)"
    r"|(?i:\bissue\s+#?\d+\b)"
    r"|(?i:(?<![-\w])seed\s+#?\d+\b)"
    r"|\bDESIGN\b"
)
#: A commit hash (7 to 40 hex digits, with a digit and a letter), looked for in prose only:
#: the output an example shows holds random ids of that shape (sessions, incarnations).
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def history_mentions(text: str, markdown: bool = True) -> list[str]:
    """Each line that mentions history, as ``line N: text``."""
    found = []
    fence: str | None = None
    for n, line in enumerate(text.splitlines(), 1):
        mark = _FENCE.match(line) if markdown else None
        if mark and (fence is None or mark.group(1).startswith(fence)):
            fence = mark.group(1) if fence is None else None
        in_code = fence is not None or mark is not None
        if HISTORY.search(line) or (not in_code and COMMIT.search(line)):
            found.append(f"line {n}: {line.strip()}")
    return found


def _doc_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "mkdocs.yml", *pages().values()]
    files += sorted((ROOT / "docs").rglob("*.py"))
    return list(dict.fromkeys(f for f in files if f.is_file()))


@pytest.mark.parametrize("path", _doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_docs_say_the_rule_not_its_history(path: Path) -> None:
    found = history_mentions(path.read_text(encoding="utf-8"), markdown=path.suffix == ".md")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "as decided in session 12",
        "fixed in issue #40",
        "the chaos test with seed 7 found it",
        "see DESIGN section 4",
        "reverted by 60d46f5",
        "commit 80a5e23f0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f",
        "```console\n$ fencing demo --seed 7   # seed 7 failed in session 4\n```",
    ],
)
def test_the_history_check_finds_history(line: str) -> None:
    assert history_mentions(line)


@pytest.mark.parametrize(
    "line",
    [
        "identity is the session, not the label: every session draws one",
        "fencing demo --seed 7 repeats a run's choices",
        "the design of the scripts",
        "a 96-bit digest; offsets 1234567 and 0-(o+1); a namespace t3f9a0c1b2d4e",
        "the issue is that a session may lapse",
        "defaced accede",
        "```text\nholder ctl (session bcba9167), incarnation 5360b1befa3e2f36\n```",
    ],
)
def test_the_history_check_leaves_prose_alone(line: str) -> None:
    assert not history_mentions(line)

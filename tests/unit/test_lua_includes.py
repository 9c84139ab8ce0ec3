"""The Lua includes (lua/include/*.lua): each names what it uses, so every helper a script
calls is defined above the call; each keeps a header; a script's paths load by include.

A helper defined below its first use would be a global lookup in Lua, an error only once
that line runs: these checks find it without running anything.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fencing._lua_loader import (
    _COMMENT_RE,
    _resolve_includes,
    load_scripts,
    lua_dir,
    script,
    script_of_includes,
    script_without,
)
from fencing._protocol.topic import DEFAULT_DEDUP_WINDOW

LUA = Path(str(lua_dir()))
INCLUDES = sorted(p.stem for p in (LUA / "include").glob("*.lua"))
#: A helper (``local function name(``) or a constant (``local NAME =``) at the top level.
_DEFINITION_RE = re.compile(
    r"^local function (?P<function>[a-z_][a-z0-9_]*)\(|^local (?P<constant>[A-Z][A-Z0-9_]*) =",
    re.MULTILINE,
)


def helpers() -> set[str]:
    """Every helper and constant the includes define."""
    names: set[str] = set()
    for name in INCLUDES:
        text = (LUA / "include" / f"{name}.lua").read_text(encoding="utf-8")
        for match in _DEFINITION_RE.finditer(text):
            names.add(match.group("function") or match.group("constant"))
    return names


HELPERS = helpers()


def used_before_defined(source: str) -> list[str]:
    """The helpers whose first mention in ``source`` (comments left out) is not their
    definition."""
    code = _COMMENT_RE.sub("", source)
    defined = {
        (m.group("function") or m.group("constant")): m.start()
        for m in _DEFINITION_RE.finditer(code)
    }
    late = []
    for name in sorted(HELPERS):
        first = re.search(rf"(?<![\w.]){name}\b", code)
        if first is None:
            continue
        definition = defined.get(name)
        if definition is None or first.start() < definition:
            late.append(name)
    return late


def test_the_helpers_are_found() -> None:
    assert {"fail", "check_incarnation", "judge_resend", "save_batch", "MAX_INT"} <= HELPERS


@pytest.mark.parametrize("name", sorted(load_scripts()))
def test_every_helper_a_script_uses_is_defined_above_the_use(name: str) -> None:
    assert used_before_defined(script(name).source) == [], name


@pytest.mark.parametrize("name", INCLUDES)
def test_every_include_names_the_includes_it_uses(name: str) -> None:
    """An include built alone (nothing left out as unused) defines what it calls."""
    alone = _resolve_includes(f'--- @include "{name}"\n', lua_dir(), set())
    assert used_before_defined(alone) == [], name


@pytest.mark.parametrize("name", INCLUDES)
def test_every_include_has_a_header_saying_what_it_takes_and_returns(name: str) -> None:
    text = (LUA / "include" / f"{name}.lua").read_text(encoding="utf-8")
    match = re.match(r"--\[\[(.*?)\]\]", text, re.DOTALL)
    assert match is not None, f"{name}.lua does not open with a --[[ header ]] comment"
    head = match.group(1)
    assert "KEYS" in head and "ARGV" in head and "return" in head, name


def test_the_g9_pair_is_judged_in_one_place() -> None:
    """Every 'missing' / 'incarnation' STATE_LOST reply comes from check_incarnation."""
    for path in sorted(LUA.rglob("*.lua")):
        code = _COMMENT_RE.sub("", path.read_text(encoding="utf-8"))
        hand_made = re.findall(r"STATE_LOST[^\n]*'(?:missing|incarnation)'", code)
        assert len(hand_made) == (2 if path.name == "common.lua" else 0), path.name


def test_lua_and_python_share_the_default_dedup_window() -> None:
    """Partitions created before the window was kept in their metadata: both sides must
    judge their resends by the same window."""
    common = (LUA / "include" / "common.lua").read_text(encoding="utf-8")
    assert f"local DEFAULT_DEDUP_WINDOW = {DEFAULT_DEDUP_WINDOW}\n" in common


def test_a_script_without_an_include() -> None:
    general = script_without("append", "append_fast")
    assert (general.name, general.nkeys) == ("append", 9)
    assert "local function append_records(" in general.source
    assert "NOMKSTREAM', '0-' .. id" not in general.source  # the fast path's XADD
    # The same script below its header, where the fast path stood.
    body = general.source.split("\n]]\n", 1)[1]
    assert script("append").source.endswith(body) and len(body) > 1000
    with pytest.raises(ValueError, match="sink"):
        script_without("append", "sink")


def test_a_script_of_chosen_includes() -> None:
    fast = script_of_includes("append", 9, ["append_fast"], "return 0\n")
    assert fast.nkeys == 9 and fast.source.rstrip().endswith("return 0")
    assert fast.source.startswith("--[[\n  The append's fast path")
    # The includes an include names come with it, once, above it.
    window = script_of_includes(
        "x", 0, ["resend", "dedup_window", "common"], "return judge_resend\n"
    ).source
    assert window.count("local function fail(") == 1
    assert window.index("local function fail(") < window.index("local function judge_resend(")

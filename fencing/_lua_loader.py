"""Loads the Lua scripts shipped in ``lua/``.

Each atomic operation is one file ``<name>-<NKEYS>.lua``. Lines ``--- @include "x"`` pull in
``include/x.lua`` where the first of them stands (once per script, however often named, by the
script or by an include: an include names the includes it uses, so they come before it). A
test or benchmark runs one path of a script by what it loads: :func:`script_without` leaves
chosen includes out, :func:`script_of_includes` builds a script of chosen includes alone.
Scripts name error codes as
``E.<CODE>``; the loader checks each against the table of :mod:`fencing._codes` (a script
that names a code missing from it is refused at load time) and writes it as the string
literal ``"<CODE>"``, so no script builds a table of codes on every call. A helper of an
include that the script never names is left out (:func:`drop_unused`): Lua creates a closure
for every ``local function`` each time a script runs, whether it is called or not.

In a wheel the scripts live in ``fencing/lua``; in a source checkout, in the top-level
``lua/`` folder beside the package.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from ._codes import CODES

_FILE_RE = re.compile(r"(?P<name>[a-z][a-z0-9_]*)-(?P<nkeys>\d+)\.lua")
_INCLUDE_RE = re.compile(r'^--- @include "(?P<name>[a-z_]+)"\s*$', re.MULTILINE)
_CODE_USE_RE = re.compile(r"\bE\.([A-Z_]+)\b")
# A top-level helper: from "local function <name>(" at the start of a line to the end of
# that line if it ends with "end", else to the first line that is "end" alone (the includes'
# style), with the comment lines right above it.
_FUNCTION_RE = re.compile(
    r"^(?:--[^\n]*\n)*local function (?P<name>[A-Za-z_][A-Za-z0-9_]*)\("
    r"(?:[^\n]*\bend[ \t]*\n|.*?^end[ \t]*\n)",
    re.MULTILINE | re.DOTALL,
)
# Comments on lines of their own, and comment blocks: names there do not count as uses.
_COMMENT_RE = re.compile(r"--\[\[.*?\]\]|^[ \t]*--[^\n]*", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class LuaScript:
    """One loaded script: its name, the number of keys it takes, its full source."""

    name: str
    nkeys: int
    source: str
    #: The SHA1 that EVALSHA uses for this script.
    sha1: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha1", hashlib.sha1(self.source.encode("utf-8")).hexdigest())

    def check_keys(self, keys: tuple[str, ...] | list[str]) -> None:
        """Refuse a call whose key count differs from the one in the file name."""
        if len(keys) != self.nkeys:
            raise AssertionError(
                f"script {self.name} takes {self.nkeys} keys, got {len(keys)}: {keys!r}"
            )


def lua_dir() -> Traversable:
    """The folder holding the scripts: packaged ``fencing/lua`` or the checkout's ``lua/``."""
    packaged = resources.files("fencing") / "lua"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "lua"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(
        "redis-fencing cannot find its Lua scripts (fencing/lua in the wheel, lua/ in a "
        "checkout): reinstall the package"
    )


def _resolve_includes(text: str, folder: Traversable, seen: set[str]) -> str:
    def include(match: re.Match[str]) -> str:
        name = match.group("name")
        if name in seen:
            return ""
        seen.add(name)
        body = (folder / "include" / f"{name}.lua").read_text(encoding="utf-8")
        return _resolve_includes(body, folder, seen)

    return _INCLUDE_RE.sub(include, text)


def _build(
    name: str, nkeys: int, text: str, folder: Traversable, without: Collection[str] = ()
) -> LuaScript:
    body = drop_unused(_resolve_includes(text, folder, set(without)))
    unknown = sorted(set(_CODE_USE_RE.findall(body)) - set(CODES))
    if unknown:
        raise ValueError(f"script {name} uses error codes missing from fencing._codes: {unknown}")
    return LuaScript(name=name, nkeys=nkeys, source=resolve_codes(body))


def drop_unused(body: str) -> str:
    """Leave out every top-level ``local function`` that no code in ``body`` names.

    >>> print(drop_unused("local function a() return 1 end\\n-- b\\nlocal function b()\\n"
    ...     "  return 2\\nend\\nlocal function c()\\n  return a()\\nend\\nreturn c()\\n"))
    local function a() return 1 end
    local function c()
      return a()
    end
    return c()
    <BLANKLINE>
    """
    while True:
        code = _COMMENT_RE.sub("", body)
        kept = body
        for match in reversed(list(_FUNCTION_RE.finditer(body))):
            if len(re.findall(rf"\b{match.group('name')}\b", code)) == 1:
                kept = kept[: match.start()] + kept[match.end() :]
        if kept == body:
            return body
        body = kept


def resolve_codes(body: str) -> str:
    """Write every ``E.<CODE>`` of a script as the literal ``"<CODE>"``.

    >>> resolve_codes("return fail(E.FENCED)")
    'return fail("FENCED")'
    """
    return _CODE_USE_RE.sub(lambda m: f'"{m.group(1)}"', body)


@cache
def load_scripts() -> dict[str, LuaScript]:
    """Every script in the Lua folder, by name (``claim``, ``renew``, ...)."""
    folder = lua_dir()
    scripts: dict[str, LuaScript] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        match = _FILE_RE.fullmatch(entry.name)
        if match is None:
            continue
        name = match.group("name")
        if name in scripts:
            raise ValueError(f"two Lua scripts are named {name!r}")
        scripts[name] = _build(
            name, int(match.group("nkeys")), entry.read_text(encoding="utf-8"), folder
        )
    return scripts


def script(name: str) -> LuaScript:
    """One script by name."""
    return load_scripts()[name]


def script_without(name: str, *includes: str) -> LuaScript:
    """Script ``name`` built from its file as :func:`script` builds it, with the named
    includes left out wherever they are named: ``script_without("append", "append_fast")``
    is the append's general path alone. Refuses an include the script does not use (the
    result would be the whole script)."""
    nkeys = script(name).nkeys
    folder = lua_dir()
    text = (folder / f"{name}-{nkeys}.lua").read_text(encoding="utf-8")
    used: set[str] = set()
    _resolve_includes(text, folder, used)
    unused = sorted(set(includes) - used)
    if unused:
        raise ValueError(f"script {name} includes none of {unused}")
    return _build(name, nkeys, text, folder, without=includes)


def script_of_includes(name: str, nkeys: int, includes: Sequence[str], then: str = "") -> LuaScript:
    """A script of the named includes (with the includes they name), in this order, then the
    code ``then``: ``script_of_includes("append", 9, ["append_fast"], "return 0")`` is the
    append's fast path alone, answering 0 wherever it would hand over to the general path."""
    text = "".join(f'--- @include "{include}"\n' for include in includes) + then
    return _build(name, nkeys, text, lua_dir())

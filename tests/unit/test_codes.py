"""The one error-code table and the Lua scripts cannot drift; script files follow the layout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from fencing._codes import CODES
from fencing._lua_loader import _FILE_RE, _build, load_scripts, lua_dir, script
from fencing._protocol import ScriptCall
from fencing._protocol.topic import DEFAULT_PID_EXPIRY_MS
from fencing._settings import FencingSettings

from ..conftest import ServerInfo

LUA = Path(str(lua_dir()))
CODE_USE = re.compile(r"\bE\.([A-Z_]+)\b")
SCRIPT_FILES = sorted(p for p in LUA.glob("*.lua"))
ALL_LUA = sorted(LUA.rglob("*.lua"))


def codes_used() -> dict[str, set[str]]:
    return {p.name: set(CODE_USE.findall(p.read_text(encoding="utf-8"))) for p in ALL_LUA}


def test_the_lua_folder_is_found() -> None:
    assert SCRIPT_FILES
    assert (LUA / "include").is_dir()


@pytest.mark.parametrize("path", ALL_LUA, ids=lambda p: p.name)
def test_every_code_a_script_names_exists(path: Path) -> None:
    used = set(CODE_USE.findall(path.read_text(encoding="utf-8")))
    assert used <= set(CODES), f"{path.name} names unknown codes {sorted(used - set(CODES))}"


def test_every_code_is_used_or_reserved() -> None:
    used = set().union(*codes_used().values())
    unused = {code for code in CODES if code not in used}
    undocumented = {code for code in unused if "reserved" not in CODES[code].summary.lower()}
    assert not undocumented, f"codes neither used by a script nor documented as reserved: {unused}"
    assert {"BAD_ARGUMENT", "WRONG_TYPE", "STATE_LOST", "CONFLICT", "FENCED"} <= used


def test_code_fields_are_unique_names() -> None:
    for spec in CODES.values():
        assert spec.code == spec.code.upper()
        assert spec.fields, spec.code
        assert len(set(spec.fields)) == len(spec.fields), spec.code
        assert all(re.fullmatch(r"[a-z_]+", f) for f in spec.fields), spec.code


def test_the_loader_refuses_an_unknown_code(tmp_path: Path) -> None:
    (tmp_path / "include").mkdir()
    text = "return redis.error_reply(E.NOT_A_CODE .. ' x')\n"
    with pytest.raises(ValueError, match="NOT_A_CODE"):
        _build("bogus", 1, text, tmp_path)


def test_the_loader_refuses_an_unknown_code_in_an_include(tmp_path: Path) -> None:
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "helper.lua").write_text("local x = E.ALSO_UNKNOWN\n")
    text = '--- @include "helper"\nreturn E.FENCED\n'
    with pytest.raises(ValueError, match="ALSO_UNKNOWN"):
        _build("bogus", 1, text, tmp_path)


def test_the_loader_writes_codes_as_literals_and_includes_once(tmp_path: Path) -> None:
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "helper.lua").write_text("local helped = E.STATE_LOST\n")
    text = '--- @include "helper"\n--- @include "helper"\nreturn E.FENCED\n'
    built = _build("ok", 2, text, tmp_path)
    assert (built.name, built.nkeys) == ("ok", 2)
    assert built.source.count('local helped = "STATE_LOST"') == 1
    assert built.source.rstrip().endswith('return "FENCED"')
    assert "@include" not in built.source


def test_every_loaded_script_names_codes_only_as_literals_of_the_table(
    server: ServerInfo,
) -> None:
    for loaded in load_scripts().values():
        assert not re.search(r"\bE\.[A-Z]", loaded.source), loaded.name
    source = _build("codes", 0, "return {E.FENCED, E.BAD_ARGUMENT}\n", lua_dir()).source
    r = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        assert r.eval(source, 0) == ["FENCED", "BAD_ARGUMENT"]
    finally:
        r.close()


# -- script files --------------------------------------------------------------------------


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.name)
def test_script_names_follow_the_layout(path: Path) -> None:
    match = _FILE_RE.fullmatch(path.name)
    assert match is not None, f"{path.name} is not named <snake_name>-<NKEYS>.lua"
    loaded = script(match.group("name"))
    assert loaded.nkeys == int(match.group("nkeys"))


def test_every_script_file_is_loaded() -> None:
    names = {_FILE_RE.fullmatch(p.name).group("name") for p in SCRIPT_FILES}  # type: ignore[union-attr]
    assert set(load_scripts()) == names


@pytest.mark.parametrize("path", sorted((LUA / "include").glob("*.lua")), ids=lambda p: p.name)
def test_include_names_are_snake_case(path: Path) -> None:
    assert re.fullmatch(r"[a-z_]+\.lua", path.name)


def header(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    match = re.match(r"--\[\[(.*?)\]\]", text, re.DOTALL)
    assert match is not None, f"{path.name} does not open with a --[[ header ]] comment"
    return match.group(1)


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.name)
def test_every_script_has_a_header_naming_keys_argv_and_returns(path: Path) -> None:
    head = header(path)
    nkeys = script(path.name.split("-")[0]).nkeys
    documented = {int(i) for i in re.findall(r"KEYS\[(\d+)\]", head)}
    assert documented == set(range(1, nkeys + 1)), f"{path.name} header documents KEYS {documented}"
    assert "ARGV[1]" in head or re.search(r"ARGV\s+none", head), f"{path.name}: say ARGV none"
    assert "Returns" in head


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.name)
def test_scripts_touch_only_the_keys_in_their_name(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    body = text[text.index("]]") :]
    used = {int(i) for i in re.findall(r"KEYS\[(\d+)\]", body)}
    nkeys = script(path.name.split("-")[0]).nkeys
    assert used == set(range(1, nkeys + 1)), f"{path.name} uses KEYS {used}"


@pytest.mark.parametrize("name", sorted(load_scripts()))
def test_script_call_refuses_a_wrong_key_count(name: str) -> None:
    loaded = script(name)

    def make(n: int) -> ScriptCall[None]:
        return ScriptCall(
            script=loaded,
            keys=tuple(f"k{i}" for i in range(n)),
            args=(),
            parse=lambda reply: None,
            error=lambda reply: AssertionError("unused"),  # type: ignore[arg-type,return-value]
        )

    assert len(make(loaded.nkeys).keys) == loaded.nkeys
    for wrong in (loaded.nkeys - 1, loaded.nkeys + 1):
        with pytest.raises(AssertionError, match=f"takes {loaded.nkeys} keys, got {wrong}"):
            make(wrong)


def test_lua_and_python_share_the_default_producer_state_expiry() -> None:
    """Partitions created before the expiry was kept in their metadata: both sides must
    judge their producer states by the same default."""
    common = (LUA / "include" / "common.lua").read_text(encoding="utf-8")
    assert f"local DEFAULT_PID_EXPIRY_MS = {DEFAULT_PID_EXPIRY_MS}\n" in common
    # The setting's default (used for new topics) is the same week.
    assert (
        FencingSettings.model_fields["producer_state_ttl"].default * 1000 == DEFAULT_PID_EXPIRY_MS
    )

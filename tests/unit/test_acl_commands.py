"""The documented ACL rule grants every command the library's scripts call: a script that
calls one more command would otherwise fail only for users with a restricted ACL."""

from __future__ import annotations

import re

from fencing._lua_loader import lua_dir
from fencing.acl import COMMANDS

#: A Redis call from Lua: redis.call / redis.pcall, or a local alias of either (the append's
#: fast path names them call, try and add).
_CALL = re.compile(r"(?:redis\.p?call|\bcall|\btry|\badd)\(\s*'([A-Z]+)'")


def scripts_commands() -> dict[str, set[str]]:
    """Each command named in a script or include, and the files naming it."""
    found: dict[str, set[str]] = {}
    folder = lua_dir()
    files = [*folder.iterdir(), *(folder / "include").iterdir()]
    for path in files:
        if not path.name.endswith(".lua"):
            continue
        for command in _CALL.findall(path.read_text(encoding="utf-8")):
            found.setdefault(command.lower(), set()).add(path.name)
    return found


def test_every_command_a_script_calls_is_in_the_acl_rule() -> None:
    found = scripts_commands()
    assert {"xadd", "hmget", "time"} <= set(found)  # the pattern finds calls at all
    missing = {c: sorted(files) for c, files in found.items() if c not in COMMANDS}
    assert missing == {}, f"add these to fencing.acl.COMMANDS: {missing}"

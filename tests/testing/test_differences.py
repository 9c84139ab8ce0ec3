"""Where fakeredis differs from Redis 7 / Valkey 8 in what the library's scripts use.

Each difference is either made to behave as on a real server by :mod:`fencing.testing`
(checked on both), or documented in the README's "Testing your code" table and checked here
as documented, next to a check that the library's own Lua never depends on it. A failing
"documented" test means fakeredis changed: update the README table with the test.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions

import fencing
from fencing import AccessMode

pytest.importorskip("fakeredis")

import fakeredis

from fencing._sync.metadata import metadata_of
from fencing.testing import memory_client, memory_redis, memory_server

from ..support.clock import server_ms


@pytest.fixture
def mem_server() -> fakeredis.FakeServer:
    """A new in-memory server (guarded by fencing.testing)."""
    return memory_server()


@pytest.fixture
def fake(mem_server: fakeredis.FakeServer) -> Iterator[redis.Redis]:
    """A plain client on this test's in-memory server."""
    client = memory_redis(mem_server)
    yield client
    client.close()


@pytest.fixture
def memory(mem_server: fakeredis.FakeServer) -> Iterator[fencing.Client]:
    """A fencing client on this test's in-memory server."""
    client = memory_client("diff", server=mem_server)
    yield client
    client.close()


def library_lua() -> dict[str, str]:
    """Every Lua file of the library (scripts and includes), by path."""
    package = Path(fencing.__file__).resolve().parent
    folder = package / "lua" if (package / "lua").is_dir() else package.parent / "lua"
    files = {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*.lua")}
    assert any(name.startswith("append-") for name in files), folder
    return files


def lua_code(source: str) -> str:
    """``source`` without comments (``--[[ ... ]]`` blocks and ``--`` lines)."""
    source = re.sub(r"--\[\[.*?\]\]", "", source, flags=re.DOTALL)
    return re.sub(r"--[^\n]*", "", source)


def command(r: redis.Redis, *args: object) -> Any:
    """A command whose reply is left as the server sent it (given ``_raw_replies``)."""
    return r.execute_command(*args)  # type: ignore[no-untyped-call]


def script_error(r: redis.Redis, source: str, *keys: str) -> str:
    with pytest.raises(redis.exceptions.ResponseError) as info:
        r.eval(source, len(keys), *keys)
    return str(info.value)


# -- made to behave as on Redis 7: Lua globals --------------------------------------------------


@pytest.mark.parametrize("where", ["real", "memory"])
def test_a_script_cannot_set_or_read_undefined_globals(
    where: str, raw: redis.Redis, fake: redis.Redis
) -> None:
    r = raw if where == "real" else fake
    assert "readonly table" in script_error(r, "leak = 5 return 1")
    assert "nonexistent global variable 'leak'" in script_error(r, "return leak")
    # The refused script left nothing behind: later scripts run.
    assert r.eval("local x = 1 return x", 0) == 1
    assert "nonexistent global variable 'leak'" in script_error(r, "return leak")


def test_unguarded_fakeredis_differs_from_redis_on_globals() -> None:
    """Why memory_server() guards _G: on a bare FakeServer a script that assigns a global is
    refused only once it has run, and then either the global stays and every later script on
    that server fails (older fakeredis releases), or a read of the global that does not exist
    gives nil, where Redis 7 and Valkey 8 refuse the read."""
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    with pytest.raises(redis.exceptions.ResponseError, match="global"):
        r.eval("leak = 5 return 1", 0)
    try:
        later = r.eval("return leak", 0)
    except redis.exceptions.ResponseError as exc:
        assert "global variables: leak" in str(exc)  # poisoned by the refused script
    else:
        assert later is None  # documented: fakeredis changed if this read is refused now


def test_library_scripts_declare_no_globals_and_leave_library_tables_alone() -> None:
    assignment = re.compile(r"^\s*(redis|string|table|math|cjson|os|_G)\s*[.\[][^=\n]*=[^=]", re.M)
    for name, source in library_lua().items():
        assert not assignment.search(lua_code(source)), name
    # And at run time: every script ran under the guard in the conformance subset, which
    # refuses any new global; a memory server keeps working after all of them.


# -- documented: error({err=...}) loses its message on fakeredis --------------------------------


@pytest.mark.parametrize("where", ["real", "memory"])
def test_error_reply_keeps_its_message(where: str, raw: redis.Redis, fake: redis.Redis) -> None:
    r = raw if where == "real" else fake
    message = script_error(r, "return redis.error_reply('OFFSET_MISMATCH 5 2')")
    assert message == "OFFSET_MISMATCH 5 2"


def test_error_with_a_table_loses_its_message_in_memory(
    raw: redis.Redis, fake: redis.Redis
) -> None:
    assert script_error(raw, "error({err='FENCED 3 4'})").startswith("FENCED 3 4")
    lost = script_error(fake, "error({err='FENCED 3 4'})")
    assert "FENCED" not in lost, "documented: fakeredis changed, update the README table"


def test_library_scripts_fail_only_through_error_reply() -> None:
    uses = {n for n, s in library_lua().items() if re.search(r"(?<![\w.])error\s*\(", lua_code(s))}
    assert uses == set()
    common = library_lua()["include/common.lua"]
    assert "return redis.error_reply(table.concat(parts, ' '))" in common


def test_library_errors_arrive_whole_in_memory(
    client: fencing.Client, memory: fencing.Client
) -> None:
    """The typed errors carry the same fields and messages on both."""
    messages = []
    for c in (client, memory):
        topic = c.topic("log", partitions=1)
        with topic.producer() as p:
            p.send(b"a")
            with pytest.raises(fencing.OffsetMismatch) as info:
                p.send(b"b", expected_offset=7)
        messages.append((info.value.expected, info.value.actual, str(info.value)))
    assert messages[0] == messages[1] == (7, 1, messages[0][2])


# -- documented: missing Lua functions and libraries, script flags ------------------------------


def test_sha1hex_is_missing_in_memory(raw: redis.Redis, fake: redis.Redis) -> None:
    assert raw.eval("return redis.sha1hex('abc')", 0) == b"a9993e364706816aba3e25717850c26c9cd0d89d"
    assert "sha1hex" in script_error(fake, "return redis.sha1hex('abc')")


@pytest.mark.parametrize("library", ["bit", "struct", "cmsgpack"])
def test_lua_libraries_missing_in_memory(library: str, raw: redis.Redis, fake: redis.Redis) -> None:
    probe = f"return type({library})"
    assert raw.eval(probe, 0) == b"table"
    assert f"nonexistent global variable '{library}'" in script_error(fake, probe)


def test_script_flags_shebang_is_a_syntax_error_in_memory(
    raw: redis.Redis, fake: redis.Redis
) -> None:
    source = "#!lua flags=no-writes\nreturn 1"
    assert raw.eval(source, 0) == 1
    assert "error loading code" in script_error(fake, source)


def test_library_scripts_need_none_of_them() -> None:
    for name, source in library_lua().items():
        code = lua_code(source)
        assert not source.startswith("#!"), name
        assert "sha1hex" not in code, name
        assert not re.search(r"\b(bit|struct|cmsgpack)\s*\.", code), name


# -- documented: redis.pcall's error is a table whose err is not a Lua string ------------------


def test_pcall_error_field_type(raw: redis.Redis, fake: redis.Redis) -> None:
    raw.set("s", "x")
    fake.set("s", "x")
    probe = "local e = redis.pcall('HGET', KEYS[1], 'f') return {type(e), type(e.err)}"
    assert raw.eval(probe, 1, "s") == [b"table", b"string"]
    assert fake.eval(probe, 1, "s") == [b"table", b"userdata"]


def test_library_reads_pcall_errors_only_as_a_flag(
    memory: fencing.Client, fake: redis.Redis
) -> None:
    for name, source in library_lua().items():
        for line in lua_code(source).splitlines():
            if re.search(r"\.err\b", line):
                assert re.search(r"and \w+\.err then", line), (name, line)
    # ... which works in memory: a key of the wrong type is WrongKeyType, nothing written.
    topic = memory.topic("t", partitions=1)
    stream = metadata_of(topic).partition_keys(0).stream
    fake.set(stream, b"not a stream")
    with pytest.raises(fencing.WrongKeyType) as info, topic.producer() as p:
        p.send(b"v")
    assert (info.value.key, info.value.key_type) == (stream, "string")
    assert fake.get(stream) == b"not a stream"


# -- stream replies -----------------------------------------------------------------------------


def _raw_replies(r: redis.Redis) -> redis.Redis:
    for command in ("XRANGE", "XREAD", "XREADGROUP"):
        r.set_response_callback(command, lambda response, **options: response)
    return r


def _stream_replies(r: redis.Redis) -> dict[str, object]:
    r.delete("s")
    r.xadd("s", {"v": "a", "k": "x"}, id="0-1")
    r.xadd("s", {"v": "b"}, id="0-2")
    r.xgroup_create("s", "g", id="0")
    return {
        "xrange": command(r, "XRANGE", "s", "0-1", "+", "COUNT", 10),
        "xrange_none": command(r, "XRANGE", "s", "0-3", "+"),
        "xread": command(r, "XREAD", "COUNT", 10, "STREAMS", "s", "0-0"),
        "xread_block_timeout": command(r, "XREAD", "COUNT", 10, "BLOCK", 20, "STREAMS", "s", "0-2"),
        "xreadgroup": command(r, "XREADGROUP", "GROUP", "g", "c", "COUNT", 10, "STREAMS", "s", ">"),
        "xreadgroup_pending": command(
            r, "XREADGROUP", "GROUP", "g", "c", "COUNT", 10, "STREAMS", "s", "0"
        ),
        "lua_xrange": r.eval("return redis.call('XRANGE', KEYS[1], '-', '+')", 1, "s"),
        "lua_type": r.eval("return redis.call('TYPE', KEYS[1])['ok']", 1, "s"),
        "xtrim_minid": command(r, "XTRIM", "s", "MINID", "0-9"),
        "kept_empty": (r.exists("s"), r.type("s")),
    }


def test_stream_replies_have_the_real_shapes(raw: redis.Redis, fake: redis.Redis) -> None:
    assert _stream_replies(_raw_replies(fake)) == _stream_replies(_raw_replies(raw))


def test_an_empty_non_blocking_xread_is_an_empty_map_in_memory(
    raw: redis.Redis, fake: redis.Redis
) -> None:
    """Documented: XREAD without BLOCK that finds nothing new is nil on a real server (RESP2)
    and {} in memory. The library reads with XRANGE, and with XREAD only under BLOCK (same
    reply on both), and takes either as no records."""
    read = ("XREAD", "COUNT", 10, "STREAMS", "s", "0-1")
    for r in (_raw_replies(raw), _raw_replies(fake)):
        r.delete("s")
        r.xadd("s", {"v": "a"}, id="0-1")
    assert command(raw, *read) is None
    assert command(fake, *read) == {}


# -- documented: commands fakeredis does not have -----------------------------------------------


@pytest.mark.parametrize(
    "args",
    [("CONFIG", "GET", "maxmemory-policy"), ("WAIT", 0, 0), ("WAITAOF", 0, 0, 0), ("INFO",)],
    ids=lambda c: str(c[0]),
)
def test_commands_missing_in_memory(args: tuple[object, ...], fake: redis.Redis) -> None:
    with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
        command(fake, *args)


def test_the_eviction_check_is_off_in_memory() -> None:
    """No CONFIG GET: memory_client passes allow_eviction=True (fakeredis never evicts)."""
    strict = memory_client("strict", allow_eviction=False)
    with pytest.raises(fencing.ConfigurationError, match="maxmemory-policy"):
        strict.topic("t", partitions=1).open()
    strict.close()
    relaxed = memory_client("relaxed")
    assert relaxed.topic("t", partitions=1).partitions == 1
    relaxed.close()


# -- documented: the server clock is this process's clock --------------------------------------


def test_server_time_is_this_process_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """TIME in memory is time.time(): moving it (monkeypatch, freezegun, time-machine) moves
    every lease, which lets a test expire a lease without sleeping."""
    server = memory_server()
    client = memory_client("clock", server=server)
    raw = memory_redis(server)
    a = client.ownership("journal", owner_id="host-a", ttl=30.0)
    b = client.ownership("journal", owner_id="host-b", ttl=30.0)
    assert a.claim("r")["r"].token == 1
    with pytest.raises(fencing.OwnershipConflict):
        b.claim("r")
    before = server_ms(raw)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 31)
    assert server_ms(raw) - before >= 31_000
    assert b.claim("r")["r"].token == 2  # a's lease lapsed by the (moved) server clock
    with pytest.raises(fencing.Fenced):
        a.check("r")
    a.close()
    b.close()
    client.close()


def test_a_real_server_clock_ignores_the_client(
    client: fencing.Client, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = client.ownership("journal", owner_id="host-a", ttl=30.0)
    a.claim("r")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 31)
    with pytest.raises(fencing.OwnershipConflict):
        client.ownership("journal", owner_id="host-b", ttl=30.0).claim("r")
    a.close()


# -- pub/sub, blocking reads, a server that is down ---------------------------------------------


def test_release_notifications_hand_over_promptly_in_memory(memory: fencing.Client) -> None:
    topic = memory.topic("ctl", partitions=1)
    holder = topic.producer(AccessMode.EXCLUSIVE, name="a", lease_ttl=30.0)
    got: list[fencing.Producer] = []
    waiter = threading.Thread(
        target=lambda: got.append(
            topic.producer(AccessMode.WAIT_FOR_EXCLUSIVE, name="b", wait_timeout=20)
        )
    )
    waiter.start()
    time.sleep(0.3)  # queued behind a 30 s lease: only the notification can wake it soon
    closed = time.monotonic()
    holder.close()
    waiter.join(20)
    assert got, "the waiter was not woken"
    assert time.monotonic() - closed < 10.0  # by the notification, not the 30 s lease
    assert got[0].epoch(0) == 2
    got[0].close()


def test_a_blocking_read_is_woken_by_a_send_in_memory(memory: fencing.Client) -> None:
    topic = memory.topic("feed", partitions=1)
    reader = topic.reader(0, "latest")
    with topic.producer() as p:
        timer = threading.Timer(0.2, lambda: p.send(b"late"))
        timer.start()
        started = time.monotonic()
        records = reader.read(block_ms=30_000)
        timer.join()
    assert [(r.offset, r.value) for r in records] == [(0, b"late")]
    assert time.monotonic() - started < 10.0  # woken by the send, not the 30 s block


def test_a_server_that_is_down_is_unavailable_and_nothing_applied() -> None:
    """``server.connected = False`` makes a memory server unreachable: every call fails
    before its request leaves, so it is Unavailable (never OutcomeUnknown) and nothing is
    applied. Lost replies cannot be simulated in memory (use fencing.faults.Proxy)."""
    server = memory_server()
    client = memory_client("down", server=server)
    topic = client.topic("t", partitions=1)
    with topic.producer() as p:
        p.send(b"a")
        server.connected = False
        with pytest.raises(fencing.Unavailable) as info:
            p.send(b"b")
        assert not isinstance(info.value, fencing.OutcomeUnknown)
        server.connected = True
        assert p.send(b"c").offset == 1
    assert [r.value for r in topic.reader(0, 0).read()] == [b"a", b"c"]
    client.close()


def test_scripts_are_reloaded_after_script_flush_in_memory(
    memory: fencing.Client, fake: redis.Redis
) -> None:
    topic = memory.topic("t", partitions=1)
    with topic.producer() as p:
        p.send(b"a")
        fake.script_flush()
        assert p.send(b"b").offset == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_to_its_own_copy() -> None:
    """Documented: the memory server lives in the test process; a forked child gets a copy
    (multi-process tests need the embedded or docker backend)."""
    client = memory_client("fork")
    topic = client.topic("t", partitions=1)
    with topic.producer() as p:
        p.send(b"parent")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            with client.topic("t").producer() as child:
                code = 0 if child.send(b"child").offset == 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # the child wrote at offset 1 ...
    assert [r.value for r in topic.reader(0, 0).read()] == [b"parent"]  # ... in its copy
    client.close()

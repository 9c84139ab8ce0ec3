"""fakeredis glue: in-memory servers that run the library's Lua scripts as Redis 7 does.

Imported only when an in-memory client is asked for (fakeredis is an optional dependency).

Two workarounds live here, each for a fakeredis behaviour that would otherwise change what
the library does (docs/how-to/testing.md lists every difference):

- **Lua globals.** fakeredis runs every script of one ``FakeServer`` in one shared Lua state,
  and checks for new globals only after the script (or at its next ``redis.call``): the
  script that assigns one is refused, but the global stays, and every later script on that
  server fails with "Script attempted to set global variables". Redis 7 and Valkey 8 refuse
  the assignment itself, and the read of a global that does not exist.
  :func:`guard_globals` gives a ``FakeServer`` the same rule through an ordinary EVAL (a
  metatable on ``_G``), so one faulty script never poisons the scripts that run after it.
- **Prompt pub/sub bookkeeping.** The client's notification listener waits on its socket and
  on a wake-up socket together; a fakeredis connection has no socket, so the listener polls
  it, ``_POLL_SECONDS`` (0.25 s) at a time, and a new subscription or an unsubscribe waits for
  that poll to end: every ``WAIT_FOR_EXCLUSIVE`` handover, waiting claim and campaign took
  0.25 s longer. :class:`PromptConnection` caps each poll at :data:`POLL_STEP` seconds.
"""

from __future__ import annotations

import fakeredis
import lupa  # type: ignore[import-untyped]  # noqa: F401 - scripts need it: fail early without

#: The version a memory server reports (the oldest Redis the library supports).
DEFAULT_VERSION: tuple[int, int] = (7, 0)

#: The longest a fencing client's connection waits in one ``can_read`` on a memory server.
POLL_STEP = 0.01

#: Makes ``_G`` read-only for scripts, with the messages of Redis 7 and Valkey 8. KEYS and ARGV
#: are assigned by fakeredis itself before every script, so they stay assignable.
GUARD_GLOBALS_LUA = """
if getmetatable(_G) == nil then
  setmetatable(_G, {
    __newindex = function(t, name, value)
      if name == 'KEYS' or name == 'ARGV' then
        rawset(t, name, value)
        return
      end
      error('Attempt to modify a readonly table (global ' .. tostring(name) .. ')', 2)
    end,
    __index = function(_, name)
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end,
  })
end
return 1
"""


class PromptConnection(fakeredis.FakeRedisConnection):
    """A fakeredis connection whose ``can_read`` waits at most :data:`POLL_STEP` seconds.

    Used for the fencing client's own connections only (it clones its pools from the
    connection class of the client it was given): the notification listener then looks at
    its wanted channels at least every ``POLL_STEP`` instead of every 0.25 s.
    """

    def can_read(self, timeout: float | None = 0) -> bool:
        if timeout is None or timeout > POLL_STEP:
            timeout = POLL_STEP
        return super().can_read(timeout)


def new_server(
    version: tuple[int, ...] = DEFAULT_VERSION, server_type: str = "redis"
) -> fakeredis.FakeServer:
    """A fresh, empty in-memory server whose scripts cannot leave globals behind."""
    server = fakeredis.FakeServer(version=version, server_type=server_type)  # type: ignore[arg-type]
    guard_globals(server)
    return server


def guard_globals(server: fakeredis.FakeServer) -> None:
    """Make ``server``'s Lua globals read-only, as on Redis 7 (idempotent)."""
    probe = sync_redis(server)
    try:
        probe.eval(GUARD_GLOBALS_LUA, 0)
    finally:
        probe.close()


def sync_redis(
    server: fakeredis.FakeServer, *, prompt: bool = False, decode_responses: bool = False
) -> fakeredis.FakeRedis:
    """A redis-py client on ``server``; ``prompt``: with :class:`PromptConnection`."""
    return fakeredis.FakeRedis(
        server=server,
        version=server.version,
        server_type=server.server_type,
        connection_class=PromptConnection if prompt else fakeredis.FakeRedisConnection,
        decode_responses=decode_responses,
    )


def async_redis(server: fakeredis.FakeServer) -> fakeredis.FakeAsyncRedis:
    """A ``redis.asyncio`` client on ``server``."""
    return fakeredis.FakeAsyncRedis(
        server=server, version=server.version, server_type=server.server_type
    )

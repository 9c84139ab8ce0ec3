"""The sync driver: executes protocol calls against one redis-py client. Nothing else.

Scripts run as EVALSHA on connections the driver holds (taken from the client's own pool
once, then reused): redis-py's per-command path (pool checkout with a readiness poll,
observability hooks, generic argument packing) costs several times the packing, send and
read of the call itself, and every send pays it. A NOSCRIPT reply is answered with one EVAL
of the full source, which also caches it. A connection whose call failed in any way other
than an error reply is disconnected before it is reused, so a late reply can never be read
as the answer to the next call. Error
replies of the library's scripts become typed exceptions through the call's own mapping;
connection errors are retried within a :class:`~fencing.retry.RetryBudget`, and when the
budget runs out a mutating call raises :class:`~fencing.errors.OutcomeUnknown`, a read-only
one :class:`~fencing.errors.Unavailable`.
"""

from __future__ import annotations

import os
import time
from typing import Any, TypeVar

import redis
import redis.exceptions
from redis.connection import AbstractConnection

from .errors import FencingError, OutcomeUnknown, Unavailable
from .lua_loader import LuaScript
from .protocol.base import ReadCall, ScriptArg, ScriptCall, parse_error_reply
from .retry import TRANSIENT_ERRORS, RetryBudget

_pack_command: Any  # hiredis's stub types it for one-element tuples only
try:
    from hiredis import pack_command as _pack_command
except ImportError:  # pragma: no cover - hiredis is a dependency; plain redis-py works too
    _pack_command = None

T = TypeVar("T")


class SyncDriver:
    """Runs :class:`ScriptCall` objects on a redis-py client."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._pool = client.connection_pool
        # Idle connections of the script path (list.pop/append are atomic under the GIL).
        self._idle: list[AbstractConnection] = []
        self._pid = os.getpid()

    @property
    def redis(self) -> redis.Redis:
        """The redis-py client this driver uses (retries off, bounded timeouts)."""
        return self._client

    def _connection(self) -> AbstractConnection:
        if self._pid != os.getpid():
            # A forked child never touches its parent's sockets (the pool resets itself).
            self._idle, self._pid = [], os.getpid()
        try:
            return self._idle.pop()
        except IndexError:
            return self._pool.get_connection()

    def _evalsha(
        self, script: LuaScript, keys: tuple[str, ...], args: tuple[ScriptArg, ...]
    ) -> Any:
        """EVALSHA on a held connection; EVAL once if the server does not know the script."""
        conn: Any = self._connection()  # redis-py's connection methods are untyped
        try:
            conn.send_packed_command(_pack(conn, ("EVALSHA", script.sha1, len(keys), *keys, *args)))
            try:
                reply = conn.read_response()
            except redis.exceptions.NoScriptError:
                conn.send_packed_command(
                    _pack(conn, ("EVAL", script.source, len(keys), *keys, *args))
                )
                reply = conn.read_response()
        except redis.exceptions.ResponseError:
            self._idle.append(conn)  # an error reply was read whole: the connection is clean
            raise
        except BaseException:
            conn.disconnect()  # a reply may still be on its way: never read it as another's
            self._idle.append(conn)  # reconnects on its next use
            raise
        self._idle.append(conn)
        return reply

    def execute_once(self, call: ScriptCall[T]) -> T:
        """One attempt: run the script, parse the reply or raise the typed error."""
        try:
            reply = self._evalsha(call.script, call.keys, call.args)
        except redis.exceptions.ResponseError as exc:
            error = parse_error_reply(str(exc))
            if error is None:
                raise server_refusal(call.script.name, exc) from exc
            raise call.error(error) from None
        return call.parse(reply)

    def read(self, call: ReadCall[T], budget: RetryBudget) -> T:
        """Send a read's commands in one pipeline, retrying transient errors within budget."""
        try:
            for attempt in budget.retrying():
                with attempt:
                    pipe = self._client.pipeline(transaction=False)
                    for command in call.commands:
                        pipe.execute_command(*command)  # type: ignore[no-untyped-call]
                    try:
                        replies = pipe.execute()
                    except redis.exceptions.ResponseError as exc:
                        raise server_refusal("read", exc) from exc
                    return call.parse(replies)
        except TRANSIENT_ERRORS as exc:
            raise Unavailable(
                f"Redis unreachable within the retry budget ({budget.deadline:.3f}s): {exc}"
            ) from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

    def execute(self, call: ScriptCall[T], budget: RetryBudget) -> T:
        """Run a call, retrying transient errors within ``budget``.

        The first attempt runs without the retry engine (the hot path pays nothing for
        it); only a transient error enters the tenacity loop, which resends the very
        same call (same PID and sequence, same session and token), so a retry after a
        lost reply is harmless.
        """
        started = time.monotonic()
        try:
            return self.execute_once(call)
        except TRANSIENT_ERRORS:
            pass
        spent = time.monotonic() - started
        try:
            for attempt in budget.retrying(spent=spent, attempts_made=1):
                with attempt:
                    try:
                        return self.execute_once(call)
                    except FencingError as refusal:
                        if call.ambiguous_after_retry:
                            # An earlier attempt may have been applied before this refusal
                            # (say: the append landed, its reply was lost, then another
                            # producer took over). Telling "fenced" would hide a write.
                            raise OutcomeUnknown(
                                f"{call.script.name}: an attempt may have been applied "
                                f"before its reply was lost, and the retry was refused "
                                f"({refusal})"
                            ) from refusal
                        raise
        except TRANSIENT_ERRORS as exc:
            if call.mutating:
                raise OutcomeUnknown(
                    f"{call.script.name}: no reply from Redis within the retry budget "
                    f"({budget.deadline:.3f}s): {exc}. The request may or may not have been "
                    "applied; the same call is safe to repeat once the server is reachable"
                ) from exc
            raise Unavailable(
                f"{call.script.name}: Redis unreachable within the retry budget "
                f"({budget.deadline:.3f}s): {exc}"
            ) from exc
        raise AssertionError("unreachable: tenacity either returns or raises")


def _pack(conn: Any, command: tuple[ScriptArg, ...]) -> list[bytes]:
    """The wire form of one command (hiredis's packer: a third of redis-py's cost)."""
    if _pack_command is not None:
        return [_pack_command(command)]
    return list(conn.pack_command(*command))  # pragma: no cover


# Refusals by the server itself (not by a script's checks): nothing was applied.
_NOT_APPLIED = (
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.BusyLoadingError,
)
_NOT_APPLIED_PREFIXES = ("MASTERDOWN", "BUSY", "LOADING", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN")


def server_refusal(script: str, exc: redis.exceptions.ResponseError) -> FencingError:
    """A typed error for a server refusal that no script check produced."""
    message = str(exc)
    if isinstance(exc, _NOT_APPLIED) or message.startswith(_NOT_APPLIED_PREFIXES):
        return Unavailable(
            f"{script}: Redis refused the call and applied nothing ({message}): out of "
            "memory under maxmemory-policy noeviction, a read-only replica after a failover, "
            "or a server that is loading or busy. Fix the server, then retry"
        )
    return FencingError(f"{script}: unexpected reply from Redis: {message}")

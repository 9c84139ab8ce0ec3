"""The driver: executes protocol calls against one redis-py client. Nothing else.

Scripts run as EVALSHA packed by hiredis and sent on a connection of the script path
(:mod:`fencing.connections`: what redis-py's pool guarantees at checkout, without its cost):
redis-py's per-command path around a call (command parsing, observability hooks, generic
argument packing, the pool's checkout and release) cost several times the call itself, and
every send paid it. A NOSCRIPT reply is answered by SCRIPT LOAD and the EVALSHA again (an
EVALSHA refused with NOSCRIPT did not run). A connection whose call failed in any way other
than an error reply is disconnected before it is used again, so a late reply can never be
read as the answer to another call. Error
replies of the library's scripts become typed exceptions through the call's own mapping;
connection errors are retried within a :class:`~fencing._retry.RetryBudget`, and when the
budget runs out a mutating call raises :class:`~fencing.errors.OutcomeUnknown`, a read-only
one :class:`~fencing.errors.Unavailable`.

A call that is not safe to send twice (``resend_safe=False``: an append with no sequence) is
resent only while its request cannot have reached the server (the connection could not be
made); once it may have been delivered, a failure is OutcomeUnknown at once (G5: an unknown
outcome never becomes a silent duplicate).
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

import redis.asyncio
import redis.exceptions

from .._durability import Durability
from .._keys import deletion_mark_of
from .._lua_loader import LuaScript
from .._protocol.base import ReadCall, ScriptArg, ScriptCall, parse_error_reply
from .._protocol.partition_errors import deleted_partition
from .._protocol.refusals import (
    AUTH_ERRORS,
    NotDelivered,
    auth_refusal,
    is_redirect,
    may_have_arrived,
    server_refusal,
    wrong_type_read,
)
from .._retry import TRANSIENT_ERRORS, RetryBudget
from .._runtime.tasks import cluster as runtime_cluster
from .._runtime.tasks import primitives as runtime
from .._runtime.tasks.connections import ScriptConnections
from ..errors import (
    FencingError,
    NotEnoughReplicas,
    OutcomeUnknown,
    StateLost,
    Unavailable,
)
from .routes import ClusterRoutes

_pack_command: Any  # hiredis's stub types it for one-element tuples only
try:
    from hiredis import pack_command as _pack_command
except ImportError:  # pragma: no cover - hiredis is a dependency; plain redis-py works too
    _pack_command = None

T = TypeVar("T")


class Driver:
    """Runs :class:`ScriptCall` objects on a redis-py client."""

    def __init__(
        self,
        client: Any,
        scripts: redis.asyncio.ConnectionPool | None = None,
        *,
        routes: ClusterRoutes | None = None,
    ) -> None:
        """``client``: a ``redis.asyncio.Redis`` (or, with ``routes``, a cluster client);
        ``scripts``: a pool for the script path alone (else scripts use the client's);
        ``routes``: on a cluster, the script path of each primary."""
        self._client = client
        self._routes = routes
        self._scripts: ScriptConnections | None = None
        encoding = "utf-8"
        if routes is None:
            self._scripts = (
                ScriptConnections(client.connection_pool, own_pool=False)
                if scripts is None
                else ScriptConnections(
                    scripts, wait=float(scripts.connection_kwargs.get("socket_timeout") or 1.0)
                )
            )
            encoding = str(client.connection_pool.connection_kwargs.get("encoding", "utf-8"))
        # hiredis encodes str arguments as UTF-8; any other client encoding packs through
        # redis-py, as every other command of that client does.
        self._hiredis = _pack_command is not None and encoding.lower() in ("utf-8", "utf8")

    @property
    def redis(self) -> Any:
        """The redis-py client this driver uses (retries off, bounded timeouts)."""
        return self._client

    async def _evalsha(
        self,
        script: LuaScript,
        keys: tuple[str, ...],
        args: tuple[ScriptArg, ...],
        wait: tuple[ScriptArg, ...] | None = None,
    ) -> Any:
        """EVALSHA on a script connection; on NOSCRIPT, SCRIPT LOAD and EVALSHA again.

        With ``wait`` (a WAIT or WAITAOF command), the wait is sent right behind the script
        on the same connection, in the same round trip, and ``(reply, wait reply)`` is
        returned (the wait's reply is always read, so the connection stays clean).

        On a cluster, an ASK reply (the slot is migrating and the script's keys are not on
        the source node, which ran nothing) is followed once: ASKING and the script on the
        node it names, without remapping the slot (it still belongs to the source)."""
        routes = self._routes
        if routes is None:
            assert self._scripts is not None
            return await self._run_on(self._scripts, script, keys, args, wait)
        connections = await routes.for_key(keys[0])
        try:
            return await self._run_on(connections, script, keys, args, wait)
        except redis.exceptions.AskError as ask:
            target = routes.for_node(ask.node_addr)
            return await self._run_on(target, script, keys, args, wait, asking=True)

    async def _run_on(
        self,
        connections: ScriptConnections,
        script: LuaScript,
        keys: tuple[str, ...],
        args: tuple[ScriptArg, ...],
        wait: tuple[ScriptArg, ...] | None,
        *,
        asking: bool = False,
    ) -> Any:
        """:meth:`_evalsha` on one node's script connections (``asking``: an ASK target)."""
        routes = self._routes
        try:
            conn = await connections.checkout()  # a new connection is connected by the pool here
        except AUTH_ERRORS as exc:
            raise auth_refusal(exc) from exc
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            if routes is not None:
                await routes.failed(connections)  # a dead primary: the slot may have moved
            raise NotDelivered(str(exc)) from exc
        command = ("EVALSHA", script.sha1, len(keys), *keys, *args)
        try:
            try:
                await connections.connect(conn)
            except AUTH_ERRORS as exc:
                raise auth_refusal(exc) from exc
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                if routes is not None:
                    await routes.failed(connections)
                raise NotDelivered(str(exc)) from exc
            if wait is not None or asking:
                return await self._pipelined(conn, script, command, wait, asking)
            try:
                await conn.send_packed_command(self._pack(conn, command))
                return await conn.read_response()
            except redis.exceptions.NoScriptError:
                await conn.send_packed_command(self._pack(conn, ("SCRIPT", "LOAD", script.source)))
                await conn.read_response()
                await conn.send_packed_command(self._pack(conn, command))
                return await conn.read_response()
        except redis.exceptions.ResponseError as exc:
            # An error reply was read whole: the connection is clean.
            if routes is not None and is_redirect(exc):
                if isinstance(exc, redis.exceptions.AskError) and not asking:
                    raise  # followed by _evalsha, on the node the ASK names
                # Not run on this node (MOVED, a failover): map the slots again and send
                # it anew, like a request that never left (the retry budget bounds it).
                await routes.refresh()
                raise NotDelivered(f"{script.name}: {exc}") from exc
            raise
        except BaseException as exc:
            # A reply may still be on its way (a lost reply, an interrupt, a cancelled
            # task): never read it as the answer to another call.
            await connections.drop(conn)
            if routes is not None and isinstance(exc, TRANSIENT_ERRORS):
                await routes.failed(connections)  # the primary may be gone: map again
            raise
        finally:
            await connections.checkin(conn)

    async def _pipelined(
        self,
        conn: Any,
        script: LuaScript,
        command: tuple[ScriptArg, ...],
        wait: tuple[ScriptArg, ...] | None,
        asking: bool,
    ) -> Any:
        """The script behind ASKING (an ASK target) and/or followed by ``wait``, in one
        round trip; every reply is read, so the connection stays clean. Returns the
        script's reply, or ``(reply, wait reply)`` with a ``wait``."""
        commands = (
            ((("ASKING",),) if asking else ()) + (command,) + (() if wait is None else (wait,))
        )
        for attempt in range(2):
            await conn.send_packed_command(self._pack_many(conn, commands))
            replies = []
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except redis.exceptions.ResponseError as exc:
                    replies.append(exc)
            if asking:
                replies.pop(0)
            reply = replies[0]
            if isinstance(reply, redis.exceptions.NoScriptError) and attempt == 0:
                await conn.send_packed_command(self._pack(conn, ("SCRIPT", "LOAD", script.source)))
                await conn.read_response()
                continue
            if isinstance(reply, BaseException):
                raise reply
            return reply if wait is None else (reply, replies[1])
        raise AssertionError("unreachable: the script was loaded before the second attempt")

    def _pack_many(self, conn: Any, commands: tuple[tuple[ScriptArg, ...], ...]) -> Any:
        if self._hiredis:
            return [_pack_command(command) for command in commands]
        return conn.pack_commands(commands)

    async def close(self) -> None:
        """Disconnect every connection of this driver."""
        if self._scripts is not None:
            await self._scripts.close()
        if self._routes is not None:
            await self._routes.close()
            await runtime_cluster.close(self._client)
        else:
            await self._client.connection_pool.disconnect()

    def _pack(self, conn: Any, command: tuple[ScriptArg, ...]) -> Any:
        if self._hiredis:
            return [_pack_command(command)]
        return conn.pack_command(*command)

    async def execute_once(
        self,
        call: ScriptCall[T],
        durability: Durability | None = None,
        *,
        resent: bool = False,
        arrived: bool = False,
    ) -> T:
        """One attempt: run the script, parse the reply or raise the typed error; with a
        ``durability`` that waits, raise NotEnoughReplicas when the wait fell short.

        A ``resent`` call's wait cannot vouch for the write: the server counts only the
        writes of the connection the wait runs on, and the write may have been made by the
        earlier attempt on another one (the resend then finds it and writes nothing). Such
        a call that succeeded is NotEnoughReplicas (an OutcomeUnknown): a producer's next
        send settles it, and that send's own wait covers it. Once an earlier attempt may
        have ``arrived``, the call's ``resent_args`` are sent."""
        mark = runtime.cancel_mark()
        wait = None if durability is None else durability.command
        try:
            args = call.resent_args if arrived and call.resent_args is not None else call.args
            reply = await self._evalsha(call.script, call.keys, args, wait)
            runtime.check_cancel(mark)
        except redis.exceptions.ResponseError as exc:
            # A refusal is an answer too: a cancellation dropped as it arrived is raised
            # here, or a cancelled waiter would take the refusal as its cue to wait on.
            runtime.check_cancel(mark)
            error = parse_error_reply(str(exc))
            if error is None:
                raise server_refusal(
                    call.script.name, exc, call.keys, call.script.source
                ) from exc
            refusal = call.error(error)
            if isinstance(refusal, StateLost) and refusal.reason in ("missing", "incarnation"):
                refusal = await self.deleted(call.keys, error.fields.get("seen", ""), refusal)
            raise refusal from None
        except Exception:
            runtime.check_cancel(mark)  # (a cancelled call is not retried as a failed one)
            raise
        if wait is None:
            return call.parse(reply)
        reply, waited = reply
        parsed = call.parse(reply)
        assert durability is not None
        if isinstance(waited, redis.exceptions.ResponseError):
            # The write was applied: its outcome is unknown (never a refusal, which would
            # tell that nothing was written and let its sequences be used again).
            raise NotEnoughReplicas(
                f"{call.script.name}: applied on the primary, but the server refused the "
                f"acks={durability.acks!r} wait ({waited}). Use acks='leader', or a server "
                "that has WAITAOF (Redis/Valkey 7.2+) with appendonly yes for acks='fsync'",
                acks=durability.acks,
                wanted=durability.replicas if durability.acks == "replicated" else 1,
                confirmed=0,
            )
        durability.check(call.script.name, waited)
        if resent:
            raise NotEnoughReplicas(
                f"{call.script.name}: applied on the primary, but its first attempt's reply "
                f"was lost, and the wait of the resend cannot vouch for acks="
                f"{durability.acks!r} (a server counts only the writes of the connection "
                "it waits on). It may not survive a failover; the next send settles it",
                acks=durability.acks,
                wanted=durability.replicas if durability.acks == "replicated" else 1,
                confirmed=0,
            )
        return parsed

    async def deleted(self, keys: tuple[str, ...], seen: str, lost: StateLost) -> StateLost:
        """``lost`` as the delete it was, if the partition incarnation the call named
        (``seen``) is in its delete marks: an operator's delete, not lost writes. The mark
        is written with the delete, in the same script, so one that is there is the cause;
        a mark that expired, or a store that lost it too, leaves ``lost`` as it is. Every
        handle's StateLost of a partition (sends, reads, polls, commits) is worded here."""
        found = deletion_mark_of(keys)
        if found is None or not seen:
            return lost
        mark, resource = found
        try:
            deleted = await self._client.hget(mark, seen)
        except (redis.exceptions.RedisError, OSError):
            return lost  # (the mark only words the error better)
        if deleted is None:
            return lost
        try:
            deleted_ms = int(deleted)
        except ValueError:
            return lost
        return deleted_partition(resource, lost.key, deleted_ms)

    async def read(self, call: ReadCall[T], budget: RetryBudget) -> T:
        """Send a read's commands in one pipeline, retrying transient errors within budget.

        As for :meth:`execute`, the first attempt runs without the retry engine."""
        started = time.monotonic()
        try:
            return await self._read_once(call)
        except TRANSIENT_ERRORS:
            pass
        spent = time.monotonic() - started
        try:
            async for attempt in budget.retrying_async(spent=spent, attempts_made=1):
                with attempt:
                    return await self._read_once(call)
        except TRANSIENT_ERRORS as exc:
            raise Unavailable(
                f"Redis unreachable within the retry budget ({budget.deadline:.3f}s): {exc}"
            ) from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _read_once(self, call: ReadCall[T]) -> T:
        commands = call.commands
        try:
            mark = runtime.cancel_mark()
            if self._scripts is not None and not call.blocking_ms:
                replies = await self._read_direct(self._scripts, commands)
            elif len(commands) == 1:
                replies = [await self._client.execute_command(*commands[0])]
            else:
                pipe = self._client.pipeline(transaction=False)
                for command in commands:
                    pipe.execute_command(*command)  # type: ignore[no-untyped-call, unused-ignore]
                replies = await pipe.execute()
            runtime.check_cancel(mark)
        except AUTH_ERRORS as exc:
            raise auth_refusal(exc) from exc
        except redis.exceptions.ResponseError as exc:
            runtime.check_cancel(mark)  # (as for a script call's refusal)
            if "WRONGTYPE" in str(exc):
                raise wrong_type_read(call) from exc
            keys = tuple(str(command[1]) for command in commands if len(command) > 1)
            raise server_refusal("read", exc, keys) from exc
        except Exception:
            runtime.check_cancel(mark)  # (a cancelled read is not retried as a failed one)
            raise
        return call.parse(replies)

    async def _read_direct(
        self, connections: ScriptConnections, commands: tuple[tuple[Any, ...], ...]
    ) -> list[Any]:
        """A read that cannot block, on a connection of the script path, packed by hiredis
        and read back without redis-py's pipeline and reply callbacks: for a reader's page,
        those cost more than the round trip. Every reply is read (the connection stays
        clean); the first error reply is raised."""
        conn = await connections.checkout()
        try:
            await connections.connect(conn)
            await conn.send_packed_command(self._pack_many(conn, commands))
            replies: list[Any] = []
            error: redis.exceptions.ResponseError | None = None
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except redis.exceptions.ResponseError as exc:
                    error = error or exc
                    replies.append(None)
        except BaseException:
            # A reply may still be on its way: never read it as the answer to another call.
            await connections.drop(conn)
            raise
        finally:
            await connections.checkin(conn)
        if error is not None:
            raise error
        return replies

    async def execute(
        self, call: ScriptCall[T], budget: RetryBudget, durability: Durability | None = None
    ) -> T:
        """Run a call, retrying transient errors within ``budget``.

        The first attempt runs without the retry engine (the hot path pays nothing for
        it); only a transient error enters the tenacity loop, which resends the very
        same call (same PID and sequence, same session and token), so a retry after a
        lost reply is harmless.
        """
        started = time.monotonic()
        try:
            return await self.execute_once(call, durability)
        except TRANSIENT_ERRORS as exc:
            maybe_applied = may_have_arrived(call, exc)
        spent = time.monotonic() - started
        try:
            async for attempt in budget.retrying_async(spent=spent, attempts_made=1):
                with attempt:
                    try:
                        arrived = maybe_applied and (
                            time.monotonic() - started >= call.resent_after
                        )
                        return await self.execute_once(
                            call, durability, resent=True, arrived=arrived
                        )
                    except TRANSIENT_ERRORS as exc:
                        maybe_applied = may_have_arrived(call, exc) or maybe_applied
                        raise
                    except FencingError as refusal:
                        if (
                            call.ambiguous_after_retry
                            and maybe_applied
                            and not isinstance(refusal, call.unapplied_refusals)
                            # The store lost writes (or the topic was deleted): whatever an
                            # earlier attempt did, that is what the handle must learn (G9).
                            and not isinstance(refusal, StateLost)
                        ):
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
            if call.mutating and maybe_applied:
                raise OutcomeUnknown(
                    f"{call.script.name}: no reply from Redis within the retry budget "
                    f"({budget.deadline:.3f}s): {exc}. The request may or may not have been "
                    "applied; the same call is safe to repeat once the server is reachable"
                ) from exc
            raise Unavailable(
                f"{call.script.name}: Redis unreachable within the retry budget "
                f"({budget.deadline:.3f}s): {exc}. No attempt reached it: nothing was applied"
                if call.mutating
                else f"{call.script.name}: Redis unreachable within the retry budget "
                f"({budget.deadline:.3f}s): {exc}"
            ) from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

"""What a failed call means: whether its request may have reached the server, and the typed
error for a refusal by the server itself. No I/O: shared by the sync and async drivers."""

from __future__ import annotations

import re
from typing import Any

import redis.exceptions

from ..errors import ConfigurationError, FencingError, OutcomeUnknown, Unavailable, WrongKeyType
from .base import ReadCall, ScriptCall


class NotDelivered(redis.exceptions.ConnectionError):
    """The connection could not be made: the request never left this process."""


def may_have_arrived(call: ScriptCall[Any], exc: BaseException) -> bool:
    """Whether a failed attempt's request may have reached the server; raises
    OutcomeUnknown at once when such a call must not be sent again."""
    if isinstance(exc, NotDelivered):
        return False
    if not call.resend_safe:
        raise OutcomeUnknown(
            f"{call.script.name}: the connection failed after the request was sent ({exc}), "
            "so it may have been applied. It is not sent again: without a sequence (a "
            "producer made with idempotent=False) a resend could append it twice. Read the "
            "partition to see whether it landed, or use an idempotent producer, whose "
            "resends are deduplicated"
        ) from exc
    return True


# Refusals by the server itself (not by a script's checks): nothing was applied.
_NOT_APPLIED = (
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.BusyLoadingError,
)
_NOT_APPLIED_PREFIXES = ("MASTERDOWN", "BUSY", "LOADING", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN")


def wrong_type_read(call: ReadCall[Any]) -> WrongKeyType:
    keys = sorted({str(command[1]) for command in call.commands if len(command) > 1})
    return WrongKeyType(
        f"one of the keys {keys} holds a Redis type that redis-fencing does not keep there: "
        "another program uses this name; choose another namespace or remove that key",
        key=keys[0] if keys else "",
        key_type="unknown",
    )


#: Refusals of the credentials a client connects with: retrying cannot help.
AUTH_ERRORS = (
    redis.exceptions.AuthenticationError,
    redis.exceptions.AuthenticationWrongNumberOfArgsError,
)


def auth_refusal(exc: BaseException) -> ConfigurationError:
    """The typed error of a server that refused the client's credentials (never retried: a
    wrong password stays wrong)."""
    return ConfigurationError(
        f"Redis refused the client's credentials ({exc}): check the user name and password "
        "in the URL (redis://USER:PASSWORD@HOST:PORT/DB, or FENCING_REDIS_URL), and that the "
        "user exists and is enabled (ACL SETUSER <user> on >PASSWORD ...)"
    )


# What a script's redis.call meets when the user may not run the command (Redis 7.0 words
# it without the NOPERM code), and where: "... script: <sha>, on @user_script:<line>."
_SCRIPT_NOPERM = re.compile(r"user executing the script can't run|^NOPERM", re.IGNORECASE)
_SCRIPT_LINE = re.compile(r"@user_script:(\d+)")
_CALLED = re.compile(r"redis\.p?call\(\s*'([A-Za-z]+)'")


def _refused_command(message: str, source: str) -> str | None:
    """The command a script's refused line calls, found in the script's source."""
    line = _SCRIPT_LINE.search(message)
    if line is None or not source:
        return None
    lines = source.splitlines()
    number = int(line.group(1))
    if not 0 < number <= len(lines):
        return None
    called = _CALLED.findall(lines[number - 1])
    return called[0].lower() if len(called) == 1 else None


def server_refusal(
    script: str, exc: redis.exceptions.ResponseError, keys: tuple[str, ...] = (), source: str = ""
) -> FencingError:
    """A typed error for a server refusal that no script check produced (``keys``: the
    call's keys, whose prefix names the namespace an ACL user lacks; ``source``: the
    script's source, whose refused line names the command an ACL user lacks)."""
    message = str(exc)
    namespace = keys[0].split(":", 1)[0] if keys else "<namespace>"
    if _SCRIPT_NOPERM.search(message) and "run this command" in message:
        command = _refused_command(message, source)
        if command is not None:
            return ConfigurationError(
                f"{script}: the Redis user may not run {command.upper()}, which the script "
                f"calls ({message}). Grant it: ACL SETUSER <user> +{command} "
                f"(fencing.acl.acl_rule({namespace!r}) lists every right a user of "
                "redis-fencing needs)"
            )
    if isinstance(exc, redis.exceptions.NoPermissionError) or _SCRIPT_NOPERM.search(message):
        return ConfigurationError(
            f"{script}: the Redis user may not do this ({message}). A user of redis-fencing "
            f"needs the rights that fencing.acl.acl_rule({namespace!r}) lists: the keys and "
            f"channels under '{namespace}:*' and the commands of fencing.acl.COMMANDS. Grant "
            f"them (ACL SETUSER <user> *acl_rule({namespace!r}, password=...)), or connect "
            "with the namespace the user was made for"
        )
    if isinstance(exc, _NOT_APPLIED) or message.startswith(_NOT_APPLIED_PREFIXES):
        return Unavailable(
            f"{script}: Redis refused the call and applied nothing ({message}): out of "
            "memory under maxmemory-policy noeviction, a read-only replica after a failover, "
            "or a server that is loading or busy. Fix the server, then retry"
        )
    return FencingError(f"{script}: unexpected reply from Redis: {message}")


#: Replies of a cluster node that did not run the command: the slot is served elsewhere
#: (MOVED, ASK), or the cluster is between states (TRYAGAIN, CLUSTERDOWN).
_REDIRECTS = ("MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN")


def is_redirect(exc: redis.exceptions.ResponseError) -> bool:
    """Whether a cluster node refused a command without running it (see ``_REDIRECTS``)."""
    return str(exc).startswith(_REDIRECTS) or isinstance(
        exc,
        (
            redis.exceptions.MovedError,
            redis.exceptions.AskError,
            redis.exceptions.TryAgainError,
            redis.exceptions.ClusterDownError,
        ),
    )

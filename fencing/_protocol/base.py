"""Script calls and error replies, shared by every operation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .._codes import CODES
from .._lua_loader import LuaScript
from ..errors import FencingError, UnknownTopic, WrongKeyType

T = TypeVar("T")

ScriptArg = str | int | bytes


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """A library error reply from a script: its code and named fields."""

    code: str
    fields: dict[str, str]
    message: str

    def int(self, name: str) -> int:
        """A field as an integer."""
        return int(self.fields[name])


def parse_error_reply(message: str) -> ErrorReply | None:
    """Parse ``"<CODE> <field> ..."``; None when the message is not one of the library's.

    >>> parse_error_reply("FENCED 3 4 host-b").fields
    {'token': '3', 'holder_token': '4', 'holder_label': 'host-b'}
    """
    code, _, rest = message.partition(" ")
    spec = CODES.get(code)
    if spec is None:
        return None
    n = len(spec.fields)
    values = rest.split(" ", n - 1) if n else []
    values += [""] * (n - len(values))
    return ErrorReply(
        code=code, fields=dict(zip(spec.fields, values, strict=True)), message=message
    )


def generic_error(reply: ErrorReply) -> FencingError:
    """The exception for codes that mean the same whatever the operation."""
    if reply.code == "WRONG_TYPE":
        key = reply.fields["key"]
        key_type = reply.fields["key_type"]
        return WrongKeyType(
            f"key {key!r} holds a Redis {key_type}, not what redis-fencing keeps there: "
            "another program uses this name; choose another namespace or remove that key",
            key=key,
            key_type=key_type,
        )
    if reply.code == "TOPIC_DELETING":
        return UnknownTopic(
            f"the topic of {reply.fields['key']!r} is being deleted (client.delete_topic "
            "has not finished): nothing was opened or written. Open it again once the "
            "delete returns; if the delete was cut short, run it again to finish it",
            topic="",
            deleting=True,
        )
    return FencingError(f"unexpected reply from a redis-fencing script: {reply.message}")


@dataclass(frozen=True, slots=True)
class ScriptCall(Generic[T]):
    """One script invocation, ready for a driver to execute.

    ``mutating`` says whether the script may write: a driver that loses the reply of a
    mutating call cannot know whether it was applied.
    """

    script: LuaScript
    keys: tuple[str, ...]
    args: tuple[ScriptArg, ...]
    parse: Callable[[Any], T]
    error: Callable[[ErrorReply], FencingError]
    mutating: bool = True
    #: True when a definitive refusal after a lost reply cannot be trusted: an earlier
    #: attempt may have been applied (an append), so the driver reports OutcomeUnknown.
    ambiguous_after_retry: bool = False
    #: False when sending the call twice could apply it twice (an append with no sequence to
    #: deduplicate on): once a request may have reached the server, the driver never sends
    #: it again and raises OutcomeUnknown instead.
    resend_safe: bool = True
    #: The arguments of every attempt after one that may have reached the server (None:
    #: the same as the first), from ``resent_after`` seconds after the first was sent on
    #: (before, the first attempt's arguments still hold).
    resent_args: tuple[ScriptArg, ...] | None = None
    resent_after: float = 0.0
    #: Refusals that prove no earlier attempt was applied, even after a lost reply (an
    #: append refused DuplicateSequence: had an earlier attempt landed, the resend would be
    #: answered from the window as a duplicate).
    unapplied_refusals: tuple[type[Exception], ...] = ()

    def __post_init__(self) -> None:
        self.script.check_keys(self.keys)


Command = tuple[ScriptArg, ...]


@dataclass(frozen=True, slots=True)
class ReadCall(Generic[T]):
    """Plain commands sent in one pipeline (one round trip), and how to parse the replies.

    For reads that need no script; ``blocking_ms`` says how long the last command may block
    on the server, so the driver can give the socket that much more time.
    """

    commands: tuple[Command, ...]
    parse: Callable[[list[Any]], T]
    blocking_ms: int = 0

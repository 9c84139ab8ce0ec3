"""The protocol layer: builds script calls and parses their replies. No I/O here.

For each atomic operation a function returns a :class:`~fencing._protocol.base.ScriptCall`:
the script, its keys and arguments, how to parse the reply, and how to turn an error reply
into a typed exception. The driver (:mod:`fencing._async.driver`, and its generated sync twin) only
execute calls, so both share every rule written here.
"""

from . import (
    admin,
    base,
    consumer,
    election,
    guards,
    ownership,
    partition_errors,
    producer,
    reads,
    sink,
    topic,
)
from .base import ErrorReply, ReadCall, ScriptCall, parse_error_reply

__all__ = [
    "ErrorReply",
    "ReadCall",
    "ScriptCall",
    "admin",
    "base",
    "consumer",
    "election",
    "guards",
    "ownership",
    "parse_error_reply",
    "partition_errors",
    "producer",
    "reads",
    "sink",
    "topic",
]

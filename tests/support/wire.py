"""The library's scripts as they appear on the wire, for :class:`fencing.faults.Proxy` rules
that lose a call's reply or request (``proxy.drop_replies(APPEND)``).

A pattern is the script's SHA1, which follows ``EVALSHA`` in the request; :func:`evalsha`
includes the command itself, for a rule that must not match anything else.
"""

from __future__ import annotations

from fencing._lua_loader import script

__all__ = [
    "APPEND",
    "CHECK",
    "CLAIM",
    "COMMIT",
    "INCR",
    "RELEASE",
    "RENEW",
    "RESOLVE",
    "evalsha",
    "sha",
]


def sha(name: str) -> bytes:
    """The SHA1 of the library's script ``name``, as sent after EVALSHA."""
    return script(name).sha1.encode()


def evalsha(name: str) -> bytes:
    """``EVALSHA`` and the SHA1 of script ``name``, as one request starts."""
    return b"EVALSHA\r\n$40\r\n" + sha(name)


#: The append script.
APPEND = sha("append")
#: The resolution of a pending batch.
RESOLVE = sha("resolve")
#: The producer-id allocation (redis-py's incr() sends INCRBY key 1).
INCR = b"$6\r\nINCRBY\r\n"
#: Ownership calls (a claim, the consumer's commit, a renewal, a release, a check), each
#: with its EVALSHA: nothing but that script's requests match.
CLAIM = evalsha("claim")
COMMIT = evalsha("commit")
RENEW = evalsha("renew")
RELEASE = evalsha("release")
CHECK = evalsha("check")

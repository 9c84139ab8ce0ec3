"""Least privilege: the ACL rule that is enough for redis-fencing, and nothing more.

The library needs, in one namespace:

- its keys: ``~<namespace>:*`` (every key it writes starts with the namespace);
- its channels: ``&<namespace>:*`` (release, session and election notifications);
- the commands below. Scripts run with EVALSHA (and SCRIPT LOAD after a restart or a
  failover); the commands a script calls are checked against the same user, so they are
  listed too. Reads pipeline HGET/HMGET/XRANGE/XREAD; producer ids come from INCR;
  ``acks=`` waits with WAIT/WAITAOF; a cluster client maps slots with CLUSTER SLOTS/SHARDS
  and COMMAND; ``CONFIG GET`` is only for the ``maxmemory-policy`` check (leave it out and
  pass ``allow_eviction=True`` after checking the policy yourself).

>>> " ".join(acl_rule("shop", password="s3cret"))[:60]
'on >s3cret resetkeys ~shop:* resetchannels &shop:* -@all +ev'
"""

from __future__ import annotations

from collections.abc import Collection

from ._keys import validate_name

#: Every command the library sends or calls from its scripts.
COMMANDS: tuple[str, ...] = (
    # scripts and what they call
    "evalsha", "script|load",
    "time", "type", "exists", "del",
    "hget", "hmget", "hset", "hdel", "hgetall", "hkeys", "hincrby", "pexpire",
    "xadd", "xrange", "xtrim", "xlen", "xread",
    "zadd", "zcard", "zrange", "zrangebyscore", "zrank", "zrem", "zremrangebyscore",
    "zscore", "zcount",
    "rpush", "lpop", "lindex", "lrange", "ltrim",  # message ids
    "publish", "spublish",
    # plain commands
    "get", "incr", "incrby", "ping", "subscribe", "unsubscribe", "ssubscribe", "sunsubscribe",
    "scan",  # listings and topic deletes (the key pattern still limits what they see)
    "unlink", "hexists", "hvals",  # topic deletes
    "wait", "waitaof",
    "config|get",
    "client|setinfo", "client|setname",
    # cluster clients
    "cluster|slots", "cluster|shards", "cluster|nodes", "cluster|myid", "command",
)  # fmt: skip


#: Commands Redis and Valkey have only since 7.2: leave them out (``without=``) before that.
SINCE_7_2: tuple[str, ...] = ("waitaof", "client|setinfo")


def acl_rule(
    namespace: str, *, password: str | None = None, without: Collection[str] = ()
) -> list[str]:
    """The rules of ``ACL SETUSER <user> ...`` for a user of the library in ``namespace``.

    ``without``: commands the server does not know (:data:`SINCE_7_2` before Redis/Valkey
    7.2, which refuse an ACL naming an unknown command; ``acks="fsync"`` needs WAITAOF).

    >>> r.execute_command("ACL", "SETUSER", "fencing", *acl_rule("shop", password="pw"))
    ...                                                             # doctest: +SKIP
    """
    ns = validate_name("namespace", namespace)
    rule = ["on", f">{password}" if password is not None else "nopass"]
    rule += ["resetkeys", f"~{ns}:*", "resetchannels", f"&{ns}:*", "-@all"]
    rule += [f"+{command}" for command in COMMANDS if command not in without]
    return rule

"""ACL users for the tests: the commands of :func:`fencing.acl.acl_rule` a server lacks."""

from __future__ import annotations

import redis

from fencing.acl import SINCE_7_2


def unknown_commands(admin: redis.Redis) -> tuple[str, ...]:
    """``without=`` for :func:`fencing.acl.acl_rule` on this server: :data:`SINCE_7_2` where
    the server does not know WAITAOF (Redis/Valkey before 7.2 refuse an ACL naming it)."""
    try:
        admin.execute_command("WAITAOF", 0, 0, 0)
    except redis.exceptions.ResponseError:
        return SINCE_7_2
    return ()

"""The keys a test's namespace holds, to show that a refused call wrote nothing.

>>> before = snapshot(raw, namespace)                                  # doctest: +SKIP
>>> with pytest.raises(fencing.InvalidArgument): ...                   # doctest: +SKIP
>>> assert snapshot(raw, namespace) == before                          # doctest: +SKIP
"""

from __future__ import annotations

import redis

__all__ = ["Snapshot", "namespace_keys", "snapshot"]

#: Every key of a namespace with its serialized contents (DUMP).
Snapshot = dict[bytes, bytes | None]


def snapshot(raw: redis.Redis, namespace: str) -> Snapshot:
    """Every key under ``namespace`` with its serialized contents."""
    return {k: raw.dump(k) for k in raw.scan_iter(match=f"{namespace}:*")}


def namespace_keys(raw: redis.Redis, namespace: str) -> list[bytes]:
    """Every key under ``namespace``."""
    return list(raw.scan_iter(match=f"{namespace}:*", count=1000))

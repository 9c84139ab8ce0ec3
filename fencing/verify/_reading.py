"""Reading a topic back from the raw storage: topic metadata, then each partition's
metadata, producer row token and every stream entry (XRANGE paging), fed to the checks.
Plain read commands only; nothing is written.

>>> driver, budget = driver_and_budget(client)                        # doctest: +SKIP
>>> partition_count(driver, budget, client.keys.topic_meta("orders"), "orders")  # doctest: +SKIP
4
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._keys import PartitionKeys
from .._protocol.base import Command, ReadCall
from .._text import text
from ..errors import FencingError, UnknownTopic, WrongKeyType
from ._values import PARTITION_MASK, as_bytes, to_int

if TYPE_CHECKING:
    from .._retry import RetryBudget
    from .._sync.driver import Driver
    from ._verifier import Verifier


def _read(driver: Driver, budget: RetryBudget, *commands: Command) -> list[Any]:
    """Plain read commands in one pipeline, retried within the budget like every read."""
    return driver.read(ReadCall(commands=commands, parse=lambda replies: replies), budget)


def _as_dict(reply: Any) -> dict[bytes, bytes]:
    """A hash or stream-entry field list as a dict (RESP2 flat list or RESP3 map)."""
    if isinstance(reply, dict):
        return {as_bytes(k): as_bytes(v) for k, v in reply.items()}
    items = list(reply or ())
    return {as_bytes(k): as_bytes(v) for k, v in zip(items[::2], items[1::2], strict=False)}


def partition_count(driver: Driver, budget: RetryBudget, key: str, topic: str) -> int:
    """The partition count in the topic's metadata hash ``key``.

    Raises :class:`~fencing.UnknownTopic` if there is none, WrongKeyType if the key is not
    a hash, FencingError if the count is not a valid one.
    """
    (kind,) = _read(driver, budget, ("TYPE", key))
    kind = text(kind)
    if kind == "none":
        raise UnknownTopic(
            f"topic {topic!r} does not exist in this namespace: check the topic name and the "
            "client's namespace",
            topic=topic,
        )
    if kind != "hash":
        raise WrongKeyType(
            f"key {key!r} holds a Redis {kind}, not a topic's metadata: another program uses "
            "this name",
            key=key,
            key_type=kind,
        )
    (meta,) = _read(driver, budget, ("HGETALL", key))
    count = to_int(_as_dict(meta).get(b"partitions"))
    if count is None or not 1 <= count <= PARTITION_MASK:
        raise FencingError(
            f"topic {topic!r} has no valid partition count in {key!r}: its metadata is "
            "damaged, so its partitions cannot be found"
        )
    return count


def scan_partition(
    driver: Driver, budget: RetryBudget, pk: PartitionKeys, page: int, check: Verifier
) -> None:
    """Feed one partition to ``check``: its metadata and token, then its entries in order,
    ``page`` at a time."""
    types = _read(driver, budget, *(("TYPE", k) for k in (pk.meta, pk.stream, pk.owner)))
    meta_type, stream_type, owner_type = (text(t) for t in types)
    commands: list[Command] = []
    if meta_type == "hash":
        commands.append(("HGETALL", pk.meta))
    if owner_type == "hash":
        commands.append(("HGET", pk.owner, "token"))
    replies = iter(_read(driver, budget, *commands)) if commands else iter(())
    meta = _as_dict(next(replies)) if meta_type == "hash" else None
    token = next(replies) if owner_type == "hash" else None
    check.begin(pk.partition, meta, meta_type, token)
    if stream_type not in ("stream", "none"):
        check.violation(
            "G6", None, f"the log key holds a Redis {stream_type}, not a stream: no records"
        )
    elif stream_type == "stream":
        low: bytes = b"-"
        while True:
            (entries,) = _read(driver, budget, ("XRANGE", pk.stream, low, "+", "COUNT", page))
            for entry_id, raw_fields in entries:
                # The client's own connections never decode replies: IDs and fields are
                # bytes; RESP3 may hand the fields over as a map.
                fields = (
                    raw_fields
                    if isinstance(raw_fields, dict)
                    else dict(zip(raw_fields[::2], raw_fields[1::2], strict=False))
                )
                check.entry(entry_id, fields)
            if len(entries) < page:
                break
            low = b"(" + as_bytes(entries[-1][0])
    check.end()

"""Topic administration: the topics of a namespace, and deleting one.

A delete runs in bounded steps, none of which can stall the server: the topic's metadata
is marked first (from then on every open of the topic is refused, and a handle that saw it
gets :class:`~fencing.StateLost`); unless ``force``, a topic still in use is unmarked again
and the delete refused; then each partition's metadata goes (so every live handle's next
call raises StateLost, and never writes or reads what comes after), then every other key
of the partition, found with ``SCAN`` and removed with ``UNLINK`` a page at a time (the
log, producer state, duplicate windows, consumer groups' rows and offsets, the Spark
sink's dedupe state); the topic's metadata goes last. A delete cut short leaves the topic
marked: running it again finishes it, and a topic of the same name can be created once it
returned (with a new incarnation, which no old handle accepts). Each partition's last
step leaves a mark of the incarnation deleted and when (kept ``mark_ttl``, by default the
topic's producer state expiry), so a live handle's StateLost says ``reason="deleted"`` and
names the delete instead of sending anyone to check persistence.

>>> await list_topics(context)                               # doctest: +SKIP
['orders', 'payments']
>>> await delete_topic(context, "orders", force=False)       # doctest: +SKIP
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import redis

from .. import _protocol as protocol
from .._keys import PRODUCER_GROUP, Keys, PartitionKeys, validate_name
from .._text import text
from ..errors import InvalidArgument, InvalidArgumentType, OwnershipConflict
from .context import Context

#: Keys asked for per SCAN step, and removed per UNLINK.
SCAN_COUNT = 500
UNLINK_PAGE = 500


async def list_topics(context: Context) -> list[str]:
    """The names of the namespace's topics, sorted (one being deleted is left out; a key of
    another type where a topic's metadata belongs is skipped). Found with ``SCAN`` in
    bounded steps."""
    keys = context.keys
    r = context.driver(context.settings.socket_timeout).redis
    found: set[str] = set()
    async for raw in r.scan_iter(match=keys.topic_meta_pattern(), count=SCAN_COUNT):
        name = keys.topic_of(text(raw))
        if name is not None:
            found.add(name)
    names = sorted(found)
    kept: list[str] = []
    for name in names:
        key = keys.topic_meta(name)
        if text(await r.type(key)) != "hash":
            continue
        if await r.hexists(key, "deleting"):
            continue
        kept.append(name)
    return kept


@dataclass
class _Partition:
    """What a delete found of one partition: its other keys, and who uses it."""

    keys: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)


async def delete_topic(
    context: Context, name: object, *, force: object = False, mark_ttl: object = None
) -> None:
    """Delete topic ``name`` and every key it has (see the module's docstring).

    Raises :class:`~fencing.UnknownTopic` if there is no such topic, and
    :class:`~fencing.OwnershipConflict` if it is in use and ``force`` is False (a live
    producer, a waiting one, a consumer's live grant, or a Spark sink with a micro-batch
    begun and not finished), deleting nothing. Each partition keeps a mark of the deleted
    incarnation for ``mark_ttl`` seconds (None: the topic's producer state expiry)."""
    topic = validate_name("topic", name)
    if not isinstance(force, bool):
        raise InvalidArgumentType(f"force must be a bool, got {type(force).__name__}")
    ttl = _mark_ttl(mark_ttl)
    keys = context.keys
    driver = context.driver(context.settings.socket_timeout)
    budget = context.budget_default()
    meta_key = keys.topic_meta(topic)
    partitions, inc, resumed = await driver.execute(
        protocol.admin.topic_delete(meta_key, topic, "mark"), budget
    )
    pks = [keys.partition(topic, p) for p in range(partitions)]
    r = driver.redis
    marked = False
    try:
        # Each partition takes no new user from here (opens through topic handles made
        # before are refused too), so the users found below are all there are.
        for pk in pks:
            await driver.execute(protocol.admin.partition_delete(pk, inc, "mark"), budget)
        marked = True
        found = await _partition_keys(r, keys, topic, partitions)
        users = [] if force else await _users(r, keys, topic, found)
    except BaseException:
        if not resumed:
            await _unmark(
                driver, budget, meta_key=meta_key, topic=topic, inc=inc, pks=pks, partitions=marked
            )
        raise
    if users:
        if not resumed:  # (a delete begun before keeps its mark: it must be finished)
            await _unmark(
                driver, budget, meta_key=meta_key, topic=topic, inc=inc, pks=pks, partitions=True
            )
        finish = (
            "A delete of this topic was begun and not finished (the topic refuses opens): "
            "pass force=True (fencing delete-topic --force) to finish it"
            if resumed
            else "Nothing was deleted. Close those handles (or let their leases lapse) and "
            "delete again, or pass force=True (fencing delete-topic --force): their next "
            "call then raises StateLost"
        )
        raise OwnershipConflict(
            f"topic {topic!r} is in use: {'; '.join(users[:5])}"
            f"{' ...' if len(users) > 5 else ''}. {finish}",
            group="",
            resource=topic,
            holder_label=users[0],
            holder_token=0,
            remaining=0.0,
        )
    for pk in pks:
        # The metadata goes first, in the script: every handle's next call fails from here.
        drop = protocol.admin.partition_delete(pk, inc, "drop", ttl)
        ours = await driver.execute(drop, budget)
        more = found[pk.partition].keys if ours and pk.partition in found else []
        for i in range(0, len(more), UNLINK_PAGE):
            await r.unlink(*more[i : i + UNLINK_PAGE])
    await driver.execute(protocol.admin.topic_delete(meta_key, topic, "drop", inc), budget)


def _mark_ttl(value: object) -> float | None:
    """``mark_ttl`` checked: None, or a positive number of seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentType(
            f"mark_ttl must be a number of seconds or None, got {type(value).__name__}"
        )
    if not value > 0 or value == float("inf"):
        raise InvalidArgument(
            f"mark_ttl must be a positive, finite number of seconds, got {value!r}: pass how "
            "long live handles of the deleted topic are told of the delete, or None for the "
            "topic's producer state expiry"
        )
    return float(value)


async def _unmark(
    driver: Any,
    budget: Any,
    *,
    meta_key: str,
    topic: str,
    inc: str,
    pks: list[PartitionKeys],
    partitions: bool,
) -> None:
    """Undo a delete's marks (it was refused): the topic and its partitions open again."""
    if partitions:
        for pk in pks:
            await driver.execute(protocol.admin.partition_delete(pk, inc, "unmark"), budget)
    await driver.execute(protocol.admin.topic_delete(meta_key, topic, "unmark", inc), budget)


async def _partition_keys(r: Any, keys: Keys, topic: str, partitions: int) -> dict[int, _Partition]:
    """Every key of the topic's partitions, by partition (one SCAN over the namespace)."""
    prefix = re.escape(f"{keys.namespace}:{{{topic}/")
    shape = re.compile(prefix + r"(\d+)\}:")
    found: dict[int, _Partition] = {}
    async for raw in r.scan_iter(match=f"{keys.namespace}:{{{topic}/*", count=SCAN_COUNT):
        key = text(raw)
        match = shape.match(key)
        if match is None:
            continue
        p = int(match.group(1))
        pk = keys.partition(topic, p)
        # The delete marks outlive the delete (they tell live handles of it).
        if p < partitions and pk.base + ":" == key[: match.end()] and key != pk.deleted:
            found.setdefault(p, _Partition()).keys.append(key)
    return found


async def _users(r: Any, keys: Keys, topic: str, found: dict[int, _Partition]) -> list[str]:
    """Who uses the topic now, by server time: a line per live user. A key that cannot be
    read as what the library keeps there counts as a user (the delete needs force)."""
    seconds, micros = await r.time()
    now = int(seconds) * 1000 + int(micros) // 1000
    users: list[str] = []
    for p, partition in sorted(found.items()):
        pk = keys.partition(topic, p)
        for key in partition.keys:
            try:
                user = await _user(r, pk, key, now)
            except (ValueError, redis.ResponseError) as exc:
                user = f"key {key!r} cannot be read ({exc})"
            if user:
                users.append(user)
    return users


async def _user(r: Any, pk: PartitionKeys, key: str, now: int) -> str | None:
    """The user ``key`` of partition ``pk`` stands for, if it is live now."""
    where = f"partition {pk.partition}"
    own = pk.base + ":own:"
    sink = pk.base + ":sink:"
    if not (key.startswith((own, sink)) or key in (pk.shared, pk.waiting_leases)):
        return None
    kind = text(await r.type(key))
    expected = "zset" if key == pk.shared else "hash"
    if kind == "none":
        return None
    if kind != expected:
        raise ValueError(f"a Redis {kind}, not a {expected}")
    if key.startswith(own):
        row = {text(k): text(v) for k, v in (await r.hgetall(key)).items()}
        group = key[len(own) :]
        if row.get("session") and int(row.get("expires") or 0) > now:
            who = (
                "an exclusive producer" if group == PRODUCER_GROUP else f"consumer group {group!r}"
            )
            return f"{who} ({row.get('label', '')}) holds {where}"
    elif key == pk.shared:
        n = int(await r.zcount(key, f"({now}", "+inf"))
        if n:
            return f"{n} shared producer(s) on {where}"
    elif key == pk.waiting_leases:
        n = sum(1 for expires in await r.hvals(key) if int(expires) > now)
        if n:
            return f"{n} producer(s) waiting for {where}"
    else:
        begun, done = await r.hmget(key, "b", "c")
        if begun is not None and int(begun) > int(done if done is not None else -1):
            return f"Spark sink app {key[len(sink) :]!r} has a batch begun on {where}"
    return None


async def release_producers(
    context: Context, name: object, incarnations: dict[int, str], *, evict_waiters: bool
) -> dict[int, protocol.admin.Evicted]:
    """An operator's release of a topic's producers, partition by partition in ascending
    order: the exclusive holder and the shared producers are severed with epoch + 1, and
    the first live WAIT_FOR_EXCLUSIVE waiter holds the partition at that epoch (it is
    woken); with ``evict_waiters`` the waiters are fenced too and the partition is left
    free. ``incarnations`` names the partitions and the incarnation each was seen with (a
    partition recreated since raises :class:`~fencing.StateLost`, changing nothing)."""
    topic = validate_name("topic", name)
    driver = context.driver(context.settings.socket_timeout)
    budget = context.budget_default()
    done: dict[int, protocol.admin.Evicted] = {}
    for p in sorted(incarnations):
        pk = context.keys.partition(topic, p)
        call = protocol.admin.producer_evict(pk, incarnations[p], evict_waiters=evict_waiters)
        done[p] = await driver.execute(call, budget)
    return done

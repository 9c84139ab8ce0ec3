"""``startingOffsets="afterSink:<topic>/<appId>"``: a source that starts after what a fencing
sink already wrote from it, so that a pipeline whose checkpoint is gone resumes without a
gap or a duplicate.

The sink records, per finished micro-batch, the highest offset of each source partition
whose rows it wrote (when its rows name their source position: the ``sourceColumns``
option). A new query reads each partition from the next offset after it; a partition the
sink holds nothing of is read from its start. The rows of the batch that was under way when
the old query stopped are read again: their message ids (made of the same source
positions) answer the ones already written, and the others are written once.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from .._protocol.base import ReadCall
from .._sync.context import context_of
from .._text import text
from ..errors import InvalidArgument, UnknownTopic
from .plan import AfterSink, SourceOptions, TopicState

log = logging.getLogger("fencing.spark.source")


def sink_positions(client: Any, after: AfterSink) -> dict[str, int]:
    """The highest source offsets app ``after.app_id``'s sink wrote to ``after.topic``, per
    source (``<namespace>/<topic>/<incarnation>/<partition>``), read with plain commands.
    Raises :class:`~fencing.InvalidArgument` if the app has no sink state there."""
    context = context_of(client)
    keys = context.keys
    driver = context.driver(context.settings.socket_timeout)
    budget = context.budget_default()
    count = driver.read(
        ReadCall(
            commands=(("HGET", keys.topic_meta(after.topic), "partitions"),),
            parse=lambda replies: replies[0],
        ),
        budget,
    )
    if count is None:
        raise UnknownTopic(
            f"startingOffsets afterSink names topic {after.topic!r}, which does not exist in "
            f"namespace {keys.namespace!r}: name the topic the sink writes",
            topic=after.topic,
        )
    sinks = [keys.partition(after.topic, p).sink(after.app_id) for p in range(int(count))]
    states = driver.read(
        ReadCall(commands=tuple(("HGETALL", k) for k in sinks), parse=list), budget
    )
    found: dict[str, int] = {}
    known = False
    for state in states:
        fields = _pairs(state)
        known = known or bool(fields)
        for name, value in fields.items():
            if name.startswith("o:"):
                found[name[2:]] = max(int(value), found.get(name[2:], -1))
    if not known:
        raise InvalidArgument(
            f"startingOffsets afterSink: topic {after.topic!r} holds no sink state of appId "
            f"{after.app_id!r} in namespace {keys.namespace!r}: check the topic and appId "
            "the sink writes with"
        )
    return found


def _pairs(reply: Any) -> dict[str, str]:
    if isinstance(reply, dict):
        return {text(k): text(v) for k, v in reply.items()}
    items = [text(x) for x in reply or []]
    return dict(zip(items[::2], items[1::2], strict=True))


def resolve_after_sink(client: Any, options: SourceOptions, state: TopicState) -> SourceOptions:
    """``options`` with an ``afterSink`` start replaced by offsets per partition: the next
    offset after what the sink wrote of each (of the topic's current incarnation), and
    'earliest' where it wrote nothing."""
    after = options.starting
    if not isinstance(after, AfterSink):
        return options
    positions = sink_positions(client, after)
    namespace = context_of(client).keys.namespace
    starting: dict[int, int] = {}
    for p, part in enumerate(state.partitions):
        offset = positions.get(f"{namespace}/{state.name}/{part.incarnation}/{p}")
        if offset is not None:
            starting[p] = offset + 1
    log.info(
        "redis-fencing spark source: topic %r starts after what appId %r wrote to topic %r: "
        "partitions %s from offsets %s, the others from their start",
        state.name,
        after.app_id,
        after.topic,
        sorted(starting),
        [starting[p] for p in sorted(starting)],
    )
    return dataclasses.replace(options, starting=starting)


def lineage_notice(client: Any, topic: str, app_id: str, *, positions: bool) -> str | None:
    """The one line a new lineage (``newLineage``) logs when app ``app_id`` already has a
    lineage on ``topic``: what the new one will write again, and how to start its source
    so that it does not. None when the app has no lineage there yet."""
    context = context_of(client)
    keys = context.keys
    driver = context.driver(context.settings.socket_timeout)
    count = driver.read(
        ReadCall(
            commands=(("HGET", keys.topic_meta(topic), "partitions"),),
            parse=lambda replies: replies[0],
        ),
        context.budget_default(),
    )
    if count is None:
        return None
    sinks = [keys.partition(topic, p).sink(app_id) for p in range(int(count))]
    states = driver.read(
        ReadCall(commands=tuple(("HMGET", k, "q", "c") for k in sinks), parse=list),
        context.budget_default(),
    )
    held = [(text(q), int(text(c) if c is not None else -1)) for q, c in states if q is not None]
    if not held:
        return None
    query, finished = max(held, key=lambda h: h[1])
    done = f"finished batches up to {finished}" if finished >= 0 else "finished no batch"
    after = f"startingOffsets='afterSink:{topic}/{app_id}'"
    if positions:
        return (
            f"appId {app_id!r} starts a new lineage on topic {topic!r} after query {query} "
            f"({done}): rows it already wrote are skipped by their message ids (source "
            f"positions), and a source started with {after} reads only what follows them"
        )
    return (
        f"appId {app_id!r} starts a new lineage on topic {topic!r} after query {query} "
        f"({done}): its rows name no source position (option sourceColumns), so every row "
        "this query's source reads is written again, also rows the old query wrote: start "
        "the source after what the old query read (startingOffsets as JSON of offsets), or "
        f"name the source columns and start it with {after}"
    )

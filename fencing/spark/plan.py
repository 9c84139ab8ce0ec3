"""The Spark source's plan: its options, the topic as it is when the read is planned, and
the offset ranges the read covers. Runs on the driver (in Spark's planner processes).

Options are parsed without I/O (:func:`parse_options`); the topic is then read with plain
commands only (:func:`topic_state`: HMGET of the topic's and each partition's metadata,
nothing written, nothing created), and the ranges are resolved from both without I/O
(:func:`plan_ranges`), so every rule about offsets is testable without a server.

>>> options = parse_options({"topic": "orders", "startingoffsets": '{"0": 2}'})
>>> state = TopicState("orders", "t1", [PartitionState("p0", 0, 5)])
>>> plan_ranges(options, state)
[Range(partition=0, start=2, end=5, incarnation='p0')]
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import _protocol as protocol
from .._keys import Keys, validate_name
from .._protocol.base import ReadCall
from .._sync.context import context_of
from .._text import text
from ..errors import InvalidArgument, OffsetOutOfRange, StateLost, UnknownTopic

#: The options the batch source takes (Spark hands them over lower-cased).
OPTIONS = (
    "url",
    "namespace",
    "topic",
    "startingOffsets",
    "endingOffsets",
    "failOnTrim",
    "maxRecordsPerTrigger",
)
#: Records per Spark input partition at most: a longer range of one topic partition is
#: read by several tasks.
RECORDS_PER_TASK = 100_000


#: The prefix of a ``startingOffsets`` value that names a sink to start after.
AFTER_SINK = "aftersink:"


@dataclass(frozen=True, slots=True)
class AfterSink:
    """``startingOffsets="afterSink:<topic>/<appId>"``: start after what app ``app_id``'s
    fencing sink wrote to ``topic`` (same namespace) from this source; resolved against
    the sink's state when the query starts (:mod:`.resume`)."""

    topic: str
    app_id: str


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The parsed options. ``starting`` is "earliest", "latest", offsets per partition
    (partitions left out take "earliest") or :class:`AfterSink`; ``ending`` is "latest" or
    offsets per partition (partitions left out take "latest")."""

    topic: str
    url: str | None = None
    namespace: str | None = None
    starting: str | dict[int, int] | AfterSink = "earliest"
    ending: str | dict[int, int] = "latest"
    fail_on_trim: bool = True
    max_records: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition when the read was planned: its incarnation (a new one if the partition,
    or its topic, is ever made again), first retained offset and next offset."""

    incarnation: str
    start: int
    next: int


@dataclass(frozen=True, slots=True)
class TopicState:
    """A topic when the read was planned."""

    name: str
    incarnation: str
    partitions: list[PartitionState]


@dataclass(frozen=True, slots=True)
class Range:
    """The offsets ``[start, end)`` of one topic partition that one Spark task reads, and
    the partition's incarnation when the read was planned."""

    partition: int
    start: int
    end: int
    incarnation: str


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """The source's options, checked without I/O: an unknown name, a missing topic, bad
    offsets JSON or a bad ``failOnTrim`` raise :class:`~fencing.InvalidArgument`.

    >>> parse_options({"topic": "orders", "failontrim": "false"}).fail_on_trim
    False
    """
    known = {name.lower(): name for name in OPTIONS}
    unknown = sorted(name for name in options if name.lower() not in known)
    if unknown:
        raise InvalidArgument(
            f"the fencing source has no option {', '.join(map(repr, unknown))}; its options "
            f"are {', '.join(OPTIONS)}"
        )
    got = {known[name.lower()]: value for name, value in options.items()}
    topic = got.get("topic")
    if not topic:
        raise InvalidArgument(
            "the fencing source needs the option topic: .option('topic', 'orders')"
        )
    fail = got.get("failOnTrim", "true").strip().lower()
    if fail not in ("true", "false"):
        raise InvalidArgument(f"failOnTrim must be 'true' or 'false', got {got['failOnTrim']!r}")
    max_records = None
    if "maxRecordsPerTrigger" in got:
        raw = got["maxRecordsPerTrigger"].strip()
        if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
            raise InvalidArgument(
                f"maxRecordsPerTrigger must be a whole number of records >= 1, got {raw!r}"
            )
        max_records = int(raw)
    return SourceOptions(
        max_records=max_records,
        topic=validate_name("topic", topic),
        url=got.get("url") or None,
        namespace=got.get("namespace") or None,
        starting=_starting(got.get("startingOffsets", "earliest")),
        ending=_ending(got.get("endingOffsets", "latest")),
        fail_on_trim=fail == "true",
    )


def _starting(raw: str) -> str | dict[int, int] | AfterSink:
    """startingOffsets: 'earliest', 'latest', JSON offsets or 'afterSink:<topic>/<appId>'.

    >>> _starting("afterSink:events/etl")
    AfterSink(topic='events', app_id='etl')
    """
    if not raw.strip().lower().startswith(AFTER_SINK):
        return _offsets("startingOffsets", raw)
    topic, slash, app = raw.strip()[len(AFTER_SINK) :].partition("/")
    if not slash or not topic or not app:
        raise InvalidArgument(
            "startingOffsets 'afterSink:' names the topic and appId of the fencing sink to "
            f"start after: 'afterSink:events/etl', got {raw!r}"
        )
    return AfterSink(validate_name("topic", topic), validate_name("appId", app))


def _ending(raw: str) -> str | dict[int, int]:
    """endingOffsets: 'latest' or JSON offsets (a read ends where it is planned or before)."""
    found = _offsets("endingOffsets", raw)
    if found == "earliest":
        raise InvalidArgument(
            "endingOffsets is 'latest' or JSON of partitions to offsets such as "
            '{"0": 12, "1": 0}, got \'earliest\' (it would read nothing): to read up to an '
            "offset, name it"
        )
    return found


def _offsets(name: str, raw: str) -> str | dict[int, int]:
    """'earliest', 'latest' or a JSON object of partition numbers to offsets (>= 0)."""
    value = raw.strip()
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    example = 'JSON of partitions to offsets such as {"0": 12, "1": 0}'
    try:
        parsed = json.loads(value)
    except ValueError:
        raise InvalidArgument(
            f"{name} must be 'earliest', 'latest' or {example}, got {raw!r}"
        ) from None
    if not isinstance(parsed, dict):
        raise InvalidArgument(f"{name} must be 'earliest', 'latest' or {example}, got {raw!r}")
    out: dict[int, int] = {}
    for key, offset in parsed.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit()):
            raise InvalidArgument(
                f"{name} names partition {key!r}: partitions are numbers from 0, as in {example}"
            )
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidArgument(
                f"{name} gives partition {key} the offset {offset!r}: offsets are integers "
                f">= 0 (or use 'earliest' / 'latest' for every partition)"
            )
        out[int(key)] = offset
    return out


def topic_state(options: SourceOptions) -> tuple[str, str, TopicState]:
    """The resolved URL and namespace, and the topic as it is now, read with plain
    commands (nothing written). :class:`~fencing.UnknownTopic` if there is no such topic."""
    from .._settings import load_settings  # noqa: PLC0415 - lazy: pydantic loads when used
    from .._sync.client import Client  # noqa: PLC0415

    overrides: dict[str, Any] = {}
    if options.url is not None:
        overrides["redis_url"] = options.url
    if options.namespace is not None:
        overrides["namespace"] = options.namespace
    settings = load_settings(**overrides)
    client = Client.from_url(settings.redis_url, namespace=settings.namespace)
    try:
        return settings.redis_url, settings.namespace, read_topic(client, options.topic)
    finally:
        client.close()


def read_topic(client: Any, name: str) -> TopicState:
    """The topic ``name`` of ``client``'s namespace, read with plain commands."""
    context = context_of(client)
    keys: Keys = context.keys
    driver = context.driver(context.settings.socket_timeout)
    budget = context.budget_default()
    meta = keys.topic_meta(name)
    call = ReadCall(
        commands=(("HMGET", meta, "inc", "partitions", "ready", "deleting"),),
        parse=lambda replies: replies[0],
    )
    inc, count, ready, deleting = driver.read(call, budget)
    where = f"namespace {keys.namespace!r}"
    if inc is None or deleting is not None or text(ready or b"0") != "1":
        what = "is being deleted" if deleting is not None else "does not exist"
        if inc is not None and deleting is None:
            what = "is still being created"
        raise UnknownTopic(
            f"topic {name!r} {what} in {where}: check the options topic, namespace and url",
            topic=name,
            deleting=deleting is not None,
        )
    parts: list[PartitionState] = []
    for p in range(int(count)):
        pk = keys.partition(name, p)
        info = driver.read(protocol.reads.partition_info(pk), budget)
        if info is None:
            raise StateLost(
                f"partition {p} of topic {name!r} is gone ({where}): the Redis server lost "
                "writes, or the topic is being deleted",
                reason="missing",
                key=pk.meta,
            )
        parts.append(PartitionState(info.incarnation, info.start_offset, info.next_offset))
    return TopicState(name, text(inc), parts)


def plan_ranges(
    options: SourceOptions, state: TopicState, per_task: int = RECORDS_PER_TASK
) -> list[Range]:
    """The ranges to read, at most ``per_task`` offsets each, in partition order.

    Refuses a partition the topic does not have, a starting offset past the end or after
    its ending offset, an ending offset past the end, and (with ``failOnTrim``) offsets
    already trimmed; without ``failOnTrim`` a range starts at the first retained offset.

    >>> state = TopicState("t", "i", [PartitionState("a", 0, 250)])
    >>> [(r.start, r.end) for r in plan_ranges(parse_options({"topic": "t"}), state, 100)]
    [(0, 100), (100, 200), (200, 250)]
    """
    check_partitions("startingOffsets", options.starting, state)
    check_partitions("endingOffsets", options.ending, state)
    out: list[Range] = []
    for p, part in enumerate(state.partitions):
        start = resolve(options.starting, p, part, "earliest")
        end = resolve(options.ending, p, part, "latest")
        where = f"partition {p} of topic {state.name!r}"
        for name, offset in (("startingOffsets", start), ("endingOffsets", end)):
            if offset > part.next:
                raise OffsetOutOfRange(
                    f"{name} asks for offset {offset} of {where}, past its end (next offset "
                    f"{part.next}): a read covers records written before it is planned",
                    requested=offset,
                    start=part.start,
                    end=part.next,
                    topic=state.name,
                    partition=p,
                )
        if start > end and isinstance(options.starting, dict) and p in options.starting:
            raise InvalidArgument(
                f"startingOffsets {start} is after endingOffsets {end} for {where}"
            )
        if start < part.start and start < end:
            if options.fail_on_trim:
                raise OffsetOutOfRange(
                    f"offsets {start} to {min(end, part.start) - 1} of {where} were trimmed: "
                    f"its first retained offset is {part.start}. Start at {part.start} or "
                    "later, or set failOnTrim to 'false' to skip ahead to it",
                    requested=start,
                    start=part.start,
                    end=part.next,
                    topic=state.name,
                    partition=p,
                )
            start = min(part.start, end)
        start = min(start, end)  # "earliest" past an ending offset: nothing to read
        for first in range(start, end, per_task):
            out.append(Range(p, first, min(end, first + per_task), part.incarnation))
    return out


def check_partitions(name: str, given: str | dict[int, int] | AfterSink, state: TopicState) -> None:
    """Refuse offsets given for a partition the topic does not have."""
    n = len(state.partitions)
    if isinstance(given, dict):
        for p in sorted(given):
            if p >= n:
                raise InvalidArgument(
                    f"{name} names partition {p}, but topic {state.name!r} has partitions "
                    f"0 to {n - 1}"
                )


def resolve(
    given: str | dict[int, int] | AfterSink, p: int, part: PartitionState, default: str
) -> int:
    """The offset ``given`` names for partition ``p`` (``default`` if it names none); an
    :class:`AfterSink` start is resolved to offsets before (:mod:`.resume`)."""
    assert not isinstance(given, AfterSink), "resolved by resume.resolve_after_sink first"
    which: str | int = given.get(p, default) if isinstance(given, dict) else given
    if which == "earliest":
        return part.start
    if which == "latest":
        return part.next
    assert isinstance(which, int)
    return which

"""The streaming source's offsets: what Spark's checkpoint holds, and how far each
micro-batch reads. Pure functions of the topic's state (read by :mod:`.plan`), no I/O.

An offset of the source is a JSON object that names every partition's next offset to read
and the partition's incarnation, so that a checkpoint of one history is never applied to
another (a topic deleted and made again under the same name)::

    {"offsets": {"0": 12, "1": 0}, "incarnations": {"0": "3f…", "1": "9a…"}}

Its ``offsets`` object has the shape ``startingOffsets`` takes, so it can start another
query where this one stopped.

>>> from fencing.spark.plan import PartitionState, TopicState, parse_options
>>> state = TopicState("orders", "t", [PartitionState("a", 0, 7), PartitionState("b", 0, 2)])
>>> start = initial_offsets(parse_options({"topic": "orders"}), state)
>>> start["offsets"]
{'0': 0, '1': 0}
>>> next_offsets(start, state, max_records=4)["offsets"]
{'0': 2, '1': 2}
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgument, OffsetOutOfRange, StateLost
from .plan import (
    PartitionState,
    Range,
    SourceOptions,
    TopicState,
    check_partitions,
    resolve,
)

#: A source offset as Spark's checkpoint holds it (JSON: string keys).
Offsets = dict[str, Any]


def _make(offsets: list[int], incarnations: list[str]) -> Offsets:
    return {
        "offsets": {str(p): o for p, o in enumerate(offsets)},
        "incarnations": {str(p): i for p, i in enumerate(incarnations)},
    }


def _parse(offsets: Offsets, what: str) -> tuple[list[int], list[str]]:
    """The offsets and incarnations of a source offset, in partition order."""
    try:
        found = offsets["offsets"]
        incs = offsets["incarnations"]
        n = len(found)
        positions = [found[str(p)] for p in range(n)]
        incarnations = [incs[str(p)] for p in range(n)]
        if not all(type(o) is int and o >= 0 for o in positions) or not all(
            isinstance(i, str) and i for i in incarnations
        ):
            raise ValueError("offsets are integers >= 0, incarnations non-empty strings")
    except (KeyError, TypeError, ValueError, AttributeError):
        raise InvalidArgument(
            f"the {what} offset {offsets!r} is not an offset of the fencing source (a "
            "checkpoint of another source, or edited by hand): start the query with a new "
            "checkpoint location"
        ) from None
    return positions, incarnations


def initial_offsets(options: SourceOptions, state: TopicState) -> Offsets:
    """Where a new query starts: ``startingOffsets`` resolved against the topic now.

    A partition the topic does not have, an offset past a partition's end, or (with
    ``failOnTrim``) an offset already trimmed raise; without ``failOnTrim`` a trimmed start
    moves to the first retained offset.
    """
    check_partitions("startingOffsets", options.starting, state)
    out: list[int] = []
    for p, part in enumerate(state.partitions):
        start = resolve(options.starting, p, part, "earliest")
        where = f"partition {p} of topic {state.name!r}"
        if start > part.next:
            raise OffsetOutOfRange(
                f"startingOffsets asks for offset {start} of {where}, past its end (next "
                f"offset {part.next}): start at {part.next} or earlier, or 'latest'",
                requested=start,
                start=part.start,
                end=part.next,
                topic=state.name,
                partition=p,
            )
        if start < part.start:
            if options.fail_on_trim:
                raise _trimmed(state.name, p, start, part, "startingOffsets asks for")
            start = part.start
        out.append(start)
    return _make(out, [part.incarnation for part in state.partitions])


def latest_offsets(state: TopicState) -> Offsets:
    """Every partition's next offset now."""
    return _make(
        [part.next for part in state.partitions],
        [part.incarnation for part in state.partitions],
    )


def _trimmed(topic: str, p: int, start: int, part: PartitionState, what: str) -> OffsetOutOfRange:
    return OffsetOutOfRange(
        f"{what} offsets {start} to {part.start - 1} of partition {p} of topic {topic!r}, "
        f"which were trimmed: its first retained offset is {part.start}. Set failOnTrim to "
        "'false' to skip ahead to it, or keep records longer (trim later)",
        requested=start,
        start=part.start,
        end=part.next,
        topic=topic,
        partition=p,
    )


def next_offsets(
    start: Offsets,
    state: TopicState,
    *,
    max_records: int | None = None,
    cap: Offsets | None = None,
    fail_on_trim: bool = True,
) -> Offsets:
    """The end of the next micro-batch that starts at ``start``: every partition's next
    offset now, at most ``max_records`` records in all (shared fairly among the partitions
    with records to read) and at most ``cap`` (the offsets a ``Trigger.AvailableNow`` run
    stops at). Returns ``start`` itself when there is nothing to read.

    Raises :class:`~fencing.StateLost` when a partition is not the one ``start`` was read
    from (another incarnation: the topic was made again) or went back in history (the
    server lost writes), and :class:`~fencing.OffsetOutOfRange` when records the query has
    not read yet were trimmed (unless ``fail_on_trim`` is false).
    """
    positions, incarnations = _parse(start, "start")
    if len(positions) != len(state.partitions):
        raise StateLost(
            f"topic {state.name!r} has {len(state.partitions)} partitions, but the query's "
            f"checkpoint holds offsets of {len(positions)}: it is another topic of that name. "
            "Start the query with a new checkpoint location to read it",
            reason="incarnation",
            key=state.name,
        )
    ends: list[int] = []
    for p, (position, inc, part) in enumerate(
        zip(positions, incarnations, state.partitions, strict=True)
    ):
        where = f"partition {p} of topic {state.name!r}"
        if inc != part.incarnation:
            raise StateLost(
                f"{where} was made again (another incarnation of the topic) since the query "
                "read it: its checkpoint's offsets belong to another history, and nothing of "
                "the new one is read under them. Start the query with a new checkpoint "
                "location to read the topic as it is now",
                reason="incarnation",
                key=state.name,
            )
        if part.next < position:
            raise StateLost(
                f"{where} went back in history: the query read up to offset {position}, but "
                f"its next offset is now {part.next} (the Redis server lost writes). Nothing "
                "is read until the offsets are consistent; a new checkpoint location starts "
                "over",
                reason="offset",
                key=state.name,
            )
        if position < part.start and fail_on_trim:
            raise _trimmed(state.name, p, position, part, "the query has still to read")
        ends.append(part.next)
    if cap is not None:
        limit, _ = _parse(cap, "Trigger.AvailableNow")
        ends = [min(e, max(c, s)) for e, c, s in zip(ends, limit, positions, strict=False)]
    if max_records is not None:
        ends = capped(positions, ends, max_records)
    return _make(ends, incarnations)


def capped(starts: list[int], ends: list[int], max_records: int) -> list[int]:
    """``ends`` moved back so that at most ``max_records`` offsets lie between ``starts``
    and them, shared fairly: a partition with less to read than its share keeps all of it,
    and what it leaves goes to the others. Whenever there is anything to read, at least one
    offset is read (a limit below 1 counts as 1).

    >>> capped([0, 0, 0], [100, 2, 100], 10)
    [4, 2, 4]
    """
    backlog = [max(0, e - s) for s, e in zip(starts, ends, strict=True)]
    remaining = max(1, max_records)
    take = [0] * len(backlog)
    order = sorted(range(len(backlog)), key=lambda p: (backlog[p], p))
    for left, p in zip(range(len(order), 0, -1), order, strict=True):
        share = min(backlog[p], remaining // left)
        take[p] = share
        remaining -= share
    # What the shares rounded away goes to partitions in order, so that a limit below the
    # number of partitions still reads.
    for p in range(len(backlog)):
        extra = min(remaining, backlog[p] - take[p])
        take[p] += extra
        remaining -= extra
    return [s + t for s, t in zip(starts, take, strict=True)]


def stream_ranges(start: Offsets, end: Offsets) -> list[Range]:
    """The ranges of one micro-batch ``[start, end)``: one per topic partition with records
    to read, so that one Spark task reads a partition's records in offset order (records of
    one key stay in order through a sink downstream). ``maxRecordsPerTrigger`` bounds a
    batch's size.

    >>> a = {"offsets": {"0": 0, "1": 4}, "incarnations": {"0": "x", "1": "y"}}
    >>> b = {"offsets": {"0": 500000, "1": 4}, "incarnations": {"0": "x", "1": "y"}}
    >>> [(r.partition, r.start, r.end) for r in stream_ranges(a, b)]
    [(0, 0, 500000)]
    """
    first, incarnations = _parse(start, "start")
    last, ends_incarnations = _parse(end, "end")
    if incarnations != ends_incarnations[: len(incarnations)]:
        raise StateLost(
            "a micro-batch's start and end offsets name other incarnations of the topic: "
            "the checkpoint mixes two histories. Start the query with a new checkpoint "
            "location",
            reason="incarnation",
            key="",
        )
    return [
        Range(p, a, b, incarnations[p])
        for p, (a, b) in enumerate(zip(first, last, strict=False))
        if b > a
    ]

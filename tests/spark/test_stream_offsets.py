"""The streaming source's offsets without Spark or a server: where a query starts, how far
each micro-batch reads, and what a checkpoint of another history does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fencing import InvalidArgument, OffsetOutOfRange, StateLost
from fencing.spark.offsets import capped, initial_offsets, next_offsets, stream_ranges
from fencing.spark.plan import PartitionState, TopicState, parse_options


def state(*parts: tuple[int, int], incs: str = "ab") -> TopicState:
    return TopicState(
        "orders", "t", [PartitionState(incs[p], s, n) for p, (s, n) in enumerate(parts)]
    )


def at(*offsets: int, incs: str = "ab") -> dict[str, object]:
    return {
        "offsets": {str(p): o for p, o in enumerate(offsets)},
        "incarnations": {str(p): incs[p] for p in range(len(offsets))},
    }


def test_a_new_query_starts_where_starting_offsets_say() -> None:
    now = state((2, 10), (0, 4))
    assert initial_offsets(parse_options({"topic": "orders"}), now) == at(2, 0)
    latest = parse_options({"topic": "orders", "startingOffsets": "latest"})
    assert initial_offsets(latest, now) == at(10, 4)
    given_json = parse_options({"topic": "orders", "startingOffsets": '{"0": 5}'})
    assert initial_offsets(given_json, now) == at(5, 0)


def test_a_trimmed_start_fails_or_moves_to_the_first_retained_offset() -> None:
    now = state((6, 10), (0, 4))
    strict = parse_options({"topic": "orders", "startingOffsets": '{"0": 1}'})
    with pytest.raises(OffsetOutOfRange, match=r"offsets 1 to 5 of partition 0 .* offset is 6"):
        initial_offsets(strict, now)
    lenient = parse_options(
        {"topic": "orders", "startingOffsets": '{"0": 1}', "failOnTrim": "false"}
    )
    assert initial_offsets(lenient, now) == at(6, 0)


def test_a_start_past_the_end_or_in_a_missing_partition_is_refused() -> None:
    now = state((0, 3), (0, 4))
    with pytest.raises(OffsetOutOfRange, match="past its end"):
        initial_offsets(parse_options({"topic": "orders", "startingOffsets": '{"1": 9}'}), now)
    with pytest.raises(InvalidArgument, match="names partition 2"):
        initial_offsets(parse_options({"topic": "orders", "startingOffsets": '{"2": 0}'}), now)


def test_each_batch_reads_to_the_end_or_to_the_limit_or_to_the_cap() -> None:
    now = state((0, 10), (0, 3))
    assert next_offsets(at(4, 3), now) == at(10, 3)
    assert next_offsets(at(4, 3), now, max_records=4) == at(8, 3)
    assert next_offsets(at(4, 1), now, max_records=4) == at(6, 3)
    assert next_offsets(at(4, 1), now, cap=at(5, 2)) == at(5, 2)
    # Nothing new: the start itself, which Spark takes as "no batch".
    assert next_offsets(at(10, 3), now, max_records=4) == at(10, 3)


def test_a_checkpoint_of_another_incarnation_raises_state_lost() -> None:
    with pytest.raises(StateLost, match="was made again") as caught:
        next_offsets(at(4, 3), state((0, 10), (0, 3), incs="xb"))
    assert caught.value.reason == "incarnation"
    with pytest.raises(StateLost, match="has 3 partitions, but the query's checkpoint holds"):
        next_offsets(at(4, 3), state((0, 10), (0, 3), (0, 1), incs="abc"))


def test_a_partition_that_went_back_in_history_raises_state_lost() -> None:
    with pytest.raises(StateLost, match="went back in history") as caught:
        next_offsets(at(8, 3), state((0, 5), (0, 3)))
    assert caught.value.reason == "offset"


def test_records_trimmed_before_the_query_read_them_fail_unless_told_to_skip() -> None:
    trimmed = state((6, 10), (0, 3))
    with pytest.raises(OffsetOutOfRange, match="still to read offsets 2 to 5 of partition 0"):
        next_offsets(at(2, 3), trimmed)
    assert next_offsets(at(2, 3), trimmed, fail_on_trim=False) == at(10, 3)


@pytest.mark.parametrize(
    "bad",
    [
        {"0": 3},
        {"offsets": {"0": 3}},
        {"offsets": {"0": "x"}, "incarnations": {"0": "a"}},
        {"offsets": {"0": "2"}, "incarnations": {"0": "a"}},
        {"offsets": {"0": -3}, "incarnations": {"0": "a"}},
        {"offsets": {"0": 1.5}, "incarnations": {"0": "a"}},
        {"offsets": {"0": True}, "incarnations": {"0": "a"}},
        {"offsets": {"0": 3}, "incarnations": {"0": ""}},
        {"offsets": [3], "incarnations": ["a"]},
    ],
)
def test_a_checkpoint_offset_of_another_source_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument, match="not an offset of the fencing source"):
        next_offsets(bad, state((0, 3)))


def test_a_batch_reads_each_partition_in_one_task_whatever_its_size() -> None:
    # One task a partition: its records reach a sink downstream in offset order (a key's
    # records stay in order), however large the batch.
    got = stream_ranges(at(0, 5), at(700_000, 5))
    assert [(r.partition, r.start, r.end, r.incarnation) for r in got] == [(0, 0, 700_000, "a")]
    with pytest.raises(StateLost):
        stream_ranges(at(0, 5), at(7, 5, incs="ax"))


@given(
    backlog=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 40)), min_size=1, max_size=6),
    limit=st.integers(-2, 120),
)
def test_the_limit_is_shared_fairly_never_exceeded_and_always_progresses(
    backlog: list[tuple[int, int]], limit: int
) -> None:
    starts = [s for s, _ in backlog]
    ends = [s + n for s, n in backlog]
    got = capped(starts, ends, limit)
    taken = [g - s for g, s in zip(got, starts, strict=True)]
    total = sum(n for _, n in backlog)
    assert all(0 <= t <= n for t, (_, n) in zip(taken, backlog, strict=True))
    assert sum(taken) == min(total, max(1, limit))
    # Fair: a partition gets less than another only when it has nothing more to read, or
    # by the one record that rounding moves.
    for t, (_, n) in zip(taken, backlog, strict=True):
        assert t == n or all(t + 1 >= u for u in taken)


@pytest.mark.parametrize(
    "options",
    [
        {"maxRecordsPerTrigger": "\u00b2"},
        {"maxRecordsPerTrigger": "\u0663"},
        {"startingOffsets": '{"\u00b9": 0}'},
        {"endingOffsets": '{"\u0663": 0}'},
    ],
)
def test_numbers_in_options_are_ascii_digits(options: dict[str, str]) -> None:
    with pytest.raises(InvalidArgument):
        parse_options({"topic": "orders", **options})

"""The no-I/O half of group commit: merging queued batches and taking a call's group."""

from __future__ import annotations

from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from fencing._group_commit import Entry, encode_one, merge_batches, take_group
from fencing._protocol.topic import encode_batch
from fencing._record import Limits, Record

records = st.builds(
    Record,
    st.binary(max_size=40),
    st.none() | st.binary(max_size=10),
    st.none() | st.dictionaries(st.text(min_size=1, max_size=5), st.binary(max_size=5), max_size=2),
)


@given(st.lists(st.lists(records, min_size=1, max_size=4), min_size=1, max_size=6))
def test_a_merged_batch_is_the_batch_of_all_its_records(groups: list[list[Record]]) -> None:
    limits = Limits()
    parts = [encode_batch(g, limits, checksum=False) for g in groups]
    whole = encode_batch([r for g in groups for r in g], limits)
    assert merge_batches(parts) == whole


@given(records)
def test_encode_one_is_encode_batch_of_one_record(record: Record) -> None:
    limits = Limits()
    headers = dict(record.headers) or None
    one = encode_one(record.value, record.key, headers, limits)
    assert merge_batches([one]) == encode_batch([record], limits)
    assert one.size == record.size and one.count == 1


@given(st.lists(records, min_size=1, max_size=8))
def test_merged_entries_are_encode_batch_of_all_their_records(batch: list[Record]) -> None:
    limits = Limits()
    entries = [encode_one(r.value, r.key, dict(r.headers) or None, limits) for r in batch]
    assert merge_batches(entries) == encode_batch(batch, limits)


def test_take_group_respects_limits_order_and_solo_entries() -> None:
    limits = Limits(max_record_bytes=100, max_batch_records=3, max_batch_bytes=100)

    def entry(size: int, expected: int | None = None) -> Entry:
        return Entry.of(encode_batch([Record(b"x" * size)], limits, checksum=False), expected)

    a, b, c, d, e, f = entry(10), entry(10), entry(10), entry(10), entry(90), entry(1, 7)
    queue = deque([a, b, c, d, e, f])
    b.abandoned = True
    claim = lambda future: True  # noqa: E731
    assert take_group(queue, limits, claim) == [a, c, d]  # b dropped; 3 records at most
    assert take_group(queue, limits, claim) == [e]  # 90 bytes: f is solo anyway
    assert take_group(queue, limits, claim) == [f]  # expected_offset: alone
    assert take_group(queue, limits, claim) == []

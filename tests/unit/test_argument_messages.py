"""A refused argument's message says what is wrong with that value and what to pass: a
value over a bound is not told it is too short, a name is not named twice."""

from __future__ import annotations

import pytest

import fencing
from fencing._keys import validate_name
from fencing._validate import validate_state_ttl, validate_ttl


@pytest.mark.parametrize(
    ("ttl", "says"),
    [(0.01, "under 0.05 seconds"), (604_801.0, "over 604800 seconds")],
)
def test_a_lease_out_of_bounds_is_told_which_bound(ttl: float, says: str) -> None:
    with pytest.raises(fencing.InvalidArgument, match=says) as info:
        validate_ttl(ttl, "lease_ttl")
    assert ("shorter than 50 ms" in str(info.value)) == (ttl < 1)


@pytest.mark.parametrize(
    ("value", "says"),
    [(0.5, "shorter would expire"), (315_360_001.0, "pass seconds, e.g. 604800")],
)
def test_a_producer_state_ttl_out_of_bounds_is_told_which_bound(value: float, says: str) -> None:
    with pytest.raises(fencing.InvalidArgument, match=says):
        validate_state_ttl(value)


def test_a_bad_producer_name_is_named_once(client: fencing.Client) -> None:
    with pytest.raises(fencing.InvalidName, match=r"^invalid producer name 'a b': use 1 to 200"):
        client.topic("t", partitions=1).producer(name="a b")
    with pytest.raises(fencing.InvalidName, match=r"^invalid topic name 'a b'"):
        validate_name("topic", "a b")

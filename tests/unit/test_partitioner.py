"""Keys land on the partitions Kafka's default partitioner would choose."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fencing._partitioner import murmur2, partition_for_key

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_is_to_positive_murmur2_mod_n() -> None:
    for data, hashed in KAFKA_VECTORS:
        for n in (1, 2, 3, 7, 64):
            assert partition_for_key(data, n) == (hashed & 0x7FFFFFFF) % n


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_in_range_and_stable(data: bytes, n: int) -> None:
    p = partition_for_key(data, n)
    assert 0 <= p < n
    assert partition_for_key(bytes(data), n) == p
    assert -(2**31) <= murmur2(data) < 2**31

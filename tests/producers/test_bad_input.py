"""A producer's arguments and settings: a producer of anything but a topic is a typed error
before anything is written, and the settings it was made with are fixed (a later change
would be ignored by the parts they were handed to, so it is refused)."""

from __future__ import annotations

from typing import Any

import pytest

import fencing
import fencing.aio
from tests.support.logs import read_values


@pytest.mark.parametrize("cls", [fencing.Producer, fencing.aio.Producer])
def test_a_producer_of_something_not_a_topic_is_a_typed_error(cls: Any) -> None:
    class NotATopic:
        pass

    with pytest.raises(fencing.InvalidArgumentType, match="expected a fencing Topic"):
        cls(NotATopic())


@pytest.mark.parametrize(
    ("setting", "value"),
    [("linger_ms", 0.0), ("batch_size", 1), ("idempotent", False), ("lease_ttl", 1.0),
     ("name", "other"), ("access_mode", fencing.AccessMode.EXCLUSIVE)],
)  # fmt: skip
def test_a_producers_settings_are_fixed_once_it_is_made(
    client: fencing.Client, setting: str, value: object
) -> None:
    topic = client.topic("t", partitions=1)
    with topic.producer(linger_ms=5.0) as p:
        before = getattr(p, setting)
        with pytest.raises(AttributeError, match=f"producer's {setting} is fixed"):
            setattr(p, setting, value)
        assert getattr(p, setting) == before
        assert p.send_async(b"a").result(timeout=10).offset == 0  # still sends as made
    assert read_values(client, "t", 0) == [b"a"]


def test_last_resolution_can_be_reset(client: fencing.Client) -> None:
    topic = client.topic("t", partitions=1)
    with topic.producer() as p:
        p.send(b"a")
        p.last_resolution = None
        assert p.last_resolution is None
        assert p.send(b"b").offset == 1

"""A consumer's polls, records, lag and commits, and what attributes never carry."""

from __future__ import annotations

from fencing import Client

from ..support.telemetry import Recorded


def test_a_poll_counts_its_records_and_the_lag_its_own_reply_told(
    client: Client, recorded: Recorded, topic_name: str
) -> None:
    topic = client.topic(topic_name, partitions=1)
    with topic.producer() as p:
        p.send_batch([b"a", b"b", b"c", b"d", b"e"], partition=0)
    with topic.consumer(group="billing", member_id="m1", partitions=[0], start="earliest") as c:
        assert len(c.poll(max_records=2)) == 2
        c.commit()
    points = recorded.collect()
    on = {"fencing.topic": topic_name, "fencing.group": "billing"}
    assert points.sum("fencing.consumer.polls", on) == 1
    assert points.sum("fencing.consumer.records", {**on, "fencing.partition": 0}) == 2
    lag = points.matching("fencing.consumer.lag", {**on, "fencing.partition": 0})
    assert [p.value for p in lag] == [3]
    assert points.by("fencing.claims", "fencing.kind") == {"consumer": 1}
    (poll,) = recorded.spans("fencing.poll")
    expected = {**on, "fencing.script": "check", "fencing.outcome": "ok", "fencing.records": 2}
    assert dict(poll.attributes or {}) == expected
    (commit,) = recorded.spans("fencing.commit")
    assert (commit.attributes or {}).get("fencing.outcome") == "committed"


SECRET = "s3cr3t-9f1c"


def test_no_attribute_carries_a_records_contents_or_a_keys_value(
    client: Client, recorded: Recorded, topic_name: str
) -> None:
    topic = client.topic(topic_name, partitions=2)
    with topic.producer() as p:
        p.send(f"value-{SECRET}", key=f"key-{SECRET}", headers={"h": f"header-{SECRET}"})
        p.send_batch([f"batch-{SECRET}".encode()], partition=0)
    owner = client.ownership("journal", "host-a", ttl=30.0)
    owner.claim([f"resource-{SECRET}"])
    owner.close()
    with topic.consumer(group="g", member_id="m", partitions=[0, 1], start="earliest") as c:
        c.poll(max_records=10)
        c.commit()
    points = recorded.collect()
    spans = recorded.spans()
    assert points.points and spans
    seen = [str(v) for p in points.points for v in p.attributes.values()]
    seen += [str(v) for s in spans for v in (s.attributes or {}).values()]
    seen += [s.name for s in spans]
    assert not [v for v in seen if SECRET in v]
    assert {s.name for s in spans} == {"fencing.send", "fencing.claim", "fencing.poll",
                                       "fencing.commit"}  # fmt: skip


def test_each_partitions_lag_is_told_by_the_polls_that_reach_it_in_turn(
    client: Client, recorded: Recorded, topic_name: str
) -> None:
    """The lag comes from a poll's own replies (no read of its own): a poll that stops at
    ``max_records`` leaves the lag of a partition it did not reach as an earlier poll told
    it, and polls start at each partition in turn, so the next poll tells it."""
    topic = client.topic(topic_name, partitions=2)

    def lag() -> dict[int, float]:
        points = recorded.collect().matching("fencing.consumer.lag", {"fencing.topic": topic_name})
        return {pt.attributes["fencing.partition"]: pt.value for pt in points}

    with topic.producer() as p, topic.consumer("g", "m", partitions=[0, 1], start="earliest") as c:
        assert c.poll(max_records=5) == [] and c.poll(max_records=5) == []
        assert lag() == {0: 0, 1: 0}
        p.send_batch([b"a"] * 10, partition=0)
        p.send_batch([b"b"] * 10, partition=1)
        first = c.poll(max_records=5)
        (reached,) = {r.partition for r in first}
        (other,) = {0, 1} - {reached}
        assert lag() == {reached: 5, other: 0}  # the other one: as the last poll told it
        second = c.poll(max_records=5)
        assert {r.partition for r in second} == {other}
        assert lag() == {reached: 5, other: 5}

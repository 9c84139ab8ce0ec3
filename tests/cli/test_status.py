"""``fencing status`` and the other read commands against keys another program wrote where
redis-fencing keeps state (a key of another Redis type), and how they print durations and
empty partitions: state made with the library API and raw commands, exact output lines and
exit statuses through ``fencing.cli.main``.

A key of the wrong type is one line on stderr naming the key, exit status 2, for every
command that names one thing it reads (a topic, a row); the listings skip it, list the rest
and name it on stderr (tests/cli/test_listings_skip_bad_keys.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import redis

from fencing import Client, Topic
from fencing._keys import ELECTION_GROUP

from ..conftest import ServerInfo
from ..support.cli import at, one_error_line, run
from ..support.clock import server_ms
from ..support.keys import snapshot


def wrong_type(key: str, what: str, held: str = "string", kept: str = "hash") -> str:
    """The error line of a key of the wrong type, as every read command prints it."""
    return (
        f"fencing: key {key!r} ({what}) holds a Redis {held}, not a {kept}: another program "
        "uses this name; choose another namespace or remove that key\n"
    )


def skipped_line(key: str, what: str, left_out: str, held: str = "string") -> str:
    """The stderr line of a key of the wrong type a listing skipped."""
    return (
        f"fencing: skipped key {key!r} ({what}): it holds a Redis {held}, not a hash (another "
        f"program wrote it), so {left_out} is not listed; remove that key or choose another "
        "namespace"
    )


def created(raw: redis.Redis, key: str, field: str = "created_ms") -> str:
    """A server time field as the CLI prints times (UTC ISO 8601, to the second)."""
    ms = int(raw.hget(key, field) or 0)
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def fails(
    capsys: pytest.CaptureFixture[str], server: ServerInfo, namespace: str, *argv: str
) -> str:
    """Run a command that must fail: nothing on stdout, exit status 2; its error line."""
    code, out, err = run(capsys, *argv, *at(server, namespace))
    assert (code, out) == (2, ""), (argv, out, err)
    return one_error_line(err)


@pytest.fixture
def orders(client: Client) -> Topic:
    """Topic orders: 3 records on partition 0, none on partition 1."""
    topic = client.topic("orders", partitions=2)
    with topic.producer() as producer:
        for value in (b"a", b"b", b"c"):
            producer.send(value, partition=0)
    return topic


# -- a key of the wrong type: one line naming it, exit status 2 ---------------------------------


def test_partition_log_of_another_type_is_one_line_naming_it(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    stream = client.keys.partition("orders", 0).stream
    raw.delete(stream)
    raw.set(stream, b"x")
    what = "the log of partition 0 of topic 'orders'"
    expected = wrong_type(stream, what, kept="stream")
    assert fails(capsys, server, namespace, "status", "orders") == expected
    assert fails(capsys, server, namespace, "status", "orders", "--json") == expected
    # The library's own typed error (WrongKeyType), never Redis's raw refusal.
    line = fails(capsys, server, namespace, "tail", "orders", "-p", "0")
    assert line.startswith(f"fencing: key {stream!r} holds a Redis string")
    assert "WRONGTYPE" not in line and "Redis refused" not in line
    # The other partition is still there to see, and the namespace listing does not read logs.
    code, out, err = run(capsys, "status", "orders", "-p", "1", *at(server, namespace))
    assert (code, err) == (0, "")
    assert out.splitlines()[1] == "partition 1: holds no records (next offset 0)"
    code, out, err = run(capsys, "status", *at(server, namespace))
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == (
        f"namespace '{namespace}': 1 topic(s), 0 election(s), 0 consumer group(s)"
    )


def test_topic_metadata_of_another_type_is_one_line_naming_it(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    meta = client.keys.topic_meta("orders")
    raw.rpush(meta, b"x")
    before = snapshot(raw, namespace)
    expected = wrong_type(meta, "the metadata of topic 'orders'", held="list")
    for argv in (
        ["status", "orders"],
        ["status", "orders", "-p", "0", "--json"],
        ["tail", "orders"],
        ["release", "--producer", "orders", "--yes"],
    ):
        assert fails(capsys, server, namespace, *argv) == expected, argv
    assert snapshot(raw, namespace) == before


def test_partition_metadata_of_another_type_is_one_line_naming_it(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    part = client.keys.partition("orders", 1).meta
    raw.delete(part)
    raw.sadd(part, b"x")
    expected = wrong_type(part, "the metadata of partition 1 of topic 'orders'", held="set")
    assert fails(capsys, server, namespace, "status", "orders") == expected


def test_ownership_row_of_another_type_is_one_line_naming_it(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    row = client.keys.ownership("audit", "orders/1")
    raw.set(row, b"x")
    before = snapshot(raw, namespace)
    expected = wrong_type(row, "the ownership row of 'orders/1' in group 'audit'")
    # status TOPIC reads the rows of its consumer groups; owners and release read the row.
    for argv in (
        ["status", "orders"],
        ["status", "orders", "-p", "1"],
        ["release", "audit", "orders/1", "--yes"],
    ):
        assert fails(capsys, server, namespace, *argv) == expected, argv
    assert snapshot(raw, namespace) == before
    # Partition 0 has no row of the wrong type.
    code, out, err = run(capsys, "status", "orders", "-p", "0", *at(server, namespace))
    assert (code, err, out.splitlines()[-1]) == (0, "", "consumer groups: none")


def test_exclusive_producer_row_of_another_type_is_one_line_naming_it(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    owner = client.keys.partition("orders", 0).owner
    raw.delete(owner)
    raw.zadd(owner, {b"x": 1})
    what = "the exclusive-producer row of partition 0 of topic 'orders'"
    assert fails(capsys, server, namespace, "status", "orders") == wrong_type(
        owner, what, held="zset"
    )


def test_election_keys_of_another_type_are_one_line_naming_them(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    election = client.election("scheduler", candidate_id="host-a", ttl=10.0)
    with election.campaign():
        pass
    election.close()
    row = client.keys.ownership(ELECTION_GROUP, "scheduler")
    raw.delete(row)
    raw.set(row, b"x")
    assert fails(capsys, server, namespace, "release", ELECTION_GROUP, "scheduler", "--yes") == (
        wrong_type(row, "the ownership row of 'scheduler' in group '__election__'")
    )


# -- the namespace listing skips a key of the wrong type and lists the rest ----------------------


def test_namespace_listing_skips_keys_of_the_wrong_type_and_lists_the_rest(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    with orders.consumer("billing", "host-a", partitions=[0, 1]) as consumer:
        consumer.commit({0: 2})
    election = client.election("scheduler", candidate_id="host-a", ttl=10.0)
    with election.campaign():
        pass  # resigned: the row is free
    election.close()
    # What another program wrote where redis-fencing keeps state: a topic, a consumer row,
    # an election.
    bad_topic = client.keys.topic_meta("good")
    raw.set(bad_topic, b"x")
    bad_row = client.keys.ownership("audit", "orders/1")
    raw.set(bad_row, b"x")
    bad_election = client.keys.ownership(ELECTION_GROUP, "broken")
    raw.lpush(bad_election, b"x")

    code, out, err = run(capsys, "status", *at(server, namespace))
    assert code == 0
    assert err.splitlines() == [
        skipped_line(bad_topic, "the metadata of topic 'good'", "topic 'good'"),
        skipped_line(
            bad_row,
            "the ownership row of 'orders/1' in group 'audit'",
            "partition 1 of topic 'orders' in consumer group 'audit'",
        ),
        skipped_line(bad_election, "the row of election 'broken'", "election 'broken'", "list"),
    ]
    made = created(raw, client.keys.topic_meta("orders"))
    assert out.splitlines() == [
        f"namespace '{namespace}': 1 topic(s), 1 election(s), 1 consumer group(s), "
        "3 key(s) skipped",
        "topics:",
        "  TOPIC   PARTITIONS  CREATED                    STATE",
        f"  orders  2           {made}  ready",
        "elections:",
        "  NAME       STATE  LEADER  SESSION  TOKEN  SINCE  WAITING  LEASE",
        "  scheduler  free   -       -        1      -      0        -",
        "consumer groups (details: fencing status TOPIC):",
        "  GROUP    TOPIC   PARTITIONS  OWNED  LAG",
        "  billing  orders  2           0      1 (1 from start)",
    ]

    code, out, err = run(capsys, "status", "--json", *at(server, namespace))
    assert (code, len(err.splitlines())) == (0, 3)
    status = json.loads(out)
    assert [t["name"] for t in status["topics"]] == ["orders"]
    assert [e["name"] for e in status["elections"]] == ["scheduler"]
    assert [(g["group"], g["lag"]) for g in status["groups"]] == [("billing", 1)]
    assert status["skipped"] == [
        {
            "key": bad_topic,
            "key_type": "string",
            "expected": "hash",
            "what": "the metadata of topic 'good'",
            "left_out": "topic 'good'",
        },
        {
            "key": bad_row,
            "key_type": "string",
            "expected": "hash",
            "what": "the ownership row of 'orders/1' in group 'audit'",
            "left_out": "partition 1 of topic 'orders' in consumer group 'audit'",
        },
        {
            "key": bad_election,
            "key_type": "list",
            "expected": "hash",
            "what": "the row of election 'broken'",
            "left_out": "election 'broken'",
        },
    ]


def test_namespace_listing_skips_a_partition_whose_committed_offsets_are_of_the_wrong_type(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    with orders.consumer("billing", "host-a", partitions=[0, 1]) as consumer:
        consumer.commit({0: 2, 1: 0})
    committed = client.keys.partition("orders", 0).committed
    raw.delete(committed)
    raw.set(committed, b"x")
    code, out, err = run(capsys, "status", *at(server, namespace))
    assert code == 0
    assert (
        err
        == skipped_line(
            committed,
            "the committed offsets of partition 0 of topic 'orders'",
            "partition 0 of topic 'orders' in every consumer group",
        )
        + "\n"
    )
    lines = out.splitlines()
    assert lines[0].endswith(", 1 consumer group(s), 1 key(s) skipped")
    assert lines[-2:] == [
        "  GROUP    TOPIC   PARTITIONS  OWNED  LAG",
        "  billing  orders  1           0      0",
    ]
    # Named, the topic is an error naming the key.
    assert fails(capsys, server, namespace, "status", "orders") == wrong_type(
        committed, "the committed offsets of partition 0 of topic 'orders'"
    )


# -- durations and empty partitions, as people read them ------------------------------------------


def test_leases_and_ages_print_as_durations(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    now = server_ms(raw)
    # A row whose holder died 11 min 34.5 s ago; half a second of margin for the test itself.
    row = client.keys.ownership("journal", "orders/0")
    holder = "0123456789abcdef"
    fields = {"session": holder, "label": "host-a", "gen": 1, "token": 1}
    raw.hset(row, mapping={**fields, "expires": now - 694_500})
    # A PID that last wrote 2 h 5 min ago (its state as the scripts write it).
    pids = client.keys.partition("orders", 1).pids
    raw.hset(pids, "77", f"0 4 {now - 7_500_500} {now - 7_500_500} ab12;1")
    code, out, err = run(capsys, "owners", "journal", *at(server, namespace))
    assert (code, err) == (0, "")
    assert out.splitlines()[1:] == [
        "  orders/0: lapsed, holder host-a (session 01234567, lease lapsed 11m 34s ago), "
        "generation 1, token 1"
    ]
    code, out, err = run(capsys, "status", "orders", "-p", "1", *at(server, namespace))
    assert (code, err) == (0, "")
    assert "  pid 77: generation 0, last sequence 4, last write 2h 5m ago, window 1" in (
        out.splitlines()
    )


def test_empty_partition_says_it_holds_no_records(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    topic = client.topic("t", partitions=1).open()
    code, out, err = run(capsys, "status", "t", *at(server, namespace))
    assert (code, err) == (0, "")
    inc = (raw.hget(client.keys.topic_meta("t"), "inc") or b"").decode()
    made = created(raw, client.keys.topic_meta("t"))
    assert out.splitlines() == [
        f"topic 't' in namespace '{namespace}': 1 partition(s), incarnation {inc}, created {made}",
        "partition 0: holds no records (next offset 0)",
        "  epoch 0, mode none, holder none",
        "  shared producers: 0 live of 0",
        "  waiters (FIFO): 0",
        "consumer groups: none",
    ]
    assert fails(capsys, server, namespace, "tail", "t", "--from", "5") == (
        "fencing: offset 5 is out of range for partition 0 of topic 't': it holds no records "
        "(next offset 0); use 'earliest' or 'latest'\n"
    )

    with topic.producer() as producer:
        producer.send(b"a", partition=0)
        code, out, _ = run(capsys, "status", "t", *at(server, namespace))
        assert (
            out.splitlines()[1]
            == "partition 0: holds offset 0 (next offset 1), 1 record(s) retained"
        )
        producer.send(b"b", partition=0)
        producer.send(b"c", partition=0)
    code, out, _ = run(capsys, "status", "t", *at(server, namespace))
    assert out.splitlines()[1] == (
        "partition 0: holds offsets 0 to 2 (next offset 3), 3 record(s) retained"
    )
    assert fails(capsys, server, namespace, "tail", "t", "--from", "5") == (
        "fencing: offset 5 is out of range for partition 0 of topic 't': it holds offsets 0 "
        "to 2 (next offset 3); use 'earliest', 'latest' or an offset in that range\n"
    )
    # Trimmed to nothing: empty again, at the next offset it had.
    assert topic.trim(0, before_offset=3) == 3
    code, out, _ = run(capsys, "status", "t", *at(server, namespace))
    assert out.splitlines()[1] == "partition 0: holds no records (next offset 3)"
    assert fails(capsys, server, namespace, "tail", "t", "--from", "1") == (
        "fencing: offset 1 is out of range for partition 0 of topic 't': it holds no records "
        "(next offset 3); use 'earliest' or 'latest'\n"
    )


def test_status_lists_each_guarded_topic_with_its_election_and_token(
    capsys: pytest.CaptureFixture[str], server: ServerInfo, namespace: str, client: Client
) -> None:
    client.topic("free", partitions=1).open()
    election = client.election("sched", "host-a", ttl=10.0)
    with election.campaign() as first:
        first.producer(client.topic("decisions", partitions=2)).close()
    with election.campaign() as term:
        assert term.token == 2
        code, out, err = run(capsys, "status", *at(server, namespace))
        assert (code, err) == (0, "")
        lines = out.splitlines()
        start = lines.index(
            "guarded topics (written only by leadership.producer of their election):"
        )
        assert lines[start + 1].split() == ["TOPIC", "ELECTION", "TOKEN"]
        assert lines[start + 2].split() == ["decisions", "sched", "2"]
        assert "free" not in "".join(lines[start : start + 4])
        code, out, _ = run(capsys, "status", "decisions", *at(server, namespace))
        assert out.splitlines()[0].endswith(", guarded by election 'sched'")
    election.close()

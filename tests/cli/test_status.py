"""``fencing status`` and the other read commands: how they print durations and empty
partitions. State made with the library API and raw commands, exact output lines and exit
statuses through ``fencing.cli.main``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import redis

from fencing import Client, Topic

from ..conftest import ServerInfo
from ..support.cli import at, one_error_line, run
from ..support.clock import server_ms


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


# -- durations and empty partitions, as people read them ------------------------------------------


def test_leases_and_ages_print_as_durations(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    now = server_ms(raw)
    # A row whose holder died 11 min 34.5 s ago; half a second of margin for the test itself.
    row = client.keys.ownership("journal", "orders/0")
    session = "0123456789abcdef"
    fields = {"session": session, "label": "host-a", "gen": 1, "token": 1}
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

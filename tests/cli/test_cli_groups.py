"""``fencing status`` / ``fencing elections`` / ``fencing release`` on consumer groups and
elections: state made with the library API, exact CLI output (text and --json) through
``fencing.cli.main``. Leases left vary from run to run: text compares them as ``N``
(the LEASE column is always the last, so its width never moves another column), JSON
checks their range and then compares everything else exactly."""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

import fencing
from fencing import Client, Topic
from fencing._keys import ELECTION_GROUP
from fencing._sync.ownership import Ownership

from ..conftest import ServerInfo
from ..support.cli import at, one_error_line, run
from ..support.clock import wait_server_past
from ..support.polling import wait_until

#: A duration as the CLI prints it (fencing.cli._output.duration): 850ms, 8.2s, 11m 34s.
DURATION = r"\d+(?:\.\d)?(?:ms|s|m|h|d)(?: \d+[hms])?"


def leases(out: str) -> str:
    """Text output with the leases left (which vary) as N."""
    out = re.sub(rf"\bexpires in {DURATION}", "expires in N", out)
    return re.sub(rf"\blapsed {DURATION} ago", "lapsed N ago", out)


def section(out: str, title: str) -> str:
    """The lines of ``out`` from the one starting with ``title`` to the next unindented one."""
    lines = out.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next(
        (i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines)
    )
    return "".join(lines[start:end])


def when(raw: redis.Redis, key: str, field: str) -> str:
    ms = int(raw.hget(key, field) or 0)
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def live_lease(row: dict[str, Any], expires_ms: int, ttl_ms: int = 10_000) -> dict[str, Any]:
    """``row`` (a JSON owner row) with its lease checked and taken out."""
    assert 0 < row.pop("lease_left_ms") <= ttl_ms
    assert row.pop("expires_ms") == expires_ms
    return row


def send(topic: Topic, partition: int, n: int) -> None:
    with topic.producer() as producer:
        for i in range(n):
            producer.send(b"v%d" % i, partition=partition)


@pytest.fixture
def orders(client: Client) -> Topic:
    """Topic orders: 10 records on partition 0, 4 on partition 1."""
    topic = client.topic("orders", partitions=2)
    send(topic, 0, 10)
    send(topic, 1, 4)
    return topic


# -- status TOPIC: consumer groups -------------------------------------------------------------


def test_status_topic_shows_each_group_owner_committed_offset_and_lag(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    billing = orders.consumer("billing", "host-a", partitions=[0])
    assert len(billing.poll(max_records=4)) == 4
    assert billing.commit() == {0: 4}
    orders.consumer("audit", "host b", partitions=[1]).close()  # a row, never committed
    with orders.consumer("replay", "host-c", partitions=[0], start="earliest") as replay:
        replay.poll(max_records=100)
        assert replay.commit() == {0: 10}
    send(orders, 0, 2)  # partition 0: next 12
    # Rows that are not a partition of this topic are no consumer groups of it.
    journal = client.ownership("journal", owner_id="host-j")
    journal.claim(["orders/x", "orders/01", "orders/7", "other/0", "orders"])

    code, out, err = run(capsys, "status", "orders", *at(server, namespace))
    assert (code, err) == (0, "")
    s = billing._owner.session[:8]
    assert leases(section(out, "consumer groups")) == (
        "consumer groups: 3\n"
        "  GROUP    PARTITION  COMMITTED  NEXT  LAG             OWNER   STATE  SESSION   TOKEN  LEASE\n"  # noqa: E501
        "  audit    1          -          4     4 (from start)  -       free   -         1      -\n"
        f"  billing  0          4          12    8               host-a  live   {s}  1      expires in N\n"  # noqa: E501
        "  replay   0          10         12    2               -       free   -         1      -\n"
    )
    # The topic's own lines are still there, above.
    assert out.startswith(f"topic 'orders' in namespace '{namespace}': 2 partition(s)")
    assert "partition 0: holds offsets 0 to 11 (next offset 12), 12 record(s) retained" in out

    code, out, err = run(capsys, "status", "orders", "--json", *at(server, namespace))
    assert (code, err) == (0, "")
    status = json.loads(out)
    assert [p["partition"] for p in status["partitions"]] == [0, 1]  # unchanged shape
    groups = status["groups"]
    billing_row = client.keys.ownership("billing", "orders/0")
    owner = live_lease(
        groups[1]["partitions"][0].pop("owner"), int(raw.hget(billing_row, "expires"))
    )
    assert owner == {
        "group": "billing",
        "resource": "orders/0",
        "state": "live",
        "label": "host-a",
        "session": billing._owner.session,
        "generation": 1,
        "token": 1,
    }

    def free(group: str, resource: str) -> dict[str, Any]:
        return {
            "group": group,
            "resource": resource,
            "state": "free",
            "label": "",
            "session": "",
            "generation": 1,
            "token": 1,
            "lease_left_ms": 0,
            "expires_ms": 0,
        }

    def part(p: int, start: int, end: int, committed: int | None, **more: Any) -> dict[str, Any]:
        return {
            "partition": p,
            "present": True,
            "start_offset": start,
            "next_offset": end,
            "committed_offset": committed,
            "committed_token": None if committed is None else 1,
            "lag": end - (start if committed is None else committed),
            "lag_from": "start" if committed is None else "committed",
            **more,
            "note": None,
        }

    assert groups == [
        {
            "group": "audit",
            "topic": "orders",
            "lag": 4,
            "owned": 0,
            "partitions": [part(1, 0, 4, None, owner=free("audit", "orders/1"))],
        },
        {
            "group": "billing",
            "topic": "orders",
            "lag": 8,
            "owned": 1,
            "partitions": [part(0, 0, 12, 4)],
        },
        {
            "group": "replay",
            "topic": "orders",
            "lag": 2,
            "owned": 0,
            "partitions": [part(0, 0, 12, 10, owner=free("replay", "orders/0"))],
        },
    ]
    # Keys in a stable order, for scripts that print them as they come.
    assert list(groups[0]) == ["group", "topic", "lag", "owned", "partitions"]
    assert list(groups[0]["partitions"][0]) == [
        "partition", "present", "start_offset", "next_offset", "committed_offset",
        "committed_token", "lag", "lag_from", "owner", "note",
    ]  # fmt: skip

    # --partition narrows the groups too.
    code, out, err = run(capsys, "status", "orders", "-p", "1", "--json", *at(server, namespace))
    assert (code, err) == (0, "")
    assert [
        (g["group"], [p["partition"] for p in g["partitions"]]) for g in json.loads(out)["groups"]
    ] == [("audit", [1])]
    billing.close()
    journal.close()


def test_status_topic_without_groups_and_committed_offsets_gone_wrong(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    code, out, _ = run(capsys, "status", "orders", *at(server, namespace))
    assert (code, out.splitlines()[-1]) == (0, "consumer groups: none")
    code, out, _ = run(capsys, "status", "orders", "--json", *at(server, namespace))
    assert json.loads(out)["groups"] == []

    with orders.consumer("slow", "host-a", partitions=[0, 1]) as slow:
        assert slow.commit({0: 3, 1: 4}) == {0: 3, 1: 4}
    assert orders.trim(0, before_offset=6) == 6
    # What a server that lost writes leaves: a committed offset past the partition's end.
    raw.hset(client.keys.partition("orders", 1).committed, "slow", 9)
    code, out, err = run(capsys, "status", "orders", *at(server, namespace))
    assert (code, err) == (0, "")
    assert section(out, "consumer groups") == (
        "consumer groups: 1\n"
        "  GROUP  PARTITION  COMMITTED  NEXT  LAG  OWNER  STATE  SESSION  TOKEN  LEASE\n"
        "  slow   0          3          10    7    -      free   -        1      -\n"
        "  slow   1          9          4     -5   -      free   -        1      -\n"
        "  slow partition 0: committed offset 3 was trimmed away: the group resumes at the "
        "first retained offset 6\n"
        "  slow partition 1: committed offset 9 is past the end (4): the partition went back "
        "in history; the group's consumers raise StateLost\n"
    )


# -- elections --------------------------------------------------------------------------------


def test_elections_show_leader_token_term_lease_and_waiting_candidates(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    code, out, err = run(capsys, "elections", *at(server, namespace))
    assert (code, out, err) == (0, f"elections in namespace '{namespace}': 0\n", "")

    leader = client.election("scheduler", candidate_id="host-a", ttl=10.0)
    waiter = client.election("scheduler", candidate_id="host b", ttl=10.0)
    quiet = client.election("compactor", candidate_id="host-c", ttl=10.0)
    with quiet.campaign() as term:
        assert term.token == 1
    # A leader whose process died: its lease lapses by server time, nobody was elected.
    dead = Ownership(client, ELECTION_GROUP, "host-d", 0.2, _allow_reserved=True)
    dead.claim("reaper")
    reaper_row = client.keys.ownership(ELECTION_GROUP, "reaper")
    wait_server_past(raw, int(raw.hget(reaper_row, "expires") or 0))

    release = threading.Event()
    waiting: list[fencing.Leadership] = []

    def campaign() -> None:
        with waiter.campaign(timeout=30) as won:
            waiting.append(won)
            release.wait(30)

    with leader.campaign() as term:
        thread = threading.Thread(target=campaign, daemon=True)
        thread.start()
        wait_until(lambda: leader.candidates() == 1)
        wait_session = next(
            m.decode().split(" ", 1)[0]
            for m in raw.zrange(client.keys.election_candidates("scheduler"), 0, -1)
        )
        row = client.keys.ownership(ELECTION_GROUP, "scheduler")
        a, b = term._owner.session, wait_session
        since, since_d = when(raw, row, "since"), when(raw, reaper_row, "since")
        d = dead.session[:8]

        code, out, err = run(capsys, "elections", *at(server, namespace))
        assert (code, err) == (0, "")
        expected = (
            f"elections in namespace '{namespace}': 3\n"
            "  NAME       STATE   LEADER            SESSION   TOKEN  SINCE                      WAITING  LEASE\n"  # noqa: E501
            "  compactor  free    -                 -         1      -                          0        -\n"  # noqa: E501
            f"  reaper     lapsed  - (last: host-d)  {d}  1      {since_d}  0        lapsed N ago\n"
            f"  scheduler  live    host-a            {a[:8]}  1      {since}  1        expires in N\n"  # noqa: E501
            f"  waiting in scheduler: host b (session {b[:8]})\n"
        )
        assert leases(out) == expected

        code, out, err = run(capsys, "elections", "scheduler", "--json", *at(server, namespace))
        assert (code, err) == (0, "")
        [shown] = json.loads(out)
        assert 0 < shown["candidates"][0].pop("lease_left_ms") <= 10_000
        assert live_lease(shown, int(raw.hget(row, "expires") or 0)) == {
            "name": "scheduler",
            "state": "live",
            "leader": "host-a",
            "label": "host-a",
            "session": a,
            "token": 1,
            "generation": 1,
            "since_ms": int(raw.hget(row, "since") or 0),
            "candidate_count": 1,
            "candidates": [{"label": "host b", "session": b}],
        }
        # The same elections are the status section; owners __election__ shows the rows.
        code, out, _ = run(capsys, "status", *at(server, namespace))
        assert code == 0
        table = leases(run(capsys, "elections", *at(server, namespace))[1]).splitlines()[1:]
        assert leases(section(out, "elections:")).splitlines()[1:] == table
        code, out, _ = run(capsys, "owners", ELECTION_GROUP, *at(server, namespace))
        assert code == 0
        assert out.splitlines()[0] == (
            f"group '__election__' in namespace '{namespace}': 3 row(s) (elections: "
            "'fencing elections' shows leaders, terms and candidates)"
        )
        assert f"  scheduler: live, holder host-a (session {a[:8]}" in out

        code, out, err = run(capsys, "elections", "scheduler", "nope", *at(server, namespace))
        assert (code, out) == (2, "")
        assert one_error_line(err) == (
            f"fencing: no election 'nope' in namespace '{namespace}' (list them with "
            "'fencing elections'; check --namespace and --url)\n"
        )
    # Resigned: host b is elected with the next token.
    wait_until(lambda: waiting)
    code, out, _ = run(capsys, "elections", "scheduler", "--json", *at(server, namespace))
    [shown] = json.loads(out)
    assert (shown["leader"], shown["token"], shown["candidate_count"]) == ("host b", 2, 0)
    release.set()
    thread.join(30)
    for election in (leader, waiter, quiet):
        election.close()
    dead.close()


# -- status without a topic: the namespace --------------------------------------------------------


def test_status_without_topic_shows_topics_elections_and_groups(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    code, out, err = run(capsys, "status", "--namespace", "empty" + namespace, "--url", server.url)
    # An empty namespace says so on stderr, naming those that have keys (this test's among them).
    assert code == 0 and err.startswith(f"fencing: namespace 'empty{namespace}' has no topics")
    assert f"'{namespace}'" in err and err.endswith("(pass --namespace NAME)\n")
    assert out == (
        f"namespace 'empty{namespace}': 0 topic(s), 0 election(s), 0 consumer group(s)\n"
        "topics: none\nelections: none\nconsumer groups: none\n"
    )

    other = client.topic("events", partitions=1)
    with orders.consumer("billing", "host-a", partitions=[0, 1]) as c:
        c.commit({0: 4})  # partition 1: nothing committed
    with other.consumer("billing", "host-a", partitions=[0]):
        pass
    # A group whose rows look like topic keys (<ns>:{a}:own:topic) is no topic.
    named_topic = client.ownership("topic", owner_id="x")
    named_topic.claim(["a"])
    election = client.election("scheduler", candidate_id="host-a", ttl=10.0)
    with election.campaign() as term:
        row = client.keys.ownership(ELECTION_GROUP, "scheduler")
        since = when(raw, row, "since")
        created = {
            t: when(raw, client.keys.topic_meta(t), "created_ms") for t in ("events", "orders")
        }
        code, out, err = run(capsys, "status", *at(server, namespace))
        assert (code, err) == (0, "")
        expected = (
            f"namespace '{namespace}': 2 topic(s), 1 election(s), 1 consumer group(s)\n"
            "topics:\n"
            "  TOPIC   PARTITIONS  CREATED                    STATE\n"
            f"  events  1           {created['events']}  ready\n"
            f"  orders  2           {created['orders']}  ready\n"
            "elections:\n"
            "  NAME       STATE  LEADER  SESSION   TOKEN  SINCE                      WAITING  LEASE\n"  # noqa: E501
            f"  scheduler  live   host-a  {term._owner.session[:8]}  1      {since}  0        expires in N\n"  # noqa: E501
            "consumer groups (details: fencing status TOPIC):\n"
            "  GROUP    TOPIC   PARTITIONS  OWNED  LAG\n"
            "  billing  events  1           0      0 (1 from start)\n"
            "  billing  orders  2           0      10 (1 from start)\n"
        )
        assert leases(out) == expected
        code, out, err = run(capsys, "status", "--json", *at(server, namespace))
        assert (code, err) == (0, "")
        status = json.loads(out)
    assert list(status) == [
        "namespace",
        "server_time_ms",
        "topics",
        "elections",
        "groups",
        "skipped",
    ]
    assert (status["namespace"], status["skipped"]) == (namespace, [])
    assert [t["name"] for t in status["topics"]] == ["events", "orders"]
    assert [(e["name"], e["leader"], e["token"]) for e in status["elections"]] == [
        ("scheduler", "host-a", 1)
    ]
    assert [(g["group"], g["topic"], g["lag"]) for g in status["groups"]] == [
        ("billing", "events", 0),
        ("billing", "orders", 10),
    ]
    assert [
        (p["partition"], p["committed_offset"], p["lag"], p["lag_from"])
        for p in status["groups"][1]["partitions"]
    ] == [(0, 4, 6, "committed"), (1, None, 4, "start")]

    code, out, err = run(capsys, "status", "-p", "0", *at(server, namespace))
    assert (code, out) == (2, "")
    assert "--partition needs a TOPIC" in one_error_line(err)
    election.close()
    named_topic.close()


# -- release: taking over a consumer partition and an election -----------------------------------


def test_release_takes_a_partition_from_a_consumer(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    old = orders.consumer("billing", "host-a", partitions=[0, 1])
    old.poll(max_records=3)
    assert old.commit() == {0: 3, 1: 0}
    committed = {p: old.committed(p) for p in (0, 1)}
    code, out, err = run(capsys, "release", "billing", "orders/0", "--yes", *at(server, namespace))
    assert (code, err) == (0, "")
    assert out == (
        "force-release in group 'billing' with generation 0 (always wins: severs any live "
        "holder, restarts the generation at 0, bumps the token):\n"
        f"  orders/0: token 1 -> 2, generation 1 -> 0; severed live holder 'host-a' (session "
        f"{old._owner.session[:8]}); it gets Fenced at its next check, renew or fenced write; "
        "released, the row is free\n"
    )
    with pytest.raises(fencing.Fenced):
        old.commit({0: 9})
    with pytest.raises(fencing.Fenced):
        old.poll()
    assert {p: old.committed(p) for p in (0, 1)} == committed  # nothing written
    old.close()
    # Another member takes it and resumes at the committed offset, with a higher token.
    with orders.consumer("billing", "host-b", partitions=[0]) as new:
        assert new.position(0) == committed[0]
        assert new._owner.grants["orders/0"].token == 3
        code, out, _ = run(capsys, "status", "orders", "-p", "0", *at(server, namespace))
        assert f"host-b  live   {new._owner.session[:8]}  3      expires in N" in leases(out)


def test_release_ends_an_election_term_and_a_waiting_candidate_is_elected(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    revoked: list[fencing.Leadership] = []
    leader = client.election("scheduler", "host-a", ttl=30.0, on_revoked=revoked.append)
    waiter = client.election("scheduler", "host-b", ttl=30.0)
    won: list[fencing.Leadership] = []
    done = threading.Event()

    def campaign() -> None:
        with waiter.campaign(timeout=30) as term:
            won.append(term)
            done.wait(30)

    with leader.campaign() as term:
        thread = threading.Thread(target=campaign, daemon=True)
        thread.start()
        wait_until(lambda: leader.candidates() == 1)
        code, out, err = run(
            capsys, "release", ELECTION_GROUP, "scheduler", "--yes", "--json",
            *at(server, namespace),
        )  # fmt: skip
        assert (code, err) == (0, "")
        [result] = json.loads(out)
        severed = result.pop("severed")
        assert (severed["label"], severed["session"], severed["token"]) == (
            "host-a",
            term._owner.session,
            1,
        )
        assert result == {
            "group": ELECTION_GROUP,
            "resource": "scheduler",
            "semantics": "generation 0",
            "token": {"old": 1, "new": 2},
            "generation": {"old": 1, "new": 0},
            "released": True,
        }
        assert term.lost.wait(10)  # told by the severed notification, no check needed
        wait_until(lambda: revoked)  # on_revoked runs just after lost is set
        assert revoked == [term]
        with pytest.raises(fencing.Fenced):
            term.check()
        wait_until(lambda: won)
        assert won[0].token == 3  # the operator's grant was token 2
        info = leader.leader()
        assert info is not None and (info.label, info.token) == ("host-b", 3)

        # Text, on the new leader.
        code, out, err = run(
            capsys, "release", ELECTION_GROUP, "scheduler", "--yes", *at(server, namespace)
        )
        assert (code, err) == (0, "")
        assert out == (
            "force-release in group '__election__' with generation 0 (always wins: severs any "
            "live holder, restarts the generation at 0, bumps the token):\n"
            "  scheduler: token 3 -> 4, generation 1 -> 0; severed live leader 'host-b' "
            f"(session {won[0]._owner.session[:8]}); its term ends (lost is set; Fenced at "
            "its next check or renewal); a waiting candidate, if any, is elected with a "
            "higher token; released, the row is free\n"
        )
        assert won[0].lost.wait(10)
    done.set()
    thread.join(30)
    leader.close()
    waiter.close()


def test_release_refuses_other_reserved_groups_and_unknown_elections(
    client: Client, orders: Topic, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    with orders.producer(fencing.AccessMode.EXCLUSIVE) as producer:
        for argv, says in [
            (["__producer__", "orders/0"], "fencing release --producer TOPIC --yes"),
            (["__other__", "x"], "only '__election__' (elections) can be released here"),
            ([ELECTION_GROUP, "nope"], "no ownership row for 'nope' in group '__election__'"),
        ]:
            code, out, err = run(capsys, "release", *argv, "--yes", *at(server, namespace))
            assert (code, out) == (2, "")
            assert says in one_error_line(err)
        producer.send(b"still the holder", partition=0)
    assert "List the rows with 'fencing elections'" in err
    assert raw.exists(client.keys.ownership(ELECTION_GROUP, "nope")) == 0


def test_help_documents_the_new_commands(capsys) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for command in ("status  ", "elections", "release __election__ scheduler --yes"):
        assert f"  fencing {command}" in out
    code, out, _ = run(capsys, "elections", "--help")
    assert code == 0 and "examples:" in out and "--json" in out and "lapsed" in out
    code, out, _ = run(capsys, "status", "--help")
    assert code == 0 and "(from start)" in out and "kafka-consumer-groups.sh" in out
    code, out, _ = run(capsys, "release", "--help")
    assert "fencing release __election__ scheduler --yes" in out
    assert "fencing release billing orders/0 --yes" in out

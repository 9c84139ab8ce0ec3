"""Every ``fencing`` command on a Redis Cluster: the cluster client refuses some commands in a
pipeline (``TIME``), so each command runs here once, against a topic with a live exclusive
producer, an ownership row and an elected leader, and must show or change exactly what it does
on a single server."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import fencing
from fencing import AccessMode

from ..conftest import ServerInfo
from ..support.cli import at, run
from ..support.polling import wait_until


@dataclass
class Scene:
    """What the commands look at: a 3-partition topic whose exclusive producer wrote one
    record to partition 0, a row of group 'journal' and the leader of 'scheduler'."""

    client: fencing.Client
    producer: fencing.Producer
    owner: fencing.Ownership
    term: fencing.Leadership


@contextlib.contextmanager
def scene(client: fencing.Client) -> Iterator[Scene]:
    topic = client.topic("orders", partitions=3)
    with (
        topic.producer(AccessMode.EXCLUSIVE, name="ctl") as producer,
        client.ownership("journal", owner_id="host-a") as owner,
        client.election("scheduler", candidate_id="leader-a").campaign() as term,
    ):
        producer.send(b"x", partition=0)
        owner.claim(["orders/0"])
        yield Scene(client, producer, owner, term)


def _fenced(call: Callable[[], Any], error: type[Exception]) -> bool:
    try:
        call()
    except error:
        return True
    return False


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    #: What the command printed (its --json output, parsed), reduced to what the case checks.
    shown: Callable[[Any], Any]
    expected: Any
    #: What the command changed, checked after it ran (None: it only reads).
    changed: Callable[[Scene], bool] | None = None


CASES = {
    "status": Case(
        ("status",),
        lambda s: (
            [t["name"] for t in s["topics"]],
            [(e["name"], e["leader"]) for e in s["elections"]],
            [(g["group"], g["topic"], g["lag"]) for g in s["groups"]],
            s["skipped"],
        ),
        (["orders"], [("scheduler", "leader-a")], [("journal", "orders", 1)], []),
    ),
    "status TOPIC": Case(
        ("status", "orders"),
        lambda s: [
            (p["partition"], p["next_offset"], p["epoch"], p["holder"]["label"])
            for p in s["partitions"]
        ],
        [(0, 1, 1, "ctl"), (1, 0, 1, "ctl"), (2, 0, 1, "ctl")],
    ),
    "owners": Case(
        ("owners", "journal"),
        lambda rows: [(r["resource"], r["state"], r["label"], r["token"]) for r in rows],
        [("orders/0", "live", "host-a", 1)],
    ),
    "elections": Case(
        ("elections",),
        lambda rows: [(e["name"], e["state"], e["leader"], e["token"]) for e in rows],
        [("scheduler", "live", "leader-a", 1)],
    ),
    "tail": Case(
        ("tail", "orders", "-p", "0", "--max", "1"),
        lambda rec: (rec["partition"], rec["offset"], rec["epoch"], rec["value"]),
        (0, 0, 1, "x"),
    ),
    "topics": Case(("topics",), lambda names: names, ["orders"]),
    "release a row": Case(
        ("release", "journal", "orders/0", "--yes"),
        lambda out: [(r["resource"], r["token"], r["released"]) for r in out],
        [("orders/0", {"old": 1, "new": 2}, True)],
        lambda s: _fenced(lambda: s.owner.check("orders/0"), fencing.Fenced),
    ),
    "release an election": Case(
        ("release", "__election__", "scheduler", "--yes"),
        lambda out: [(r["resource"], r["token"], r["released"]) for r in out],
        [("scheduler", {"old": 1, "new": 2}, True)],
        lambda s: s.term.lost.is_set(),
    ),
    "release a topic's producers": Case(
        ("release", "--producer", "orders", "--yes"),
        lambda out: [(r["partition"], r["epoch"], r["severed"]["label"]) for r in out],
        [(p, {"old": 1, "new": 2}, "ctl") for p in range(3)],
        lambda s: _fenced(lambda: s.producer.send(b"y", partition=1), fencing.ProducerFenced),
    ),
    "release a topic's producers and waiters": Case(
        ("release", "--producer", "orders", "--evict-waiters", "--yes"),
        lambda out: [(r["partition"], r["semantics"], r["epoch"], r["next_holder"]) for r in out],
        [(p, "evict all", {"old": 1, "new": 2}, None) for p in range(3)],
        lambda s: _fenced(lambda: s.producer.send(b"y", partition=2), fencing.ProducerFenced),
    ),
    "delete-topic": Case(
        ("delete-topic", "orders", "--yes", "--force"),
        lambda out: out,
        {"deleted": "orders", "namespace": None, "forced": True},
        lambda s: s.client.topics() == [],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_every_command_works_on_a_cluster(
    client: fencing.Client, server: ServerInfo, namespace: str, capsys, case: Case
) -> None:
    with scene(client) as seen:
        code, out, err = run(capsys, *case.argv, "--json", *at(server, namespace))
        assert (code, err) == (0, "")
        printed = json.loads(out)
        if isinstance(printed, dict) and printed.get("namespace") == namespace:
            printed["namespace"] = None  # the test's own namespace, random
        assert case.shown(printed) == case.expected
        changed = case.changed
        if changed is not None:
            wait_until(lambda: changed(seen))

"""Every listing command against a key of another Redis type at each kind of key it reads
(another program wrote it where redis-fencing keeps state): it lists the rest, names the key
in one line on stderr (so ``--json`` stays JSON on stdout) and exits 0."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from fencing import Client
from fencing._keys import ELECTION_GROUP, Keys

from ..conftest import ServerInfo
from ..support.cli import at, run


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    #: The key another program wrote (from the namespace's keys), and how.
    key: Callable[[Keys], str]
    held: str
    #: What the key is to redis-fencing, what is left out, and the type kept there.
    what: str
    left_out: str
    kept: str
    #: What the command still lists (its --json output, reduced).
    listed: Callable[[Any], Any]
    expected: Any


def _names(rows: list[dict[str, Any]]) -> list[str]:
    return [row["name"] for row in rows]


CASES = {
    "topics, a topic's metadata": Case(
        ("topics",),
        lambda k: k.topic_meta("broken"),
        "string",
        "the metadata of topic 'broken'",
        "topic 'broken'",
        "hash",
        lambda names: names,
        ["orders"],
    ),
    "status, a topic's metadata": Case(
        ("status",),
        lambda k: k.topic_meta("broken"),
        "list",
        "the metadata of topic 'broken'",
        "topic 'broken'",
        "hash",
        lambda s: (_names(s["topics"]), _names(s["elections"]), len(s["skipped"])),
        (["orders"], ["scheduler"], 1),
    ),
    "status, a consumer's row": Case(
        ("status",),
        lambda k: k.ownership("audit", "orders/0"),
        "string",
        "the ownership row of 'orders/0' in group 'audit'",
        "partition 0 of topic 'orders' in consumer group 'audit'",
        "hash",
        lambda s: [(g["group"], g["topic"]) for g in s["groups"]],
        [("journal", "orders")],
    ),
    "status, an election's row": Case(
        ("status",),
        lambda k: k.ownership(ELECTION_GROUP, "broken"),
        "string",
        "the row of election 'broken'",
        "election 'broken'",
        "hash",
        lambda s: _names(s["elections"]),
        ["scheduler"],
    ),
    "elections, an election's row": Case(
        ("elections",),
        lambda k: k.ownership(ELECTION_GROUP, "broken"),
        "set",
        "the row of election 'broken'",
        "election 'broken'",
        "hash",
        _names,
        ["scheduler"],
    ),
    "elections, an election's candidates": Case(
        ("elections",),
        lambda k: k.election_candidates("broken"),
        "string",
        "the candidates of election 'broken'",
        "election 'broken'",
        "zset",
        _names,
        ["scheduler"],
    ),
    "owners, a row": Case(
        ("owners", "journal"),
        lambda k: k.ownership("journal", "broken"),
        "string",
        "the ownership row of 'broken' in group 'journal'",
        "the row of 'broken'",
        "hash",
        lambda rows: [row["resource"] for row in rows],
        ["orders/0"],
    ),
}


def _write(raw: redis.Redis, key: str, kind: str) -> None:
    raw.delete(key)
    if kind == "string":
        raw.set(key, b"x")
    elif kind == "list":
        raw.rpush(key, b"x")
    else:
        raw.sadd(key, b"x")


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_a_listing_skips_a_key_of_another_type_names_it_and_lists_the_rest(
    client: Client,
    raw: redis.Redis,
    server: ServerInfo,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
    case: Case,
    as_json: bool,
) -> None:
    topic = client.topic("orders", partitions=1)
    with topic.producer() as producer:
        producer.send(b"a")
    client.ownership("journal", owner_id="host-a").claim(["orders/0"])
    with client.election("scheduler", candidate_id="host-a").campaign():
        pass  # resigned: the row stays, free
    if case.key(client.keys) == client.keys.election_candidates("broken"):
        with client.election("broken", candidate_id="host-b").campaign():
            pass
    key = case.key(client.keys)
    _write(raw, key, case.held)

    code, out, err = run(
        capsys, *case.argv, *(["--json"] if as_json else []), *at(server, namespace)
    )

    assert code == 0
    assert err == (
        f"fencing: skipped key {key!r} ({case.what}): it holds a Redis {case.held}, not a "
        f"{case.kept} (another program wrote it), so {case.left_out} is not listed; remove "
        "that key or choose another namespace\n"
    )
    if as_json:
        assert case.listed(json.loads(out)) == case.expected
    else:
        assert key not in out
        assert all(str(name) in out for name in _flat(case.expected))


def _flat(value: Any) -> list[Any]:
    """The names in an expected listing, for the text output's check."""
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in _flat(item)]
    return [] if isinstance(value, int) else [value]

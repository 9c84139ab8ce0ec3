"""``fencing topics`` and ``fencing delete-topic``, as the console script runs them."""

from __future__ import annotations

import json

import pytest
import redis

from fencing import AccessMode, Client, StateLost

from ..conftest import ServerInfo
from ..support.cli import at, one_error_line, run


def test_topics_lists_the_namespace_one_a_line_and_as_json(
    client: Client, server: ServerInfo, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("orders", "audit"):
        client.topic(name, partitions=1).open()
    assert run(capsys, "topics", *at(server, namespace)) == (0, "audit\norders\n", "")
    code, out, err = run(capsys, "topics", "--json", *at(server, namespace))
    assert (code, err, json.loads(out)) == (0, "", ["audit", "orders"])


def test_delete_topic_needs_yes_refuses_a_topic_in_use_and_deletes_with_force(
    client: Client,
    raw: redis.Redis,
    server: ServerInfo,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = client.topic("orders", partitions=1)
    producer = topic.producer(AccessMode.EXCLUSIVE, name="ctl")
    producer.send(b"a")
    code, out, err = run(capsys, "delete-topic", "orders", *at(server, namespace))
    assert (code, out) == (2, "")
    assert "add --yes" in one_error_line(err)
    code, out, err = run(capsys, "delete-topic", "orders", "--yes", *at(server, namespace))
    assert (code, out) == (2, "")
    assert "is in use: an exclusive producer" in one_error_line(err)
    assert "--force" in one_error_line(err)  # the flag, in words the CLI user can type
    assert raw.exists(f"{namespace}:{{orders/0}}:log") == 1
    code, out, err = run(
        capsys, "delete-topic", "orders", "--yes", "--force", *at(server, namespace)
    )
    assert (code, err) == (0, "")
    assert out == f"deleted topic 'orders' of namespace {namespace!r}\n"
    # Only the delete's mark is left: the live producer is told of the delete.
    assert list(raw.scan_iter(match=f"{namespace}:{{orders*")) == [
        f"{namespace}:{{orders/0}}:deleted".encode()
    ]
    with pytest.raises(StateLost) as lost:
        producer.send(b"b")
    assert lost.value.reason == "deleted"
    producer.close()
    code, out, err = run(capsys, "delete-topic", "orders", "--yes", *at(server, namespace))
    assert (code, out) == (2, "")
    assert "'orders' does not exist" in one_error_line(err)
    code, out, err = run(capsys, "delete-topic", "bad name", "--yes", *at(server, namespace))
    assert code == 2 and "invalid topic name" in one_error_line(err)


def test_delete_topic_keeps_its_marks_for_mark_ttl(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    client.topic("orders", partitions=2).open()
    code, out, err = run(
        capsys, "delete-topic", "orders", "--yes", "--mark-ttl", "60", *at(server, namespace)
    )
    assert (code, err) == (0, "")
    for p in (0, 1):
        ttl = raw.pttl(client.keys.partition("orders", p).deleted)
        assert 59_000 < ttl <= 60_000
    code, out, err = run(
        capsys, "delete-topic", "x", "--yes", "--mark-ttl", "0", *at(server, namespace)
    )
    assert (code, out) == (2, "")
    assert "mark_ttl must be a positive, finite number of seconds" in one_error_line(err)

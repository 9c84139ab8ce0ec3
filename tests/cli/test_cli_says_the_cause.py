"""The command says what went wrong where an operator would otherwise guess: an
unreachable cluster URL, an empty namespace; and its common options go before or after the
command's name."""

from __future__ import annotations

import json

from fencing import Client

from ..conftest import ServerInfo
from ..support.cli import at, one_error_line, run


def test_an_unreachable_cluster_url_is_one_line_exit_2(capsys) -> None:
    code, out, err = run(capsys, "status", "--url", "redis+cluster://127.0.0.1:1")
    assert (code, out) == (2, "")
    assert one_error_line(err).startswith(
        "fencing: cannot reach the Redis Cluster at redis+cluster://127.0.0.1:1: "
    )


def test_an_empty_namespace_says_so_and_names_the_namespaces_there(
    client: Client, server: ServerInfo, namespace: str, capsys
) -> None:
    client.topic("orders", partitions=1).open()
    empty = f"{namespace}-typo"
    code, out, err = run(capsys, "status", *at(server, empty))
    assert code == 0
    assert out.startswith(f"namespace {empty!r}: 0 topic(s), 0 election(s)")
    line = one_error_line(err)
    assert line.startswith(
        f"fencing: namespace {empty!r} has no topics, elections or consumer groups on "
    )
    assert "namespaces with redis-fencing keys there: " in line
    assert f"{namespace!r}" in line and line.endswith(" (pass --namespace NAME)\n")


def test_common_options_go_before_or_after_the_command_and_after_wins(
    client: Client, server: ServerInfo, namespace: str, capsys
) -> None:
    client.topic("orders", partitions=1).open()
    code, out, err = run(capsys, *at(server, namespace), "--json", "topics")
    assert (code, err, json.loads(out)) == (0, "", ["orders"])
    code, out, err = run(
        capsys, "--namespace", "elsewhere", "--url", "redis://127.0.0.1:1/0",
        "topics", *at(server, namespace),
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert "orders" in out

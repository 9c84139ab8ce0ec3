"""The ``fencing`` command, in-process through ``fencing.cli.main`` against real servers, plus
one run of the installed console script (Ctrl-C on ``tail --follow``)."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

import fencing
from fencing import AccessMode, Client, Fenced, ProducerFenced, Record
from fencing.cli import main

from ..conftest import ServerInfo
from ..support.cli import at, one_error_line, run
from ..support.keys import namespace_keys
from ..support.polling import wait_until


def test_status_shows_offsets_epoch_holder_waiters_and_pids(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    topic = client.topic("orders", partitions=1)
    holder = topic.producer(AccessMode.EXCLUSIVE, name="ctl")
    holder.send(b"a", partition=0)
    holder.send_batch([Record(b"b"), Record(b"c")], partition=0)
    waiter = fencing.Producer(topic, AccessMode.WAIT_FOR_EXCLUSIVE, wait_timeout=30)
    thread = threading.Thread(target=waiter.open, daemon=True)
    thread.start()
    try:
        waiters_key = client.keys.partition("orders", 0).waiters
        wait_until(lambda: raw.zcard(waiters_key) == 1)
        code, out, err = run(capsys, "status", "orders", "--json", *at(server, namespace))
        assert (code, err) == (0, "")
        status = json.loads(out)
        assert status["namespace"] == namespace
        assert status["topic"]["partitions"] == 1 and status["topic"]["ready"] is True
        [p] = status["partitions"]
        pid, generation = holder.producer_id, holder.state.generations[0]
        offsets = (p["partition"], p["start_offset"], p["next_offset"], p["retained"])
        assert offsets == (0, 0, 3, 3)
        assert (p["epoch"], p["mode"]) == (holder.epoch(0), "exclusive") == (1, "exclusive")
        assert p["holder"]["label"] == "ctl" and p["holder"]["session"] == holder.session
        assert p["holder"]["live"] is True and 0 < p["holder"]["lease_left_ms"] <= 10_000
        assert (p["shared_count"], p["shared"]) == (0, [])
        assert p["waiter_count"] == 1
        assert [w["session"] for w in p["waiters"]] == [waiter.session]
        assert p["waiters"][0]["live"] is True
        [state] = p["pids"]
        del state["last_write_age_ms"]
        assert state == dict(
            pid=pid, generation=generation, last_sequence=2, window=2, expired=False
        )
        assert p["names"] == [{"name": "ctl", "pid": pid, "generation": generation}]

        code, out, err = run(capsys, "status", "orders", *at(server, namespace))
        assert (code, err) == (0, "")
        assert "partition 0: holds offsets 0 to 2 (next offset 3), 3 record(s) retained" in out
        assert f"epoch 1, mode exclusive, holder ctl (session {holder.session[:8]}" in out
        assert f"waiters (FIFO): 1: 1. {waiter.session[:8]}" in out
        assert f"pid {pid}: generation {generation}, last sequence 2" in out
    finally:
        holder.close()  # the waiter is granted
        thread.join(timeout=30)
        session = raw.hget(client.keys.partition("orders", 0).owner, "session")
        waiter.close()
    assert session == waiter.session.encode()  # it was queued, then granted


@pytest.mark.parametrize("command", ["status", "tail", "release"])
def test_unknown_topic_is_one_line_exit_2_and_creates_nothing(
    raw: redis.Redis, server: ServerInfo, namespace: str, capsys, command: str
) -> None:
    argv = ["release", "--producer", "nope", "--yes"] if command == "release" else [command, "nope"]
    code, out, err = run(capsys, *argv, *at(server, namespace))
    assert (code, out) == (2, "")
    assert one_error_line(err).startswith(
        f"fencing: topic 'nope' does not exist in namespace '{namespace}' ("
    )
    assert namespace_keys(raw, namespace) == []


def test_topic_being_created_is_not_opened(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    # What a creator that died between topic_open and topic_ready leaves behind.
    raw.hset(client.keys.topic_meta("half"), mapping={"inc": "i", "partitions": 1, "ready": 0})
    for argv in (["tail", "half"], ["release", "--producer", "half", "--yes"]):
        code, out, err = run(capsys, *argv, *at(server, namespace))
        assert (code, out) == (2, "")
        assert "topic 'half' is still being created" in one_error_line(err)
    assert namespace_keys(raw, namespace) == [client.keys.topic_meta("half").encode()]


def test_owners_lists_rows_with_state_by_server_time(
    client: Client, server: ServerInfo, namespace: str, capsys
) -> None:
    owner = client.ownership("journal", owner_id="host-a")
    owner.claim(["orders/1", "a b{c}"])
    owner.claim(["orders/0"])
    owner.release(["orders/1"])
    code, out, err = run(capsys, "owners", "journal", "--json", *at(server, namespace))
    assert (code, err) == (0, "")
    rows = json.loads(out)
    shown = [(r["resource"], r["state"], r["label"], r["generation"], r["token"]) for r in rows]
    assert shown == [
        ("a b{c}", "live", "host-a", 1, 1),
        ("orders/0", "live", "host-a", 1, 1),
        ("orders/1", "free", "", 1, 1),
    ]
    assert {r["session"] for r in rows if r["state"] == "live"} == {owner.session}
    assert all(0 < r["lease_left_ms"] <= 10_000 for r in rows if r["state"] == "live")
    code, out, err = run(capsys, "owners", "journal", *at(server, namespace))
    assert code == 0
    assert f"  orders/0: live, holder host-a (session {owner.session[:8]}" in out
    assert "  orders/1: free, generation 1, token 1" in out
    owner.close()


def test_tail_prints_exact_records_from_offsets(
    client: Client, server: ServerInfo, namespace: str, capsys
) -> None:
    topic = client.topic("t", partitions=2)
    with topic.producer() as producer:
        producer.send(b"a", partition=0)
        producer.send(b"b", key=b"k", headers={"h": b"1"}, partition=0)
        producer.send(b"\xff\x00", partition=0)
        producer.send(b"x", partition=1)
        pid, epoch = producer.producer_id, producer.epoch(0)
    code, out, err = run(capsys, "tail", "t", "--json", *at(server, namespace))
    assert (code, err) == (0, "")
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["partition"], r["offset"], r["key"], r["value"], r["headers"]) for r in records] == [
        (0, 0, None, "a", {}),
        (0, 1, "k", "b", {"h": "1"}),
        (0, 2, None, repr(b"\xff\x00"), {}),
        (1, 0, None, "x", {}),
    ]
    assert {(r["epoch"], r["producer_id"], r["topic"]) for r in records} == {(epoch, pid, "t")}

    code, out, _ = run(
        capsys, "tail", "t", "-p", "0", "--from", "1", "--max", "1", *at(server, namespace)
    )
    assert (code, out) == (
        0,
        f't/0@1\tepoch={epoch}\tproducer={pid}\tkey=k\tb\theaders={{"h": "1"}}\n',
    )
    code, out, _ = run(capsys, "tail", "t", "-p", "0", "--from", "latest", *at(server, namespace))
    assert (code, out) == (0, "")
    code, out, err = run(capsys, "tail", "t", "-p", "0", "--from", "9", *at(server, namespace))
    assert (code, out) == (2, "")
    assert "offset 9 is out of range for partition 0" in one_error_line(err)

    # --follow waits for records past the end; --max ends it.
    codes: list[int] = []
    argv = ["tail", "t", "-p", "1", "--from", "1", "--follow", "--max", "1", "--json"]
    argv += at(server, namespace)
    follower = threading.Thread(target=lambda: codes.append(main(argv)), daemon=True)
    follower.start()
    with topic.producer() as producer:
        producer.send(b"y", partition=1)
    follower.join(timeout=30)
    out, err = capsys.readouterr()
    assert (codes, err) == ([0], "")
    assert [
        (r["partition"], r["offset"], r["value"]) for r in map(json.loads, out.splitlines())
    ] == [(1, 1, "y")]


def test_release_rows_with_generation_0(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    owner = client.ownership("journal", owner_id="host-a")
    owner.claim(["orders/0", "orders/1"])
    code, out, err = run(capsys, "release", "journal", "orders/0", "--yes", *at(server, namespace))
    assert (code, err) == (0, "")
    assert "with generation 0" in out
    assert (
        f"  orders/0: token 1 -> 2, generation 1 -> 0; severed live holder 'host-a' "
        f"(session {owner.session[:8]})"
    ) in out
    with pytest.raises(Fenced):
        owner.check("orders/0")
    row = raw.hgetall(client.keys.ownership("journal", "orders/0"))
    assert (row[b"token"], row[b"gen"], row[b"session"]) == (b"2", b"0", b"")

    code, out, err = run(
        capsys, "release", "journal", "orders/1", "--yes", "--json", *at(server, namespace)
    )
    assert (code, err) == (0, "")
    [result] = json.loads(out)
    assert result["semantics"] == "generation 0" and result["released"] is True
    assert (result["token"], result["generation"]) == ({"old": 1, "new": 2}, {"old": 1, "new": 0})
    assert result["severed"]["session"] == owner.session
    with pytest.raises(Fenced):
        owner.check("orders/1")

    # A row that does not exist is not created by a typo.
    code, out, err = run(capsys, "release", "journal", "typo", "--yes", *at(server, namespace))
    assert (code, out) == (2, "")
    assert "no ownership row for 'typo'" in one_error_line(err)
    assert raw.exists(client.keys.ownership("journal", "typo")) == 0
    owner.close()


def test_release_producer_fences_with_epoch_plus_one(
    client: Client, raw: redis.Redis, server: ServerInfo, namespace: str, capsys
) -> None:
    topic = client.topic("t", partitions=2)
    producer = topic.producer(AccessMode.EXCLUSIVE)
    producer.send(b"v", partition=0)
    code, out, err = run(
        capsys, "release", "--producer", "t", "--yes", "--json", *at(server, namespace)
    )
    assert (code, err) == (0, "")
    results = json.loads(out)
    assert [(r["partition"], r["epoch"]) for r in results] == [
        (0, {"old": 1, "new": 2}),
        (1, {"old": 1, "new": 2}),
    ]
    assert [r["severed"] for r in results] == [
        {"label": producer.name or f"producer-{producer.producer_id}", "session": producer.session}
    ] * 2
    assert [r["next_holder"] for r in results] == [None, None]
    assert {r["semantics"] for r in results} == {"hand to the queue"}
    with pytest.raises(ProducerFenced):
        producer.send(b"w", partition=0)
    for p in (0, 1):
        row = raw.hgetall(client.keys.partition("t", p).owner)
        assert (row[b"token"], row[b"session"]) == (b"2", b"")
    assert topic.offsets(0) == (0, 1)
    producer.close()


def test_release_needs_yes_and_arguments(capsys) -> None:
    down = ["--url", "redis://127.0.0.1:1/0"]  # refused before any I/O
    for argv, says in [
        (["release", "journal", "orders/0", *down], "add --yes to do it"),
        (["release", "--producer", "t", *down], "add --yes to do it"),
        (["release", "journal", "--yes", *down], "needs GROUP and at least one RESOURCE"),
        (["release", "--producer", "t", "journal", "--yes", *down], "takes no GROUP"),
    ]:
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, "")
        assert says in one_error_line(err)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://127.0.0.1:1/0", "cannot reach Redis at redis://127.0.0.1:1/0"),
        ("redis://:secret@127.0.0.1:1/0", "cannot reach Redis at redis://:***@127.0.0.1:1/0"),
        ("nosuch://x", "bad Redis URL 'nosuch://x'"),
        ("redis://127.0.0.1:notaport/0", "bad Redis URL"),
    ],
)
def test_bad_url_and_server_down_are_one_line(capsys, url: str, says: str) -> None:
    for argv in (["status", "t"], ["owners", "g", "--json"], ["tail", "t", "--follow"]):
        code, out, err = run(capsys, *argv, "--url", url)
        assert (code, out) == (2, "")
        assert says in one_error_line(err)
        assert "secret" not in err


def _children() -> set[int]:
    """Live child processes of this one (field 4 of /proc/<pid>/stat is the parent)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if stat.read_text().rsplit(")", 1)[1].split()[1] == str(os.getpid()):
                found.add(int(stat.parent.name))
    return found


def test_embedded_server_is_private_and_stopped(capsys, monkeypatch) -> None:
    # Anything but the embedded server would be this dead URL, never a shared server.
    monkeypatch.setenv("FENCING_REDIS_URL", "redis://127.0.0.1:1/0")
    before = _children()
    code, out, err = run(capsys, "status", "nope", "--embedded", "--namespace", "cli")
    assert (code, out) == (2, "")
    line = one_error_line(err)
    assert line.startswith("fencing: topic 'nope' does not exist in namespace 'cli' (server ")
    url = line.split("(server ", 1)[1].split(";", 1)[0]
    assert url.startswith("redis://127.0.0.1:") and url != "redis://127.0.0.1:1/0"
    assert _children() <= before  # the server process was stopped and reaped


def test_help_has_examples_and_version(capsys) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for command in ("status orders", "owners journal", "tail orders", "release journal", "demo"):
        assert f"  fencing {command}" in out
    for command in ("status", "owners", "tail", "release"):
        code, out, _ = run(capsys, command, "--help")
        assert code == 0 and "examples:" in out and "--embedded" in out
    assert "generation=0" in run(capsys, "release", "--help")[1]
    code, out, _ = run(capsys, "--version")
    assert (code, out) == (0, f"redis-fencing {fencing.__version__}\n")


def test_demo_subcommand_is_wired(capsys) -> None:
    try:
        demo = importlib.import_module("fencing.demo")
    except ImportError:
        demo = None
    if not (hasattr(demo, "add_arguments") and hasattr(demo, "run")):
        pytest.skip("fencing.demo is not there yet")
    code, out, _ = run(capsys, "demo", "--help")
    assert code == 0 and "fencing demo" in out


def _console_script() -> str:
    beside = Path(sys.executable).parent / "fencing"
    found = str(beside) if beside.exists() else shutil.which("fencing")
    if found is None:
        pytest.skip("the fencing console script is not installed")
    return found


def test_console_script_tails_until_ctrl_c(
    client: Client, server: ServerInfo, namespace: str
) -> None:
    with client.topic("t", partitions=1).producer() as producer:
        producer.send(b"first", partition=0)
    process = subprocess.Popen(
        [_console_script(), "tail", "t", "--follow", *at(server, namespace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # Every thread's stack goes to stderr on SIGABRT: what a hang is stuck on.
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + 30
            while not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                assert time.monotonic() < deadline, "no output from fencing tail"
        line = process.stdout.readline().decode()
        assert line.startswith("t/0@0\t") and line.rstrip("\n").endswith("\tfirst")
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            _, stacks = process.communicate(timeout=10)
            raise AssertionError(
                "fencing tail --follow did not end within 30 s of Ctrl-C; its threads:\n"
                + stacks.decode(errors="replace")
            ) from None
        assert process.stderr is not None
        err = process.stderr.read().decode()
        assert (code, err) == (0, "")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("module", ["fencing", "fencing.cli"])
def test_python_dash_m_runs_the_command(module: str) -> None:
    """``python -m fencing`` and ``python -m fencing.cli`` are the ``fencing`` command (for a
    machine where the console script is not on PATH)."""
    run_ = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, check=False
    )
    assert run_.returncode == 0, run_.stderr
    assert "delete-topic" in run_.stdout and "status" in run_.stdout

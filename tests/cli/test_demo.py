"""``fencing demo`` end to end: real worker processes, real faults, the verifier's verdict.

The full scenario runs once (``--quick``, against the suite's Redis, or the external
server), with ``--json`` and ``--plot``; the rest is cheap: bad input gives one line and
exit 2, an interrupted run on the embedded default server leaves no process and no port
behind, and a log that breaks a guarantee makes the run fail.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

import fencing
from fencing import cli, demo
from fencing.demo import plot
from fencing.demo.board import AttemptRecord, Board
from fencing.demo.config import QUICK, TOPIC_A
from fencing.demo.scenario import Scenario
from fencing.demo.view import summary

from ..conftest import ServerInfo
from ..support.paths import ROOT


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    return parser.parse_args(list(argv))


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (workers carry the namespace)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        zombie = "\nState:\tZ" in status
        if text.encode() in cmdline and not zombie:
            found.append(int(entry.name))
    return found


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("fencing demo: ")
    return lines[0]


@pytest.mark.slow
def test_quick_run_holds_every_guarantee(
    server: ServerInfo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if server.kind == "valkey":
        pytest.skip("the whole scenario runs once, against the suite's Redis")
    png = tmp_path / "timeline.png"
    code = demo.run(
        args("--url", server.url, "--quick", "--json", "--plot", str(png), "--seed", "7")
    )
    out, err = capsys.readouterr()
    report = json.loads(out)  # stdout holds the JSON report alone; progress went to stderr
    assert code == 0, f"{err}\n{json.dumps(report['checks'], indent=1)}"
    assert report["ok"] is True
    assert report["seed"] == 7

    a, b = report["topic_a"], report["topic_b"]
    assert len(a["epochs"]) >= 3
    assert a["epochs"] == sorted(a["epochs"])
    assert a["fenced_attempts"] >= 1 and a["fenced_landed"] == 0
    assert (a["duplicates"], a["interleavings"], a["lost"]) == (0, 0, 0)
    assert a["checks"] == {"G1": "ok", "G2": "ok", "G5": "ok", "G6": "ok"}
    # Each partition: one segment per epoch, back to back from offset 0.
    for p in range(a["partitions"]):
        segs = [s for s in a["segments"] if s["partition"] == p]
        assert segs[0]["first_offset"] == 0
        for before, after in itertools.pairwise(segs):
            assert after["first_offset"] == before["last_offset"] + 1
            assert after["epoch"] > before["epoch"]
    assert sum(s["records"] for s in a["segments"]) == a["records"]

    assert b["proxy"] is True
    assert b["dropped_replies"] >= 1 and b["retried"] >= 1
    assert (b["duplicates"], b["lost"]) == (0, 0)
    assert b["sent"] - b["unknown"] <= b["records"] <= b["sent"]

    # The faults happened to the workers the events named.
    faults = [(f["fault"], f["worker"]) for f in report["faults"]]
    assert [kind for kind, _ in faults] == ["kill", "pause", "resume"]
    killed, paused = faults[0][1], faults[1][1]
    workers = report["workers"]
    assert workers[killed]["status"] == "killed"
    assert workers[killed]["exit_code"] == -signal.SIGKILL
    assert workers[paused]["status"] == "fenced"
    assert workers[paused]["fenced"] == a["fenced_attempts"]
    assert {w["exit_code"] for name, w in workers.items() if name != killed} == {0}

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Nothing left behind: no worker process, no key of the demo's namespace.
    assert processes_mentioning(report["namespace"]) == []
    for w in workers.values():
        with pytest.raises(ProcessLookupError):
            os.kill(w["pid"], 0)
    raw = redis.Redis.from_url(server.url)
    try:
        assert list(raw.scan_iter(match=f"{report['namespace']}:*", count=1000)) == []
    finally:
        raw.close()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("nonsense", "bad Redis URL 'nonsense'"),
        ("redis://127.0.0.1:1/0", "cannot reach Redis at redis://127.0.0.1:1/0"),
        ("redis://me:s3cret@127.0.0.1:1/0", "cannot reach Redis at redis://me:***@127.0.0.1:1"),
    ],
    ids=["bad-url", "server-down", "password-hidden"],
)
def test_bad_input_is_one_line_and_exit_2(
    url: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo.run(args("--url", url, "--quick")) == 2
    out, err = capsys.readouterr()
    assert out == ""
    line = one_line(err)
    assert expected in line
    assert "s3cret" not in line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--namespace", "mine"], "a namespace of its own"),
        (["--embedded", "--url", "redis://127.0.0.1:1/0"], "--url and --embedded contradict"),
        (["--seed", "-1"], "--seed must be a number >= 0"),
    ],
    ids=["namespace", "url-and-embedded", "negative-seed"],
)
def test_cli_options_the_demo_refuses(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through ``fencing demo`` (the CLI's common options reach the demo too)."""
    assert cli.main(["demo", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert expected in one_line(err)


def test_plot_needs_matplotlib_and_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no-such-folder" / "t.png"
    assert demo.run(args("--plot", str(missing))) == 2
    assert "does not exist" in one_line(capsys.readouterr().err)

    real = plot.importlib.util.find_spec
    monkeypatch.setattr(
        plot.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    assert demo.run(args("--plot", str(tmp_path / "t.png"))) == 2
    assert "pip install 'redis-fencing[demo]'" in one_line(capsys.readouterr().err)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_embedded_default_server_is_stopped_even_when_interrupted() -> None:
    """No URL anywhere: a private server is started, and Ctrl-C mid-run stops it and every
    worker (``python -m fencing.demo`` runs ``demo.run``)."""
    env = {k: v for k, v in os.environ.items() if k != "FENCING_REDIS_URL"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fencing.demo", "--quick", "--no-live"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    port = namespace = None
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        for line in proc.stdout:  # ends at EOF if the demo dies early
            if "started for this run" in line:
                port = int(line.split("127.0.0.1:")[1].split(",")[0])
            elif line.split("] ", 1)[-1].startswith("namespace demo-"):
                namespace = line.split("namespace ")[1].split(":")[0]
            elif " HOLDS epoch" in line:
                break  # workers run and one holds: interrupt now
            assert time.monotonic() < deadline, "the demo did not get going"
        assert port is not None and namespace is not None, proc.stderr and proc.stderr.read()
        assert _port_open(port)
        assert len(processes_mentioning(namespace)) == 3
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert "interrupted" in one_line(err)
    assert not _port_open(port)
    assert processes_mentioning(namespace) == []
    assert processes_mentioning(f"127.0.0.1:{port}") == []


def test_a_broken_guarantee_fails_the_run(
    server: ServerInfo, raw: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checks can fail: a fenced send that is in the log and an acknowledged record
    that is not make the result not ok, and the summary names both."""
    board = Board(["w1"])
    scenario = Scenario(server.url, QUICK, board, seed=0, keep=False)
    scenario.prepare()
    client = fencing.Client.from_url(server.url, namespace=scenario.namespace)
    try:
        topic = client.topic(TOPIC_A)
        with topic.producer(fencing.AccessMode.EXCLUSIVE) as p:
            md = p.send(b"w1-000000", partition=0)
        board.attempts += [
            AttemptRecord("A", "w1-000000", 0, "fenced", epoch=md.epoch),
            AttemptRecord("A", "w1-000001", 1, "acked", offset=0, epoch=md.epoch),
        ]
        result = scenario.verify()  # no faults, no workers: only the verification
    finally:
        client.close()
        scenario.close(delete_keys=True)
    assert not result.ok
    a = result.reports["A"]
    assert {(v.guarantee, v.partition, v.offset) for v in a.violations} == {
        ("G2", 0, 0),
        ("G5", 1, 0),
    }
    assert a.lost == 1 and a.fenced_landed == 1
    text = summary(result)
    assert "CHECKS FAILED" in text
    assert "G2 FAILED" in text and "G5 FAILED" in text
    assert list(raw.scan_iter(match=f"{scenario.namespace}:*")) == []

"""The Spark sink with executors whose Python cannot import the library (PYSPARK_PYTHON names
an interpreter without it): the batch fails with one line that says what to do, before
anything reaches Redis.

The executors run a venv made here without pip: Spark puts its own pyspark and py4j on the
workers' path, and nothing else. The query runs in a process of its own (a SparkContext
keeps the interpreter it was started with), from a working directory outside the
repository, without PYTHONPATH reaching the JVM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")


import fencing
from fencing.spark.probe import executor_error

from ..conftest import ServerInfo
from ..support.logs import topic_values
from ..support.paths import ROOT

ERROR_LINE = "fencing.errors.ConfigurationError: "
JAVA_FRAME = "\tat "


def bare_python(folder: Path) -> str:
    """A venv's interpreter: the standard library and nothing installed."""
    venv.create(folder, with_pip=False)
    python = str(folder / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run(
        [python, "-c", "import fencing"], cwd=folder, env=env, capture_output=True, check=False
    )
    assert found.returncode != 0 and b"No module named 'fencing'" in found.stderr
    return python


def the_line(text: str) -> str:
    """The message of the ConfigurationError in a Spark error's text: one whole line."""
    start = text.index(ERROR_LINE) + len(ERROR_LINE)
    return text[start:].split("\n", 1)[0]


def assert_before_any_java_frame(text: str, line: str) -> None:
    at = text.index(line)
    frame = text.find(JAVA_FRAME)
    assert frame == -1 or at < frame, text[: at + len(line)]


def test_executors_without_the_library_fail_the_batch_with_one_line_writing_nothing(
    server: ServerInfo, namespace: str, tmp_path: Path
) -> None:
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for a Spark of its own (a minute): redis")
    python = bare_python(tmp_path / "venv")
    source = tmp_path / "in"
    source.mkdir()
    with open(source / "part-0.json", "w") as out:
        out.writelines(json.dumps({"id": i, "v": f"v{i}"}) + "\n" for i in range(100))
    stderr = tmp_path / "stderr.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "SPARK_HOME")}
    env["PYTHONPATH"] = str(ROOT)  # for this process alone: make_session drops it for the JVM
    args = [server.url, namespace, str(source), str(tmp_path / "ck"), python]
    with open(stderr, "wb") as err:
        done = subprocess.run(
            [sys.executable, "-m", "tests.spark.bare_executors", *args],
            cwd=tmp_path,  # not the repository: workers start here, with it on their path
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, stderr.read_text()[-3000:]
    report = json.loads(done.stdout.decode().strip().splitlines()[-1])
    version = ".".join(map(str, sys.version_info[:3]))
    expected = executor_error(
        f"their Python {python} ({version}) reports ModuleNotFoundError: No module named 'fencing'"
    )
    assert "\n" not in expected
    assert expected.startswith("Spark executors cannot run redis-fencing: their Python ")
    assert "Set PYSPARK_PYTHON" in expected and "--py-files" in expected
    assert expected.endswith("; nothing was written")

    # What the user sees: awaitTermination() raises Spark's StreamingQueryException, and
    # exception() returns it; its text holds the line whole, before any Java frame.
    assert report["raised"]["type"].endswith("StreamingQueryException")
    for seen in (report["raised"]["text"], report["exception"]["text"]):
        assert the_line(seen) == expected
        assert_before_any_java_frame(seen, expected)
    # On the console, the sink's log line comes before Spark's report of the failed query
    # (a Java stack trace).
    console = stderr.read_text()
    assert f"redis-fencing spark sink: {expected}\n" in console
    assert_before_any_java_frame(console, expected)
    # The check ran before anything touched Redis: no topic, no sink state.
    assert report["keys_after_query"] == []

    # Write tasks that meet such an executor themselves (the check ran elsewhere) fail the
    # batch with the same advice, in one line.
    unchecked = report["unchecked"]
    assert unchecked["type"] == "fencing.errors.ConfigurationError"
    assert unchecked["text"] == executor_error(
        "their Python worker failed: ModuleNotFoundError: No module named 'fencing'",
        outcome="tasks on other executors may have written their rows, and the batch's "
        "replay writes the rest once",
    )
    client = fencing.Client.from_url(server.url, namespace=namespace)
    assert topic_values(client, "later") == []
    client.close()

"""``fencing demo --metrics`` prints the summary of the library's own instruments (in a
process of its own: the demo sets the process's MeterProvider)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ..conftest import ServerInfo
from ..support.paths import ROOT


def test_the_demo_prints_its_metrics_summary(server: ServerInfo) -> None:
    if server.kind == "valkey":
        pytest.skip("one server kind is enough for a demo run: redis")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "fencing", "demo", "--quick", "--no-live", "--metrics",
         "--url", server.url, "--seed", "7"],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    summary = done.stdout[done.stdout.index("metrics (this process") :].splitlines()
    written = [line for line in summary if line.startswith("fencing.producer.records")]
    assert any("outcome=written" in line and "topic=B" in line for line in written), summary
    assert any(line.startswith("fencing.producer.send.duration") for line in summary)

"""The instruments follow a provider set after the library was imported and used; with no
SDK at all, no span is started. Each in a process of its own (a process sets its global
providers once)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from ..conftest import ServerInfo
from ..support.paths import ROOT

LATE_PROVIDER = """
import uuid
import fencing
from fencing import _telemetry as telemetry
from opentelemetry import metrics, trace

client = fencing.Client.from_url({url!r}, namespace="otel-" + uuid.uuid4().hex[:8])
topic = client.topic("late", partitions=1)
with topic.producer() as p:
    p.send(b"before any provider")
    assert not telemetry.tracing()
    assert telemetry.span("fencing.send", {{}}).__enter__() is trace.INVALID_SPAN

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
with topic.producer() as p:
    p.send_batch([b"a", b"b"], partition=0)
client.delete_topic("late", force=True)
client.close()
found = {{
    (m.name, tuple(sorted(dp.attributes.items()))): dp.value
    for rm in reader.get_metrics_data().resource_metrics
    for sm in rm.scope_metrics
    for m in sm.metrics
    if m.name == "fencing.producer.records"
    for dp in m.data.data_points
}}
assert found == {{
    ("fencing.producer.records",
     (("fencing.outcome", "written"), ("fencing.partition", 0), ("fencing.topic", "late"))): 2
}}, found
print("ok")
"""


def test_instruments_follow_a_provider_set_after_first_use(server: ServerInfo) -> None:
    code = textwrap.dedent(LATE_PROVIDER.format(url=server.url))
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"

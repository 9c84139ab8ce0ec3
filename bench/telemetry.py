"""What the library's OpenTelemetry instruments cost a send: without an SDK (the API's no-op
proxies), then with the SDK recording (metrics read in memory, spans through a
``BatchSpanProcessor`` to an exporter that drops them), each next to raw XADD measured in
the same phase of the same process.

    .venv/bin/python -m bench.telemetry            # about a minute
    .venv/bin/python -m bench.telemetry --quick

The SDK can be installed once per process, so the no-SDK phase runs first. Client CPU per
send is ``time.process_time`` over the sends alone: the server runs in another process.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable, Sequence

import redis

import fencing
from fencing import AccessMode, Record

from .common import median, paired_latencies, paired_rates, server, table

VALUE = b"x" * 100


class _Dropped:
    """A span exporter that keeps nothing (the SDK's own work is what is measured)."""

    def export(self, spans: Sequence[object]) -> object:
        from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def install_sdk() -> None:
    """The SDK's providers, as an application would set them at start-up."""
    from opentelemetry import metrics, trace  # noqa: PLC0415 - after the no-SDK phase
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_Dropped()))  # type: ignore[arg-type]
    trace.set_tracer_provider(tracer_provider)


def cpu_per_call(fn: Callable[[], object], count: int) -> float:
    """Client CPU seconds per call of ``fn``."""
    t0 = time.process_time()
    for _ in range(count):
        fn()
    return (time.process_time() - t0) / count


def phase(url: str, count: int, seconds: float) -> dict[str, float]:
    """Single-send latency and CPU, and send_batch(100) records/s, each against raw XADD."""
    r = redis.Redis.from_url(url)
    key = "bench:otel:" + uuid.uuid4().hex
    client = fencing.Client.from_url(url, namespace="b" + uuid.uuid4().hex[:8])
    producer = client.topic("t", partitions=1).producer(AccessMode.EXCLUSIVE)
    records = [Record(VALUE) for _ in range(100)]

    def send() -> None:
        producer.send(VALUE, partition=0)

    def xadd() -> None:
        r.xadd(key, {"v": VALUE})

    def batch() -> int:
        producer.send_batch(records, partition=0)
        return 100

    def raw_batch() -> int:
        pipe = r.pipeline(transaction=False)
        for _ in range(100):
            pipe.xadd(key, {"v": VALUE})
        pipe.execute()
        return 100

    mine, base = paired_latencies(send, xadd, count)
    out = {
        "send": median(mine),
        "xadd": median(base),
        "send cpu": cpu_per_call(send, count // 2),
        "xadd cpu": cpu_per_call(xadd, count // 2),
    }
    out["batch"], out["raw batch"] = paired_rates(batch, raw_batch, seconds)
    producer.close()
    client.close()
    r.delete(key)
    r.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args()
    count, seconds = (2_000, 1.0) if args.quick else (10_000, 4.0)
    with server() as embedded:
        without = phase(embedded.url, count, seconds)
        install_sdk()
        recording = phase(embedded.url, count, seconds)
    rows: list[tuple[str, str, str, str, str]] = []
    for name, label in (("send", "single send, median µs"), ("send cpu", "client CPU / send, µs")):
        a, b = without[name] * 1e6, recording[name] * 1e6
        rows.append((label, f"{a:.1f}", f"{b:.1f}", f"{b - a:+.1f}", ""))
    rows.append(
        (
            "single send / raw XADD",
            f"{without['send'] / without['xadd']:.2f}x",
            f"{recording['send'] / recording['xadd']:.2f}x",
            "",
            "latency ratio",
        )
    )
    rows.append(
        (
            "send_batch(100) / pipelined XADD",
            f"{without['batch'] / without['raw batch']:.2f}x",
            f"{recording['batch'] / recording['raw batch']:.2f}x",
            "",
            "records/s ratio",
        )
    )
    print(table(rows, head=("benchmark", "no SDK", "SDK recording", "difference", "what")))


if __name__ == "__main__":
    main()

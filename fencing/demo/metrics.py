"""``fencing demo --metrics``: the library's own instruments, read in memory by the
OpenTelemetry SDK (the ``demo`` extra) and printed as a short summary at the end.

The demo's worker processes have providers of their own (none): the summary shows what
this process did — the idempotent sender that loses replies, and the demo's reads.

>>> reader = install()                     # before the run: sets the global MeterProvider
>>> print(summarize(reader))                                          # doctest: +SKIP
fencing.producer.records  topic=B partition=0 outcome=written  120
"""

from __future__ import annotations

from typing import Any


class MetricsUnavailable(Exception):
    """The SDK is not installed (the ``demo`` extra)."""


def install() -> Any:
    """Set the process's MeterProvider to one read in memory; returns the reader."""
    try:
        from opentelemetry import metrics  # noqa: PLC0415 - only with --metrics
        from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: PLC0415
    except ImportError as exc:
        raise MetricsUnavailable(
            f"--metrics needs the OpenTelemetry SDK ({exc.name}): pip install "
            "'redis-fencing[demo]' (or opentelemetry-sdk)"
        ) from None
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(provider)
    if metrics.get_meter_provider() is not provider:
        raise MetricsUnavailable(
            "--metrics: this process already has a MeterProvider of its own; run the demo "
            "in a process of its own"
        )
    return reader


def _attributes(attributes: Any) -> str:
    return " ".join(
        f"{name.removeprefix('fencing.')}={value}" for name, value in sorted(attributes.items())
    )


def summarize(reader: Any) -> str:
    """The ``fencing.*`` metrics recorded so far, one line per set of attributes: a
    counter's total, a gauge's value, a histogram's count and mean."""
    data = reader.get_metrics_data()
    lines: list[tuple[str, str, str]] = []
    for resource in [] if data is None else data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if not metric.name.startswith("fencing."):
                    continue
                for point in metric.data.data_points:
                    if hasattr(point, "count"):
                        mean = point.sum / point.count if point.count else 0.0
                        value = f"{point.count} (mean {mean:.4g} {metric.unit})"
                    else:
                        value = f"{point.value:g}"
                    lines.append((metric.name, _attributes(point.attributes or {}), value))
    if not lines:
        return "metrics: nothing recorded in this process"
    lines.sort()
    width = max(len(name) + len(attrs) for name, attrs, _ in lines) + 4
    body = [f"{name}  {attrs}".ljust(width) + value for name, attrs, value in lines]
    return "\n".join(["metrics (this process; the worker processes are not included):", *body])

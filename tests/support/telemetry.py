"""An OpenTelemetry SDK for the tests: in-memory metrics (delta temporality, so each
:meth:`Recorded.collect` holds what happened since the last one) and in-memory spans.

The API lets a process set its global providers once: :func:`install` sets them the first
time and hands the same readers to every later caller; a test starts with
:meth:`Recorded.reset` and reads only what it did.

>>> recorded = install()                                              # doctest: +SKIP
>>> recorded.reset()
>>> points = recorded.collect()
>>> points.sum("fencing.producer.records", {"fencing.outcome": "written"})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["Points", "Recorded", "install"]


@dataclass
class Point:
    """One metric's value for one set of attributes."""

    name: str
    attributes: dict[str, Any]
    value: float  # a counter's sum, a gauge's value, a histogram's count
    total: float = 0.0  # a histogram's sum


@dataclass
class Points:
    """The points of one collection."""

    points: list[Point] = field(default_factory=list)

    def matching(self, name: str, attributes: Mapping[str, Any] | None = None) -> list[Point]:
        """The points of ``name`` whose attributes include ``attributes``."""
        wanted = dict(attributes or {})
        return [
            p
            for p in self.points
            if p.name == name and all(p.attributes.get(k) == v for k, v in wanted.items())
        ]

    def sum(self, name: str, attributes: Mapping[str, Any] | None = None) -> float:
        """The sum of a counter (or a histogram's count) over the points matching."""
        return sum(p.value for p in self.matching(name, attributes))

    def by(self, name: str, key: str) -> dict[Any, float]:
        """A counter's sums by the value of attribute ``key``."""
        out: dict[Any, float] = {}
        for p in self.matching(name):
            out[p.attributes.get(key)] = out.get(p.attributes.get(key), 0) + p.value
        return out


class Recorded:
    """The in-memory readers of the process's providers."""

    def __init__(self, reader: InMemoryMetricReader, spans: InMemorySpanExporter) -> None:
        self.reader = reader
        self.exporter = spans

    def reset(self) -> None:
        """Forget what was recorded so far."""
        self.reader.get_metrics_data()
        self.exporter.clear()

    def collect(self) -> Points:
        """What was recorded since the last collection or reset."""
        data = self.reader.get_metrics_data()
        points = Points()
        if data is None:
            return points
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for dp in metric.data.data_points:
                        attrs = dict(dp.attributes or {})
                        if hasattr(dp, "count"):
                            point = Point(metric.name, attrs, dp.count, dp.sum)
                        else:
                            point = Point(metric.name, attrs, dp.value)
                        points.points.append(point)
        return points

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """The spans ended since the last reset (of ``name`` only, if given)."""
        ended = list(self.exporter.get_finished_spans())
        return [s for s in ended if name is None or s.name == name]


_installed: Recorded | None = None


def install() -> Recorded:
    """Set the process's MeterProvider and TracerProvider (once) to in-memory readers."""
    global _installed  # noqa: PLW0603 - the global providers are set once per process
    if _installed is None:
        reader = InMemoryMetricReader(
            preferred_temporality={
                Counter: AggregationTemporality.DELTA,
                Histogram: AggregationTemporality.DELTA,
            }
        )
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        meter_provider = MeterProvider(metric_readers=[reader])
        metrics.set_meter_provider(meter_provider)
        trace.set_tracer_provider(tracer_provider)
        if metrics.get_meter_provider() is not meter_provider:
            raise RuntimeError(
                "another MeterProvider was set in this process before the tests' own: run "
                "code that sets the global providers in a subprocess"
            )
        _installed = Recorded(reader, exporter)
    return _installed

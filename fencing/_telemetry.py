"""OpenTelemetry metrics and spans, through ``opentelemetry-api`` only.

The library never installs an SDK: until the application sets a MeterProvider and a
TracerProvider, every instrument is the API's proxy (one attribute test per call) and no
span is started at all. Instruments are made once, on first use, from the API's proxy
meter, so a provider set after ``import fencing`` (or after the first send) is followed.

Every name starts with ``fencing.``; attributes are names the application chose (topic,
group, election, partition number, the kind of lease, an outcome), never a record's
contents or a key's value.

Instruments (name, kind, unit: attributes; the how-to "Observability" tells each):

- ``fencing.producer.records`` counter {record}: topic, partition, outcome (written |
  duplicate | fenced | unknown | refused)
- ``fencing.producer.send.duration`` histogram s: topic, partition, outcome
- ``fencing.producer.batches`` counter {batch}, ``fencing.producer.batch.sends`` histogram
  {send}: topic, partition (append calls, and the sends each carried: group commit)
- ``fencing.producer.unknown.resolved`` counter {batch}: topic, partition, outcome (landed |
  not_landed)
- ``fencing.producer.id.refreshes`` counter {refresh}: topic, partition
- ``fencing.lease.renewals`` counter {renewal}: kind, outcome (ok | fenced | refused |
  unavailable); ``fencing.lease.renewal.duration`` histogram s: kind
- ``fencing.lease.lost`` counter {lease}: kind (producer | owner | election | consumer)
- ``fencing.lease.handover.duration`` histogram s: kind (a waiter's wait until granted)
- ``fencing.claims`` counter {claim}: kind, outcome (granted | kept | conflict | refused |
  unavailable)
- ``fencing.election.terms`` counter {term}: election, outcome (won | lost | resigned)
- ``fencing.election.renew.slack`` histogram s: election
- ``fencing.consumer.lag`` gauge {record}: topic, partition, group
- ``fencing.consumer.polls`` counter {poll}: topic, group; ``fencing.consumer.records``
  counter {record}: topic, partition, group
- ``fencing.spark.rows`` counter {row}: topic, outcome (written | skipped)

Spans: ``fencing.send``, ``fencing.claim``, ``fencing.campaign``, ``fencing.poll``,
``fencing.commit``, ``fencing.spark.batch``, each with ``fencing.script`` (the Lua script
it runs) and ``fencing.outcome``.

>>> from fencing import _telemetry as telemetry
>>> telemetry.instruments().lease_lost.add(1, {"fencing.kind": "owner"})
>>> with telemetry.span("fencing.claim", {"fencing.script": "claim"}) as span:
...     span.set_attribute("fencing.outcome", "granted")
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as _metrics_api
from opentelemetry.trace import Status, StatusCode

from .errors import Fenced, FencingError, OutcomeUnknown

_log = logging.getLogger("fencing.telemetry")

#: The instrumentation scope's name.
SCOPE = "fencing"

TOPIC = "fencing.topic"
PARTITION = "fencing.partition"
OUTCOME = "fencing.outcome"
KIND = "fencing.kind"
CAUSE = "fencing.cause"
GROUP = "fencing.group"
ELECTION = "fencing.election"
SCRIPT = "fencing.script"

#: Boundaries for durations of calls to Redis (s): 100 µs to 10 s.
DURATION_BOUNDS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
)  # fmt: skip
#: Boundaries for sends grouped in one call.
GROUP_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - once

    try:
        return version("redis-fencing")
    except PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
        return "0"


class Instruments:
    """The library's instruments, made once from the API's (proxy) meter."""

    def __init__(self, meter: metrics.Meter) -> None:
        counter, histogram = meter.create_counter, meter.create_histogram
        self.records = counter(
            "fencing.producer.records", "{record}", "Records a producer sent, by outcome"
        )
        self.send_duration = histogram(
            "fencing.producer.send.duration",
            "s",
            "Time a send() or send_batch() took, queueing and resolving included",
            explicit_bucket_boundaries_advisory=DURATION_BOUNDS,
        )
        self.batches = counter(
            "fencing.producer.batches", "{batch}", "Append calls a producer made"
        )
        self.batch_sends = histogram(
            "fencing.producer.batch.sends",
            "{send}",
            "Sends carried by one append call (group commit)",
            explicit_bucket_boundaries_advisory=GROUP_BOUNDS,
        )
        self.resolved = counter(
            "fencing.producer.unknown.resolved",
            "{batch}",
            "Batches of unknown outcome settled by the resolve script: landed or not_landed",
        )
        self.id_refreshes = counter(
            "fencing.producer.id.refreshes",
            "{refresh}",
            "Fresh producer ids taken after the producer's state expired while it was idle",
        )
        self.renewals = counter("fencing.lease.renewals", "{renewal}", "Lease renewals, by outcome")
        self.renewal_duration = histogram(
            "fencing.lease.renewal.duration",
            "s",
            "Time a lease renewal took",
            explicit_bucket_boundaries_advisory=DURATION_BOUNDS,
        )
        self.lease_lost = counter(
            "fencing.lease.lost", "{lease}", "Leases lost for good (superseded or state lost)"
        )
        self.lapsed = counter(
            "fencing.lease.lapsed",
            "{lease}",
            "Leases a renewal found ended by server time (the server's clock jumped, or the "
            "holder was late)",
        )
        self.handover = histogram(
            "fencing.lease.handover.duration",
            "s",
            "Time a waiting claimant waited, from its first refusal until it was granted",
            explicit_bucket_boundaries_advisory=DURATION_BOUNDS,
        )
        self.claims = counter("fencing.claims", "{claim}", "Ownership claims, by outcome")
        self.terms = counter(
            "fencing.election.terms", "{term}", "Election terms won, lost and resigned"
        )
        self.renew_slack = histogram(
            "fencing.election.renew.slack",
            "s",
            "Time left before the renew deadline when a leader's renewal returned",
            explicit_bucket_boundaries_advisory=DURATION_BOUNDS,
        )
        self.lag = meter.create_gauge(
            "fencing.consumer.lag",
            "{record}",
            "Records after a consumer's position, as its last poll's reply told",
        )
        self.polls = counter("fencing.consumer.polls", "{poll}", "Polls a consumer made")
        self.polled = counter(
            "fencing.consumer.records", "{record}", "Records a consumer's polls returned"
        )
        self.spark_rows = counter(
            "fencing.spark.rows",
            "{row}",
            "Rows of Spark micro-batches: written now, or skipped as written before",
        )


_lock = threading.Lock()
_instruments: Instruments | None = None
_tracer: trace.Tracer | None = None
_NO_SPAN = contextlib.nullcontext(trace.INVALID_SPAN)


def instruments() -> Instruments:
    """The instruments (made on first use; later calls return the same ones)."""
    made = _instruments
    if made is None:
        made = _make()
    return made


def _make() -> Instruments:
    global _instruments, _tracer  # noqa: PLW0603 - made once per process, on first use
    with _lock:
        if _instruments is None:
            version = _version()
            _tracer = trace.get_tracer(SCOPE, version)
            _instruments = Instruments(metrics.get_meter(SCOPE, version))
        return _instruments


#: Whether a TracerProvider was found set (it cannot be unset: the answer is kept).
_tracing_on = False
#: The API configures a provider from this variable on first use: then ask it every time.
_FROM_ENVIRONMENT = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def tracing() -> bool:
    """Whether a TracerProvider was set (otherwise no span is started). Until one is, this
    reads the API's global (a public call would read the environment on every send)."""
    global _tracing_on  # noqa: PLW0603 - set once a provider is found
    if _tracing_on:
        return True
    if not _FROM_ENVIRONMENT and getattr(trace, "_TRACER_PROVIDER", _tracing_on) is None:
        return False
    _tracing_on = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return _tracing_on


#: Whether a provider was found set (it cannot be unset: the answer is kept). Set from the
#: start where a provider is configured from the environment, or where this API keeps its
#: globals elsewhere (then every call asks the API).
_enabled = (
    _FROM_ENVIRONMENT
    or "OTEL_PYTHON_METER_PROVIDER" in os.environ
    or not hasattr(_metrics_api, "_METER_PROVIDER")
    or not hasattr(trace, "_TRACER_PROVIDER")
)


def enabled() -> bool:
    """Whether the application set a MeterProvider or a TracerProvider. Until it has, the
    hot paths skip their instruments altogether (the proxies would drop every measurement):
    two reads of the API's globals, not a dozen no-op calls per send."""
    global _enabled  # noqa: PLW0603 - set once a provider is found
    if _enabled:
        return True
    if _metrics_api._METER_PROVIDER is None and trace._TRACER_PROVIDER is None:
        return False
    _enabled = True
    return True


def span(name: str, attributes: Mapping[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """A span around a call, as the current span; its ``fencing.outcome`` is set from an
    exception that leaves it (the caller sets it otherwise). Without a TracerProvider,
    nothing is started (the no-op span is returned)."""
    if not tracing():
        return _NO_SPAN
    return _span(name, attributes)


@contextlib.contextmanager
def _span(name: str, attributes: Mapping[str, Any]) -> Iterator[trace.Span]:
    # The application's SDK runs here (its processors and exporters, as a span ends): an
    # error of theirs is logged, never raised into the call, whose outcome it cannot change
    # (a send told "failed" after its record was written would be sent again).
    try:
        if _tracer is None:
            _make()
        assert _tracer is not None
        current = _tracer.start_span(name, attributes=dict(attributes))
        token = otel_context.attach(trace.set_span_in_context(current))
    except Exception as exc:
        failed("start a span", exc)
        yield trace.INVALID_SPAN
        return
    try:
        yield current
    except BaseException as exc:
        try:
            current.set_attribute(OUTCOME, outcome_of(exc))
            if isinstance(exc, Exception):
                current.record_exception(exc)
            current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        except Exception as error:
            failed("record a span's error", error)
        raise
    finally:
        try:
            otel_context.detach(token)
            current.end()
        except Exception as exc:
            failed("end a span", exc)


_warned = False


def failed(what: str, exc: Exception) -> None:
    """Log (once per process) an error the OpenTelemetry SDK raised into the library."""
    global _warned  # noqa: PLW0603 - one warning per process
    if not _warned:
        _warned = True
        _log.warning(
            "redis-fencing: the OpenTelemetry SDK failed to %s (%r); the library goes on, "
            "and logs no more of these",
            what,
            exc,
        )
    else:
        _log.debug("redis-fencing: the OpenTelemetry SDK failed to %s", what, exc_info=exc)


def outcome_of(exc: BaseException) -> str:
    """The outcome a failed call is counted under: ``fenced`` (superseded), ``unknown``
    (it may have been applied: a lost reply, an interrupt), or ``refused`` (a typed
    refusal: nothing was applied)."""
    if isinstance(exc, Fenced):
        return "fenced"
    if isinstance(exc, OutcomeUnknown) or not isinstance(exc, FencingError):
        return "unknown"
    return "refused"


def partition_attributes(topic: str, partition: int) -> dict[str, Any]:
    """The attributes naming one partition of a topic."""
    return {TOPIC: topic, PARTITION: partition}


def spark_batch_span(topic: str, lineage: Any) -> contextlib.AbstractContextManager[Any]:
    """The span of one Spark micro-batch's commit on the driver (``lineage``: its app id,
    query id and batch id)."""
    return span(
        "fencing.spark.batch",
        {
            TOPIC: topic,
            SCRIPT: "sink_commit",
            "fencing.spark.app_id": lineage.app_id,
            "fencing.spark.query_id": lineage.query_id,
            "fencing.spark.batch_id": lineage.batch_id,
        },
    )


def spark_rows(topic: str, written: int, skipped: int) -> None:
    """Count a Spark micro-batch's rows, from its tasks' summaries (on the driver)."""
    try:
        rows = instruments().spark_rows
        if written:
            rows.add(written, {TOPIC: topic, OUTCOME: "written"})
        if skipped:
            rows.add(skipped, {TOPIC: topic, OUTCOME: "skipped"})
    except Exception as exc:
        failed("count Spark rows", exc)


def add(counter: metrics.Counter, amount: int, attributes: Mapping[str, Any]) -> None:
    """``counter.add``, an error of the SDK's logged (:func:`failed`), never raised."""
    try:
        counter.add(amount, attributes)
    except Exception as exc:
        failed("add to a counter", exc)


def record(histogram: metrics.Histogram, value: float, attributes: Mapping[str, Any]) -> None:
    """``histogram.record``, an error of the SDK's logged, never raised."""
    try:
        histogram.record(value, attributes)
    except Exception as exc:
        failed("record a value", exc)


def set_gauge(gauge: Any, value: float, attributes: Mapping[str, Any]) -> None:
    """``gauge.set``, an error of the SDK's logged, never raised."""
    try:
        gauge.set(value, attributes)
    except Exception as exc:
        failed("set a gauge", exc)


class _Outcomes:
    """Attributes with an outcome added, each dictionary built once (a hot path builds
    none)."""

    __slots__ = ("_base", "_by_outcome")

    def __init__(self, base: dict[str, Any]) -> None:
        self._base = base
        self._by_outcome: dict[str, dict[str, Any]] = {}

    def of(self, outcome: str) -> dict[str, Any]:
        """The attributes with ``outcome``."""
        attrs = self._by_outcome.get(outcome)
        if attrs is None:
            attrs = self._by_outcome[outcome] = {**self._base, OUTCOME: outcome}
        return attrs


class PartitionMeter(_Outcomes):
    """One partition's producer instruments, with their attributes built once (the send
    path builds no dictionary). An error of the SDK's is logged, never raised into a send."""

    __slots__ = ("_instruments", "partition", "send_span")

    def __init__(self, topic: str, partition: int) -> None:
        self.partition = partition_attributes(topic, partition)
        super().__init__(self.partition)
        #: The attributes a send's span starts with.
        self.send_span = {**self.partition, SCRIPT: "append"}
        self._instruments = instruments()

    def records(self, outcome: str, count: int) -> None:
        """Count ``count`` records sent with ``outcome``."""
        try:
            if count:
                self._instruments.records.add(count, self.of(outcome))
        except Exception as exc:
            failed("count records", exc)

    def call(self, sends: int) -> None:
        """Count one append call carrying ``sends`` sends."""
        try:
            ins = self._instruments
            ins.batches.add(1, self.partition)
            ins.batch_sends.record(sends, self.partition)
        except Exception as exc:
            failed("count an append call", exc)

    def send_took(self, seconds: float, outcome: str) -> None:
        """Record how long one send took, with its outcome."""
        try:
            self._instruments.send_duration.record(seconds, self.of(outcome))
        except Exception as exc:
            failed("record a send's duration", exc)

    def resolved(self, landed: bool) -> None:
        """Count a pending batch settled by the resolve script."""
        add(self._instruments.resolved, 1, self.of("landed" if landed else "not_landed"))

    def id_refreshed(self) -> None:
        """Count a fresh producer id taken after the state expired while idle."""
        add(self._instruments.id_refreshes, 1, self.partition)


class LeaseMeter(_Outcomes):
    """The lease instruments of one kind of holder (``producer``, ``owner``,
    ``election``, ``consumer``). An error of the SDK's is logged, never raised."""

    __slots__ = ("_instruments", "kind")

    def __init__(self, kind: str) -> None:
        self.kind = {KIND: kind}
        super().__init__(self.kind)
        self._instruments = instruments()

    def renewed(self, outcome: str, seconds: float) -> None:
        """Count a renewal and how long it took."""
        add(self._instruments.renewals, 1, self.of(outcome))
        record(self._instruments.renewal_duration, seconds, self.kind)

    def lost(self) -> None:
        """Count a lease lost for good."""
        add(self._instruments.lease_lost, 1, self.kind)

    def lapsed(self, cause: str) -> None:
        """Count a lease a renewal found ended by server time (``server-clock``: its reply
        came before the lease's end by the holder's clock; ``late``: the holder was late)."""
        add(self._instruments.lapsed, 1, {**self.kind, CAUSE: cause})

    def claimed(self, outcome: str) -> None:
        """Count a claim's outcome."""
        add(self._instruments.claims, 1, self.of(outcome))

    def handed_over(self, seconds: float) -> None:
        """Record how long a waiter waited before it was granted."""
        record(self._instruments.handover, seconds, self.kind)

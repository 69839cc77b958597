"""OpenTelemetry metrics with Prometheus exposition, one meter provider per process.

Labels never carry a session id, a reminder id or any text (SPEC §10).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Meter, Observation
from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)
from opentelemetry.trace import Span, SpanKind, Tracer
from prometheus_client import REGISTRY, generate_latest

from core.projection import Verdict
from core.size import TRACE_HEADERS_MAX_BYTES
from services.adapters.jetstream import header_block_bytes
from services.adapters.settings import Settings

_PROVIDER: MeterProvider | None = None
_TRACER_PROVIDER: TracerProvider | None = None
_TRACING = False

#: Attributes of the messaging semantic conventions on every consumer span.
MESSAGING_SYSTEM = {"messaging.system": "nats"}


def tracer_provider(service_name: str, settings: Settings | None = None) -> TracerProvider:
    """The process-wide tracer provider: OTLP when an endpoint is configured, and a JSON
    lines file when `REMINDERS_TRACE_FILE` is set (what the tests read)."""
    global _TRACER_PROVIDER, _TRACING
    if _TRACER_PROVIDER is not None:
        return _TRACER_PROVIDER
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if settings is not None and settings.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = settings.otlp_endpoint.rstrip("/") + "/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    if settings is not None and settings.trace_file is not None:
        stream = open(settings.trace_file, "a", encoding="utf-8")  # noqa: SIM115 - lives with the process
        provider.add_span_processor(
            SimpleSpanProcessor(
                ConsoleSpanExporter(
                    out=stream, formatter=lambda span: span.to_json(indent=None) + "\n"
                )
            )
        )
    _TRACING = settings is not None and bool(settings.otlp_endpoint or settings.trace_file)
    trace.set_tracer_provider(provider)
    _TRACER_PROVIDER = provider
    return provider


def tracing_enabled() -> bool:
    """Whether this process exports spans anywhere (an OTLP endpoint or a trace file).

    Without an exporter a span is made and thrown away; a hot path asks this first and
    skips making one (it still forwards a caller's trace context, see `use_remote_parent`).
    """
    return _TRACING


def inject_traceparent() -> dict[str, str]:
    """W3C trace headers of the current span, to carry on published messages; only
    `traceparent` when they would take more than `TRACE_HEADERS_MAX_BYTES` (a caller's
    `baggage` and `tracestate` are carried on as sent, and the server counts headers toward
    `max_payload`: the size invariant leaves them `HEADER_ALLOWANCE_BYTES`)."""
    # Most commands run outside any trace: skip the propagator's work when there is none.
    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if header_block_bytes(carrier) > TRACE_HEADERS_MAX_BYTES:
        return {key: carrier[key] for key in ("traceparent",) if key in carrier}
    return carrier


def extract_context(headers: dict[str, str] | None) -> Context:
    """The remote parent carried in a message's headers (empty context when none)."""
    return propagate.extract(headers or {})


#: Bucket bounds of every duration histogram (unit `s`): 100 µs to 10 s. The OpenTelemetry
#: default (0, 5, 10, … 10000) suits milliseconds, so every command (a few ms, in seconds)
#: fell into the first bucket and `histogram_quantile` could only answer "under 5 s".
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

#: Bucket bounds of every size histogram (unit `By`): 128 B to 1 MiB, around the envelope
#: cap (`REMINDERS_MAX_ENVELOPE_BYTES`, 256 KiB by default).
SIZE_BUCKETS_BYTES: tuple[float, ...] = tuple(float(2**power) for power in range(7, 21))

#: Bucket bounds of the commands-per-atomic-batch histogram (a batch holds at most 1000).
BATCH_BUCKETS: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)


#: Bucket bounds of the envelope-tokens histogram (SPEC §12.1): 16 to 64k estimated tokens.
TOKEN_BUCKETS: tuple[float, ...] = tuple(float(2**power) for power in range(4, 17))


def metric_views() -> list[View]:
    """Views giving every histogram buckets in the range it measures, matched by unit so a
    histogram another module creates (the observer's envelope sizes) is covered too."""
    return [
        View(
            instrument_type=HistogramInstrument,
            instrument_unit="s",
            aggregation=ExplicitBucketHistogramAggregation(LATENCY_BUCKETS_S),
        ),
        View(
            instrument_type=HistogramInstrument,
            instrument_unit="By",
            aggregation=ExplicitBucketHistogramAggregation(SIZE_BUCKETS_BYTES),
        ),
        View(
            instrument_type=HistogramInstrument,
            instrument_name="reminders_group_commit_commands",
            aggregation=ExplicitBucketHistogramAggregation(BATCH_BUCKETS),
        ),
        View(
            instrument_type=HistogramInstrument,
            instrument_name="reminders_envelope_tokens",
            aggregation=ExplicitBucketHistogramAggregation(TOKEN_BUCKETS),
        ),
    ]


def meter_provider(service_name: str = "reminders") -> MeterProvider:
    """The process-wide meter provider, made on first use (never at import time)."""
    global _PROVIDER
    if _PROVIDER is None:
        _PROVIDER = MeterProvider(
            metric_readers=[PrometheusMetricReader()],
            resource=Resource.create({"service.name": service_name}),
            views=metric_views(),
        )
    return _PROVIDER


def metrics_text() -> bytes:
    """The Prometheus text exposition of every metric of this process."""
    return generate_latest(REGISTRY)


class LabelledCount:
    """A count per label set, kept in plain ints and observed only when scraped.

    The SDK's `Counter.add` cleans the attributes, hashes them and takes a lock on every
    call, which the gateway paid several times per command (`bench/results/`); a dict
    increment does not, and the exposition (an observable counter) is the same.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[tuple[str, str], ...], int] = {}

    def add(self, amount: int, attributes: Mapping[str, str] | None = None) -> None:
        """Count `amount` more under `attributes` (the labels, never ids or text)."""
        key = tuple(attributes.items()) if attributes else ()
        self._counts[key] = self._counts.get(key, 0) + amount

    def observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        """The cumulative counts, for an observable counter's callback."""
        return [Observation(count, dict(key)) for key, count in list(self._counts.items())]


#: The count behind each observable counter, by meter and name (the meter is held so its id
#: is not reused while the entry lives).
_COUNTS: dict[tuple[int, str], tuple[Meter, LabelledCount]] = {}


def labelled_count(
    meter: Meter, name: str, description: str, unit: str = "", *, up_down: bool = False
) -> LabelledCount:
    """The count exposed as counter `name` on `meter`, registered on first use; with
    `up_down`, a count that also goes down, exposed as an up-down counter (a gauge).

    A second request for the same name returns the same count, as the SDK returns the same
    `Counter` for a name already created on a meter (it ignores a second observable one)."""
    key = (id(meter), name)
    if key not in _COUNTS:
        count = LabelledCount()
        create = (
            meter.create_observable_up_down_counter if up_down else meter.create_observable_counter
        )
        create(name, callbacks=[count.observe], unit=unit, description=description)
        _COUNTS[key] = (meter, count)
    return _COUNTS[key][1]


def session_cache_metrics(
    meter: Meter,
    cached_bytes: Callable[[], int],
    bound_bytes: int,
    evictions: Callable[[], int],
) -> None:
    """Expose how full a service's session cache is: the encoded bytes it counts against its
    bound, the bound, and how many sessions it evicted beyond a bound so far. A service's
    memory grows until its cache is full, so this is what tells warm-up from growth
    (`docs/observability.md`); a cache that has evicted is full."""
    meter.create_observable_gauge(
        "reminders_session_cache_bytes",
        callbacks=[lambda _options: [Observation(cached_bytes())]],
        unit="By",
        description="Encoded bytes of the session states this process caches",
    )
    meter.create_observable_gauge(
        "reminders_session_cache_bound_bytes",
        callbacks=[lambda _options: [Observation(bound_bytes)]],
        unit="By",
        description="The bound on reminders_session_cache_bytes",
    )
    meter.create_observable_counter(
        "reminders_session_cache_evictions",
        callbacks=[lambda _options: [Observation(evictions())]],
        description="Session states this process's cache evicted beyond its bounds",
    )


@dataclass
class GatewayMetrics:
    """Instruments of the gateway (SPEC §10)."""

    commands: LabelledCount
    latency: Histogram
    events: LabelledCount
    conflicts: LabelledCount
    batch_size: Histogram
    #: Reads of a session from the log, by `how`: `whole` (its whole history), `caught_up`
    #: (a cached state behind the log, the events after it folded on), `tail_refused` (a
    #: tail that did not continue the cached state: read whole next), `replica_behind` (a
    #: tail from a replica behind the log: read again), `leader_behind` (a leader out of
    #: quorum counted fewer messages than were seen: the command waits for another),
    #: `no_count` (the server would not count the session's messages, no leader just now:
    #: the command waits).
    session_reads: LabelledCount

    @classmethod
    def create(
        cls, meter: Meter, active_sessions: Callable[[], int] | None = None
    ) -> GatewayMetrics:
        """Register the gateway's instruments on `meter`; `active_sessions` feeds the gauge."""
        if active_sessions is not None:
            count = active_sessions
            meter.create_observable_gauge(
                "reminders_active_sessions",
                callbacks=[lambda _options: [Observation(count())]],
                description="Sessions with a command in the last 5 minutes (per gateway)",
            )
        commands = labelled_count(meter, "reminders_commands", "Commands by op and outcome")
        events = labelled_count(meter, "reminders_events_appended", "Events appended by kind")
        conflicts = labelled_count(
            meter, "reminders_occ_conflicts", "Optimistic-concurrency conflicts"
        )
        conflicts.add(0)  # a documented series exists before its first increment
        session_reads = labelled_count(
            meter, "reminders_session_reads", "Reads of a session from the log, by how"
        )
        return cls(
            commands=commands,
            latency=meter.create_histogram(
                "reminders_command_latency", unit="s", description="Command latency"
            ),
            events=events,
            conflicts=conflicts,
            session_reads=session_reads,
            batch_size=meter.create_histogram(
                "reminders_group_commit_commands",
                unit="{command}",
                description="Commands per atomic batch",
                explicit_bucket_boundaries_advisory=BATCH_BUCKETS,
            ),
        )


@dataclass
class ProjectorMetrics:
    """Instruments of the projector (SPEC §10): lag, apply latency, verdicts, DLQ."""

    events: Counter
    apply_latency: Histogram
    dead_letters: Counter
    lag: list[int]
    #: Events read from the log's leader to fill a gap (not delivered to the projector).
    gap_fills: Counter

    @classmethod
    def create(cls, meter: Meter) -> ProjectorMetrics:
        """Register the projector's instruments; lag is observed from the last fetch."""
        lag = [0]
        meter.create_observable_gauge(
            "reminders_projector_lag",
            callbacks=[lambda _options: [Observation(lag[0])]],
            description="Events in the stream not yet delivered to the projector",
        )
        dead_letters = meter.create_counter(
            "reminders_dlq_messages", description="Poison messages copied to the DLQ"
        )
        # Exposed at 0 from the start: a counter whose first sample is already 3 shows no
        # increase() to Prometheus, so the first poison events after a start would never
        # fire RemindersDeadLettersGrowing (tests/e2e/test_prometheus.py).
        dead_letters.add(0)
        events = meter.create_counter("reminders_projector_events", description="Events by verdict")
        for verdict in Verdict:  # every verdict's series from the start, at 0
            events.add(0, {"verdict": verdict.value})
        gap_fills = meter.create_counter(
            "reminders_projector_gap_fills", description="Events read from the log to fill a gap"
        )
        gap_fills.add(0)
        return cls(
            events=events,
            apply_latency=meter.create_histogram(
                "reminders_projector_apply_latency", unit="s", description="Per-session apply"
            ),
            dead_letters=dead_letters,
            lag=lag,
            gap_fills=gap_fills,
        )


def consumer_span(
    tracer: Tracer, subject: str, headers: dict[str, str] | None, group: str
) -> Span | None:
    """A consumer span continuing the trace a message carries (None for untraced messages).

    It is named by the subject's kind, never its session token (SPEC §10 keeps ids out of
    names and labels); the caller ends it, or makes it current with `use_span`.
    """
    if not headers or "traceparent" not in headers:
        return None
    tokens = subject.split(".")
    destination = ".".join(tokens[:3]) if len(tokens) > 3 else subject
    return tracer.start_span(
        f"{destination} process",
        context=extract_context(headers),
        kind=SpanKind.CONSUMER,
        attributes={
            **MESSAGING_SYSTEM,
            "messaging.destination.name": destination,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.consumer.group.name": group,
            "messaging.message.id": str(headers.get("Nats-Msg-Id", "")),
        },
    )

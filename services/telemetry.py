"""OpenTelemetry metrics with Prometheus exposition, one meter provider per process.

Labels never carry a session id, a reminder id or any text (SPEC §10).
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import Counter, Histogram, Meter, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from prometheus_client import REGISTRY, generate_latest

_PROVIDER: MeterProvider | None = None


def meter_provider(service_name: str = "reminders") -> MeterProvider:
    """The process-wide meter provider, made on first use (never at import time)."""
    global _PROVIDER
    if _PROVIDER is None:
        _PROVIDER = MeterProvider(
            metric_readers=[PrometheusMetricReader()],
            resource=Resource.create({"service.name": service_name}),
        )
    return _PROVIDER


def metrics_text() -> bytes:
    """The Prometheus text exposition of every metric of this process."""
    return generate_latest(REGISTRY)


@dataclass
class GatewayMetrics:
    """Instruments of the gateway (SPEC §10)."""

    commands: Counter
    latency: Histogram
    events: Counter
    conflicts: Counter
    batch_size: Histogram

    @classmethod
    def create(cls, meter: Meter) -> GatewayMetrics:
        """Register the gateway's instruments on `meter`."""
        return cls(
            commands=meter.create_counter(
                "reminders_commands", description="Commands by op and outcome"
            ),
            latency=meter.create_histogram(
                "reminders_command_latency", unit="s", description="Command latency"
            ),
            events=meter.create_counter(
                "reminders_events_appended", description="Events appended by kind"
            ),
            conflicts=meter.create_counter(
                "reminders_occ_conflicts", description="Optimistic-concurrency conflicts"
            ),
            batch_size=meter.create_histogram(
                "reminders_group_commit_commands", description="Commands per atomic batch"
            ),
        )


@dataclass
class ProjectorMetrics:
    """Instruments of the projector (SPEC §10): lag, apply latency, verdicts, DLQ."""

    events: Counter
    apply_latency: Histogram
    dead_letters: Counter
    lag: list[int]

    @classmethod
    def create(cls, meter: Meter) -> ProjectorMetrics:
        """Register the projector's instruments; lag is observed from the last fetch."""
        lag = [0]
        meter.create_observable_gauge(
            "reminders_projector_lag",
            callbacks=[lambda _options: [Observation(lag[0])]],
            description="Events in the stream not yet delivered to the projector",
        )
        return cls(
            events=meter.create_counter(
                "reminders_projector_events", description="Events by verdict"
            ),
            apply_latency=meter.create_histogram(
                "reminders_projector_apply_latency", unit="s", description="Per-session apply"
            ),
            dead_letters=meter.create_counter(
                "reminders_dlq_messages", description="Poison messages copied to the DLQ"
            ),
            lag=lag,
        )

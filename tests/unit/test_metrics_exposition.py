"""The Prometheus exposition every service serves: histogram buckets in the range they
measure, and names by the Prometheus conventions (SPEC §10), read from the text a scraper
sees rather than from the instruments."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from services.adapters.telemetry import (
    BATCH_BUCKETS,
    LATENCY_BUCKETS_S,
    SIZE_BUCKETS_BYTES,
    GatewayMetrics,
    ProjectorMetrics,
    meter_provider,
    metrics_text,
    session_cache_metrics,
)
from services.observer.app import ObserverMetrics
from services.propagator.app import PropagatorMetrics

#: The OpenTelemetry SDK's default histogram bounds: what every histogram had before.
OTEL_DEFAULT_BOUNDS = (0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0)

#: Names that are not ours: the exporter's resource info and prometheus_client's defaults.
FOREIGN = re.compile(r"^(target_info|python_.*|process_.*)$")

#: Gauges and histograms of plain counts, which by the conventions carry no unit suffix.
UNITLESS = {
    "reminders_active_sessions",
    "reminders_projector_lag",
    "reminders_live",
    "reminders_group_commit_commands",
    "reminders_envelope_tokens",  # estimated tokens: a count, named by what it counts
}


def exposition() -> dict[str, tuple[str, list[Sample]]]:
    """Record one observation on every instrument of every service, then scrape."""
    meter = meter_provider().get_meter("test-exposition")
    gateway = GatewayMetrics.create(meter, lambda: 2)
    projector = ProjectorMetrics.create(meter)
    observer = ObserverMetrics.create()
    propagator = PropagatorMetrics.create(meter)
    session_cache_metrics(meter, lambda: 3 * 1024, 4 * 1024 * 1024, lambda: 5)
    ok = {"op": "inject", "outcome": "ok"}
    gateway.commands.add(1, ok)
    gateway.latency.record(0.0031, ok)  # 3.1 ms: in the (2.5 ms, 5 ms] bucket
    gateway.events.add(1, {"kind": "injected"})
    gateway.conflicts.add(1)
    gateway.session_reads.add(1, {"how": "caught_up"})
    gateway.batch_size.record(7)
    projector.events.add(1, {"verdict": "applied"})
    projector.apply_latency.record(0.0002)  # 200 µs
    projector.dead_letters.add(1)
    projector.lag[0] = 4
    observer.lifecycle.add(1, {"kind": "fired", "reason": "none"})
    observer.live.add(1)
    observer.envelope_bytes.record(700, {"format": "context-directives"})
    observer.ttl_expiries.add(1)
    propagator.handoffs.add(1, {"outcome": "applied"})
    propagator.reminders.add(1, {"outcome": "inherited"})
    for counter in (
        observer.effect.injected,
        observer.effect.delivered,
        observer.effect.rendered,
        observer.effect.tokens,
        observer.effect.expired_unacknowledged,
    ):
        counter.add(1, {"source": "hook"})
    observer.effect.acknowledged.add(1, {"source": "hook", "outcome": "acted"})
    text = metrics_text().decode()
    return {
        family.name: (family.type, family.samples)
        for family in text_string_to_metric_families(text)
        if not FOREIGN.match(family.name)
    }


def bounds(samples: list[Sample], name: str) -> list[float]:
    """The `le` bounds of the first series of histogram `name`, without +Inf."""
    seen: list[float] = []
    for sample in samples:
        if sample.name == f"{name}_bucket":
            bound = float(sample.labels["le"])
            if bound in seen:
                break
            if bound != float("inf"):
                seen.append(bound)
    return seen


def cumulative(samples: list[Sample], name: str, le: float) -> float:
    return sum(
        sample.value
        for sample in samples
        if sample.name == f"{name}_bucket" and float(sample.labels["le"]) == le
    )


def test_latency_histograms_have_sub_millisecond_to_ten_second_buckets() -> None:
    families = exposition()
    for name in ("reminders_command_latency_seconds", "reminders_projector_apply_latency_seconds"):
        kind, samples = families[name]
        assert kind == "histogram"
        assert bounds(samples, name) == list(LATENCY_BUCKETS_S), name
        assert min(LATENCY_BUCKETS_S) < 0.001 and max(LATENCY_BUCKETS_S) == 10.0
    _, samples = families["reminders_command_latency_seconds"]
    name = "reminders_command_latency_seconds"
    # The 3.1 ms observation is counted from the 5 ms bucket on, and not in the 2.5 ms one.
    assert cumulative(samples, name, 0.0025) == 0
    assert cumulative(samples, name, 0.005) >= 1
    _, samples = families["reminders_projector_apply_latency_seconds"]
    assert cumulative(samples, "reminders_projector_apply_latency_seconds", 0.00025) >= 1


def test_every_histogram_has_buckets_in_its_range_not_the_sdk_defaults() -> None:
    families = exposition()
    histograms = {
        name: samples for name, (kind, samples) in families.items() if kind == "histogram"
    }
    assert set(histograms) >= {
        "reminders_command_latency_seconds",
        "reminders_projector_apply_latency_seconds",
        "reminders_envelope_bytes",
        "reminders_group_commit_commands",
    }
    for name, samples in histograms.items():
        assert tuple(bounds(samples, name)) != OTEL_DEFAULT_BOUNDS, name
    assert bounds(histograms["reminders_envelope_bytes"], "reminders_envelope_bytes") == list(
        SIZE_BUCKETS_BYTES
    )
    assert bounds(
        histograms["reminders_group_commit_commands"], "reminders_group_commit_commands"
    ) == list(BATCH_BUCKETS)


def test_every_metric_name_follows_the_prometheus_conventions() -> None:
    families = exposition()
    assert families, "nothing exposed"
    for name, (kind, samples) in families.items():
        assert re.fullmatch(r"reminders_[a-z][a-z0-9_]*[a-z0-9]", name), name
        sample_names = {sample.name for sample in samples}
        if kind == "counter":
            # The parser strips `_total` from a counter family's name; the samples keep it.
            assert sample_names == {f"{name}_total"}, name
        else:
            assert not name.endswith("_total"), f"{name} is a {kind} named like a counter"
        if kind == "histogram":
            assert name.endswith(("_seconds", "_bytes")) or name in UNITLESS, (
                f"histogram {name} has no base-unit suffix"
            )
        assert "latency" not in name or name.endswith("_seconds"), name
        for unit in ("_milliseconds", "_ms", "_kilobytes", "_minutes"):
            assert unit not in name, f"{name} is not in a base unit"
    exposed = {
        "reminders_commands": "counter",
        "reminders_command_latency_seconds": "histogram",
        "reminders_events_appended": "counter",
        "reminders_occ_conflicts": "counter",
        "reminders_session_reads": "counter",
        "reminders_group_commit_commands": "histogram",
        "reminders_active_sessions": "gauge",
        "reminders_projector_events": "counter",
        "reminders_projector_apply_latency_seconds": "histogram",
        "reminders_dlq_messages": "counter",
        "reminders_projector_gap_fills": "counter",
        "reminders_projector_lag": "gauge",
        "reminders_session_cache_bytes": "gauge",
        "reminders_session_cache_bound_bytes": "gauge",
        "reminders_session_cache_evictions": "counter",
        "reminders_lifecycle_events": "counter",
        "reminders_live": "gauge",
        "reminders_envelope_bytes": "histogram",
        "reminders_ttl_expiries": "counter",
        "reminders_propagator_handoffs": "counter",
        "reminders_propagator_reminders": "counter",
    }
    for name, kind in exposed.items():
        assert families[name][0] == kind, name
    assert [s.value for s in families["reminders_session_cache_bytes"][1]] == [3 * 1024]
    assert [s.value for s in families["reminders_session_cache_evictions"][1]] == [5]


def test_labels_are_kinds_and_outcomes_only() -> None:
    # `source` is a closed set too: the five sources of a ReminderSpec, or `unknown`.
    # `how` is a closed set: how a session was read from the log.
    allowed = {"op", "outcome", "kind", "reason", "verdict", "format", "le", "source", "how"}
    reads = {"whole", "caught_up", "tail_refused", "replica_behind", "leader_behind", "no_count"}
    sources = {"stdlib_provider", "hook", "bridge", "in_pipeline", "inherited", "unknown"}
    scope = {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}
    for name, (_kind, samples) in exposition().items():
        for sample in samples:
            extra = set(sample.labels) - allowed - scope
            assert not extra, f"{name} carries labels {extra}"
            assert sample.labels.get("source", "hook") in sources, name
            assert sample.labels.get("how", "whole") in reads, name


#: What a fresh process exposes before anything happened: each service's instruments made
#: as its worker makes them at start-up, then one scrape (a process of its own, since the
#: exposition is process-wide and the other tests here count into it).
FRESH_SCRAPE = """
from services.adapters.telemetry import GatewayMetrics, ProjectorMetrics, meter_provider
from services.adapters.telemetry import metrics_text
from services.observer.app import ObserverMetrics
from services.propagator.app import PropagatorMetrics

meter = meter_provider().get_meter("fresh")
GatewayMetrics.create(meter, lambda: 0)
ProjectorMetrics.create(meter)
ObserverMetrics.create()
PropagatorMetrics.create(meter)
print(metrics_text().decode())
"""


def test_every_label_free_and_enumerable_series_is_exposed_at_zero_from_the_start() -> None:
    import subprocess
    import sys

    scraped = subprocess.run(
        [sys.executable, "-c", FRESH_SCRAPE], capture_output=True, text=True, check=True
    ).stdout
    values = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
    }

    def value(name: str, **labels: str) -> float | None:
        for (sample_name, sample_labels), sample_value in values.items():
            ours = {k: v for k, v in sample_labels if not k.startswith("otel_scope")}
            if sample_name == name and ours == labels:
                return sample_value
        return None

    assert value("reminders_occ_conflicts_total") == 0
    assert value("reminders_dlq_messages_total") == 0
    assert value("reminders_ttl_expiries_total") == 0
    assert value("reminders_live") == 0
    assert value("reminders_projector_lag") == 0
    for verdict in ("applied", "skipped", "poison"):
        assert value("reminders_projector_events_total", verdict=verdict) == 0, verdict
    for outcome in ("applied", "already_applied", "retried", "dead_lettered"):
        assert value("reminders_propagator_handoffs_total", outcome=outcome) == 0, outcome
    for outcome in ("inherited", "skipped"):
        assert value("reminders_propagator_reminders_total", outcome=outcome) == 0, outcome

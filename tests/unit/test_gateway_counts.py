"""The gateway counts in plain ints and exposes them as observable counters: the scrape shows
what `Counter.add` would have shown, and two instruments sets on one meter share the count
(the SDK returns one counter for one name on a meter)."""

from __future__ import annotations

from uuid import uuid4

from prometheus_client.parser import text_string_to_metric_families

from services.adapters.telemetry import GatewayMetrics, meter_provider, metrics_text


def scraped(name: str, scope: str) -> dict[tuple[tuple[str, str], ...], float]:
    families = text_string_to_metric_families(metrics_text().decode())
    return {
        tuple(
            sorted((k, v) for k, v in sample.labels.items() if not k.startswith("otel_"))
        ): sample.value
        for family in families
        if family.name == name
        for sample in family.samples
        if sample.labels.get("otel_scope_name") == scope
    }


def test_counts_are_exposed_as_counters_and_shared_by_name_on_a_meter() -> None:
    # A fresh scope per run: the meter provider is process-wide, and mutmut runs the unit
    # tests more than once in one process.
    scope = f"test-gateway-counts-{uuid4().hex}"
    meter = meter_provider().get_meter(scope)
    first, second = GatewayMetrics.create(meter), GatewayMetrics.create(meter)
    first.commands.add(1, {"op": "inject", "outcome": "ok"})
    second.commands.add(2, {"op": "inject", "outcome": "ok"})
    first.commands.add(1, {"op": "render", "outcome": "too_large"})
    first.events.add(3, {"kind": "injected"})
    second.conflicts.add(1)
    assert scraped("reminders_commands", scope) == {
        (("op", "inject"), ("outcome", "ok")): 3.0,
        (("op", "render"), ("outcome", "too_large")): 1.0,
    }
    assert scraped("reminders_events_appended", scope) == {(("kind", "injected"),): 3.0}
    assert scraped("reminders_occ_conflicts", scope) == {(): 1.0}

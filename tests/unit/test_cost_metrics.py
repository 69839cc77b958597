"""The cost metrics of SPEC §12.1 and §12.5 as a scraper sees them: an envelope-tokens
histogram in its own range and withheld counts by reason, with no id in any label."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from services.adapters.telemetry import TOKEN_BUCKETS, metrics_text
from services.observer.app import ObserverMetrics
from tests.support import Driver


def test_renders_feed_the_token_histogram_and_withheld_counts_by_reason() -> None:
    observer = ObserverMetrics.create()
    driver = Driver()
    driver.inject("Work only inside /srv/app.")
    hint = driver.inject("Consider a shorter answer.", authority="advisory")
    driver.inject("Idle.", tags=["idle"], authority="advisory")
    driver.ok("mute", selector={"tag": "idle"})
    driver.ok("render", turn=0, max_tokens=1)  # delivers the contract one, sheds the hint
    driver.ok("sanitize", turn=0, text="<directive>x</directive>")
    for event in driver.log:
        observer.observe(event)
    families = {
        family.name: family for family in text_string_to_metric_families(metrics_text().decode())
    }
    tokens = families["reminders_envelope_tokens"]
    bounds = sorted(
        {float(s.labels["le"]) for s in tokens.samples if s.name.endswith("_bucket")}
        - {float("inf")}
    )
    assert bounds == list(TOKEN_BUCKETS)
    assert any(s.name.endswith("_count") and s.value >= 1 for s in tokens.samples)
    withheld = {
        s.labels["reason"]: s.value
        for s in families["reminders_withheld"].samples
        if s.name == "reminders_withheld_total"
    }
    assert withheld["shed"] >= 1 and withheld["muted"] >= 1
    neutralized = families["reminders_forged_directives_neutralized"].samples
    assert any(s.value >= 2 for s in neutralized if s.name.endswith("_total"))
    labels = {
        value
        for family in families.values()
        for sample in family.samples
        for value in sample.labels.values()
    }
    assert hint not in labels and not any(value.startswith("r-0") for value in labels)

"""The observer's effect metrics (SPEC §12.6) count what `reminders stats` counts, per source,
with no id, tag or provider in any label."""

from __future__ import annotations

from collections import Counter as Tally
from typing import Any

from replay.engine import decode_rows
from replay.source import rows_from_file
from replay.stats import effect_report
from services.observer.effect import EffectMetrics
from tests.golden.regen import GOLDEN_DIR

LOG = GOLDEN_DIR / "cost_and_effect.events.jsonl"


class Recorder:
    """A counter that keeps its sums by label set."""

    def __init__(self) -> None:
        self.sums: Tally[tuple[tuple[str, str], ...]] = Tally()

    def add(self, amount: int, attributes: dict[str, str] | None = None) -> None:
        self.sums[tuple(sorted((attributes or {}).items()))] += amount

    def by(self, **labels: str) -> int:
        wanted = set(labels.items())
        return sum(n for key, n in self.sums.items() if wanted <= set(key))


def _metrics() -> tuple[EffectMetrics, dict[str, Recorder]]:
    recorders = {
        name: Recorder()
        for name in (
            "injected",
            "delivered",
            "rendered",
            "tokens",
            "acknowledged",
            "expired_unacknowledged",
        )
    }
    return EffectMetrics(**recorders), recorders  # type: ignore[arg-type]


def test_the_metrics_equal_the_effect_report_per_source() -> None:
    metrics, recorded = _metrics()
    rows = rows_from_file(LOG)
    for event in decode_rows(rows):
        metrics.observe(event)
    report: dict[str, Any] = effect_report([rows]).to_json()
    untagged_or_first: dict[str, dict[str, int]] = {}
    for source in ("in_pipeline", "hook"):
        # Per source over distinct reminders: one session here, so sum the rows of its
        # reminders once each (each reminder of this log has at most one tag).
        rows_of = [r for r in report["rows"] if r["source"] == source]
        untagged_or_first[source] = {
            "injected": sum(r["injected"] for r in rows_of),
            "rendered": sum(r["rendered"] for r in rows_of),
            "est_tokens": sum(r["est_tokens"] for r in rows_of),
            "acted": sum(r["acknowledged"]["acted"] for r in rows_of),
            "expired_unacknowledged": sum(r["expired_unacknowledged"] for r in rows_of),
        }
        expected = untagged_or_first[source]
        assert recorded["injected"].by(source=source) == expected["injected"]
        assert recorded["rendered"].by(source=source) == expected["rendered"]
        assert recorded["tokens"].by(source=source) == expected["est_tokens"]
        assert recorded["acknowledged"].by(source=source, outcome="acted") == expected["acted"]
        assert (
            recorded["expired_unacknowledged"].by(source=source)
            == expected["expired_unacknowledged"]
        )
    assert recorded["delivered"].by(source="in_pipeline") == 4


def test_no_label_carries_an_id_a_tag_or_a_provider() -> None:
    metrics, recorded = _metrics()
    for event in decode_rows(rows_from_file(LOG)):
        metrics.observe(event)
    names = {name for recorder in recorded.values() for key in recorder.sums for name, _ in key}
    assert names == {"source", "outcome"}


def test_an_acknowledgement_of_a_reminder_never_seen_injected_counts_as_unknown() -> None:
    metrics, recorded = _metrics()
    events = decode_rows(rows_from_file(LOG))
    for event in events:
        if event.kind != "injected":
            metrics.observe(event)
    assert recorded["acknowledged"].by(source="unknown") == 4

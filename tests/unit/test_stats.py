"""The effect report (SPEC §12.6), counted from the golden log that exercises it: every
number here is re-derivable by reading `tests/golden/cost_and_effect.events.jsonl`."""

from __future__ import annotations

from typing import Any

from replay.engine import decode_rows
from replay.source import rows_from_file
from replay.stats import EffectReport, add_session, effect_report, sessions_of
from replay.stats_html import stats_html
from tests.golden.regen import GOLDEN_DIR

LOG = GOLDEN_DIR / "cost_and_effect.events.jsonl"


def _report(since: str | None = None) -> dict[str, Any]:
    return effect_report([rows_from_file(LOG)], since).to_json()


def _row(report: dict[str, Any], source: str, tag: str | None) -> dict[str, Any]:
    [row] = [r for r in report["rows"] if (r["source"], r["tag"]) == (source, tag)]
    return row


def test_the_report_has_exactly_the_spec_shape() -> None:
    report = _report()
    assert set(report) == {"sessions", "rows", "totals"}
    keys = {
        "injected",
        "rendered",
        "est_tokens",
        "withheld",
        "acknowledged",
        "expired_unacknowledged",
        "median_turns_to_ack",
    }
    assert set(report["totals"]) == keys
    for row in report["rows"]:
        assert set(row) == {"source", "provider_id", "tag", *keys}
        assert set(row["withheld"]) == {"shed", "muted", "not_yet"}
        assert set(row["acknowledged"]) == {"acted", "ignored", "dismissed"}


def test_per_source_and_tag_counts() -> None:
    report = _report()
    assert report["sessions"] == 1
    deploy = _row(report, "in_pipeline", "deploy")
    assert (deploy["injected"], deploy["rendered"]) == (2, 2)
    assert deploy["withheld"] == {"shed": 0, "muted": 0, "not_yet": 1}  # smoke-1 at turn 0
    assert deploy["acknowledged"] == {"acted": 0, "ignored": 1, "dismissed": 1}
    # deploy-1 left at its deadline before anyone acknowledged it.
    assert deploy["expired_unacknowledged"] == 1
    # deploy-1: delivered at turn 0, ignored at 1; smoke-1: delivered and dismissed at 1.
    assert deploy["median_turns_to_ack"] == 0.5
    style = _row(report, "in_pipeline", "style")
    assert style["withheld"]["muted"] == 2 and style["rendered"] == 1
    assert style["median_turns_to_ack"] is None
    untagged = _row(report, "in_pipeline", None)
    assert untagged["withheld"]["shed"] == 1 and untagged["acknowledged"]["acted"] == 1
    hook = _row(report, "hook", "tests")
    assert hook["acknowledged"]["acted"] == 1 and hook["est_tokens"] == 4  # "Tests pass now."


def test_totals_count_each_reminder_once() -> None:
    totals = _report()["totals"]
    assert (totals["injected"], totals["rendered"]) == (5, 5)
    assert totals["acknowledged"] == {"acted": 2, "ignored": 1, "dismissed": 1}
    assert totals["withheld"] == {"shed": 1, "muted": 2, "not_yet": 1}
    assert totals["median_turns_to_ack"] == 0


def test_tokens_are_the_escaped_body_by_the_default_estimator() -> None:
    rows = rows_from_file(LOG)
    fired = [r.envelope["payload"] for r in rows if r.envelope["kind"] == "fired"]
    expected = sum(-(-len(p["body"].encode()) // 4) for p in fired)  # no body needs escaping
    assert _report()["totals"]["est_tokens"] == expected


def test_a_reminder_with_several_tags_counts_under_each_tag_and_once_in_totals() -> None:
    from tests.support import Driver

    driver = Driver("tags")
    driver.inject("two tags", tags=["a", "b"])
    driver.ok("render", turn=0)
    report = EffectReport()
    add_session(report, driver.log)
    data = report.to_json()
    assert [(r["tag"], r["rendered"]) for r in data["rows"]] == [("a", 1), ("b", 1)]
    assert data["totals"]["rendered"] == 1


def test_since_counts_only_later_events_but_knows_earlier_reminders() -> None:
    later = _report(since="2026-11-29T16:00:00.011+01:00")  # from the turn-1 render on
    totals = later["totals"]
    assert totals["injected"] == 0  # every injection came before
    assert totals["rendered"] == 3  # smoke-1 and cache-1 at turn 1, style-1 at turn 2
    assert totals["acknowledged"] == {"acted": 1, "ignored": 1, "dismissed": 1}
    assert _row(later, "in_pipeline", "deploy")["rendered"] == 1


def test_many_sessions_are_grouped_and_counted() -> None:
    rows = [
        row for path in sorted(GOLDEN_DIR.glob("*.events.jsonl")) for row in rows_from_file(path)
    ]
    grouped = sessions_of(rows)
    sessions = len({row.envelope["session_id"] for row in rows})
    assert len(grouped) == sessions >= 4
    seen: list[tuple[int, int]] = []
    report = effect_report(list(grouped.values()), progress=lambda d, t: seen.append((d, t)))
    assert report.sessions == sessions and seen[-1] == (sessions, sessions)
    assert report.totals.injected == sum(1 for row in rows if row.envelope["kind"] == "injected")
    assert report.totals.rendered == len([e for e in decode_rows(rows) if e.kind == "fired"])


def test_the_html_page_is_self_contained_with_a_chart() -> None:
    page = stats_html(_report(), "Reminder effect: <golden>")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "&lt;golden&gt;" in page and "<svg" in page
    assert page.count('<g class="effect-row"') == 4
    assert 'data-outcome="acted"' in page and 'data-outcome="expired_unacknowledged"' in page


def test_the_audit_shows_acknowledgements_deadlines_dismissals_and_what_was_held_back() -> None:
    from replay.chart import chart
    from replay.engine import replay
    from replay.report import html_report, text_report

    result = replay(rows_from_file(LOG))
    drawn = chart(result.events)
    markers = {(m.reminder_id, m.kind, m.turn) for row in drawn.rows for m in row.markers}
    assert ("deploy-1", "deadline", 1) in markers
    assert ("tests-1", "acknowledged", 0) in markers
    assert ("smoke-1", "withheld", 0) in markers  # not yet due
    assert ("cache-1", "withheld", 0) in markers  # shed by the budget
    assert ("style-1", "withheld", 1) in markers  # muted
    ended = {bar.reminder_id: bar.ended_by for bar in drawn.bars}
    assert ended["smoke-1"] == "expired (dismissed)"
    assert ended["deploy-1"] == "expired (deadline)"
    text = text_report("golden-4", result)
    assert "smoke-1 acknowledged as dismissed by model at turn 1: 'done already'" in text
    assert "shed cache-1; muted style-1; not yet due smoke-1" in text
    assert "deploy-1 expired: deadline at deadline of turn 1" in text
    page = html_report("golden-4", result)
    assert "acknowledged as acted by model" in page and "expired at its deadline" in page


def test_the_audit_page_shows_the_tokens_of_each_turn() -> None:
    from replay.engine import replay
    from replay.report import html_report

    page = html_report("golden-4", replay(rows_from_file(LOG)))
    assert '<p class="turn-tokens" data-turn="0" data-tokens="147">' in page
    assert 'data-turn="2" data-tokens="128"' in page

"""The providers' trail in replay (SPEC §9): the text and HTML reports show each turn's
evaluations, and `--verify` re-derives every evaluation from the log and names the event
whose recorded evaluation drifted."""

from __future__ import annotations

from typing import Any

from contracts.agent_events import RuntimeEvent
from contracts.events import Event
from core.providers import (
    default_config,
    parse_config,
)
from tests.unit.test_providers import (
    Session,
    budget,
    runtime,
)

# --- the trail in replay: text, html, --verify ------------------------------------------------


def stored_rows(log: list[Event]) -> list[Any]:
    from contracts.stored import StoredEvent
    from core.canonical import event_subject

    return [
        StoredEvent(e.to_wire(), n, event_subject(e.kind, e.session_id))
        for n, e in enumerate(log, start=1)
    ]


def trail_session() -> tuple[Session, dict[str, RuntimeEvent]]:
    s = Session()
    sent: dict[str, RuntimeEvent] = {}
    for n, (kind, payload) in enumerate(
        [
            ("budget", budget(171_000)),
            ("budget", budget(172_000)),
            ("tool_result", {"tool_name": "bash", "truncated": True}),
        ],
        start=1,
    ):
        event = runtime(kind, payload, n, f"v-{n}")
        sent[event.event_id] = event
        s.evaluate(event, s.state)
    return s, sent


def test_verify_re_derives_every_evaluation_and_names_the_drifting_event() -> None:
    from replay.verify import verify, verify_providers

    s, sent = trail_session()
    rows = stored_rows(s.log)
    assert verify(rows) is None
    verdict = verify_providers(rows, default_config(), sent)
    assert (verdict.problem, verdict.verified, verdict.unverifiable) == (None, 3, [])
    # Another configuration today: the 85 % crossing would not have fired.
    drift = verify_providers(
        rows, parse_config("[config.token_pressure]\nthresholds = [0.9]\n"), sent
    )
    assert drift.problem is not None
    assert "session_seq 1 " in drift.problem and "v-1" in drift.problem
    # Runtime events that aged out of AGENT_EVENTS are listed, not counted as drift.
    partial = verify_providers(rows, None, {"v-3": sent["v-3"]})
    assert partial.problem is None and partial.verified == 1
    assert partial.unverifiable == ["v-1", "v-2"]


def test_text_and_html_reports_show_the_provider_trail_per_turn() -> None:
    from replay.engine import replay
    from replay.report import html_report, text_report

    s, _ = trail_session()
    result = replay(stored_rows(s.log))
    text = text_report("s1", result)
    assert "providers: token_pressure fired, workspace_anchor predicate_false" in text
    assert "providers: token_pressure threshold_already_reported" in text
    assert "provider token_pressure on budget v-1: fired → " in text
    page = html_report("s1", result)
    assert page.count('class="provider-trail"') == 3

"""Provider decisions settled against the reference runtime's own tests (SPEC §9.3.1), and
mutes of a provider (§12.2) as the providers service and the gateway both see them."""

from __future__ import annotations

from core import CommandContext, fold_all, handle
from tests.unit.test_providers import Session, budget, rules_config

AT = "2026-11-29T15:04:05.123Z"


def test_a_fired_reminder_fires_at_the_runtime_events_turn() -> None:
    s = Session()
    s.send("session_idle", {"idle_seconds": 600}, turn=4)
    (spec,) = s.live()
    assert spec.fired_at_turn == 4


def test_a_provider_reminder_without_a_source_is_a_stdlib_provider_one() -> None:
    rule = 'id = "tip"\nwhen = { every_n_turns = 1 }\nreminder = { body = "A tip." }'
    s = Session(rules_config(rule))
    s.send("user_turn", {"text": "hi"}, turn=2)
    tip = next(spec for spec in s.live() if spec.body == "A tip.")
    assert tip.source == "stdlib_provider"


def test_the_gateway_defaults_a_fired_reminders_source_and_turn_itself() -> None:
    # The gateway decides whatever the providers service sent, a plug-in's reminder too.
    s = Session()
    command = {
        "session_id": "s1",
        "turn": 7,
        "runtime_event_id": "rt-x",
        "evaluations": [
            {
                "provider_id": "plugin-x",
                "event": "session_idle",
                "fired": True,
                "reason": "fired",
                "reminder": {"body": "from a plug-in"},
            }
        ],
    }
    context = CommandContext(command_id="c1", occurred_at=AT, new_reminder_id="x")
    decision = handle(s.state, "evaluate", command, context)
    injected = next(e.payload for e in decision.events if e.kind == "injected")
    assert injected.reminder.source == "stdlib_provider"  # type: ignore[union-attr]
    assert injected.reminder.fired_at_turn == 7  # type: ignore[union-attr]


def test_an_unchanged_durable_skip_names_the_reminder_it_kept() -> None:
    rule = (
        'id = "house"\nwhen = { every_n_turns = 1 }\n'
        'reminder = { body = "House rules.", dedupe_key = "house", preserve_on_compact = true }'
    )
    s = Session(rules_config(rule))
    s.send("user_turn", {"text": "a"}, turn=1)
    (kept,) = [spec for spec in s.live() if spec.dedupe_key == "house"]
    (again,) = [r for r in s.send("user_turn", {"text": "b"}, turn=2) if r.provider_id == "house"]
    assert (again.reason, again.fired, again.reminder_id) == (
        "unchanged_durable_reminder",
        False,
        kept.id,
    )


def test_resume_continuity_names_the_turn_it_suspended_at() -> None:
    s = Session()
    s.send("worker_resumed", {"suspension_reason": "quota", "suspended_at_turn": 12})
    (spec,) = s.live()
    assert "Suspended at turn: 12" in spec.body


def test_workspace_anchor_fires_on_every_budget_reading_while_an_anchor_is_set() -> None:
    s = Session()
    s.send("session_start", {"workspace_anchor": "/repo"})
    for used in (10_000, 11_000, 150_000):
        out = dict((r.provider_id, r.reason) for r in s.send("budget", budget(used)))
        assert out["workspace_anchor"] == "fired"
    assert [spec.dedupe_key for spec in s.live()].count("workspace_anchor") == 1


def test_a_muted_provider_is_evaluated_as_muted_by_the_service_and_not_called() -> None:
    s = Session()
    context = CommandContext(command_id="m1", occurred_at=AT, new_reminder_id="x")
    muted = handle(
        s.state, "mute", {"session_id": "s1", "selector": {"provider_id": "idle_nudge"}}, context
    )
    assert muted.ok
    s.state = fold_all(s.state, muted.events)
    (result,) = s.send("session_idle", {"idle_seconds": 600})
    assert (result.provider_id, result.reason, result.fired) == ("idle_nudge", "muted", False)
    assert s.live() == []

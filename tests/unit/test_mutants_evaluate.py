"""`evaluate` (SPEC §4.10.1, §9) and the fold of `provider_evaluated`: what mutation testing of
`core/deciders/evaluate.py` and `core/fold.py` showed no other unit test pins down
(docs/mutation-survivors-deciders-s18.md)."""

from __future__ import annotations

from typing import Any

from contracts.events import Event, ProviderEvaluated
from contracts.state import SessionState
from core import CommandContext, CoreConfig, fold_all, handle
from tests.support import Driver


def evaluation(provider_id: str = "p", **fields: Any) -> dict[str, Any]:
    """One evaluation of a `budget` runtime event."""
    return {"provider_id": provider_id, "event": "budget", **fields}


def fired(body: str, provider_id: str = "p", **spec: Any) -> dict[str, Any]:
    """An evaluation that fired a reminder with this body."""
    return evaluation(provider_id, fired=True, reason="fired", reminder={"body": body, **spec})


def evaluated(driver: Driver, *evaluations: dict[str, Any], **fields: Any) -> list[Any]:
    """Run one accepted `evaluate`; its `provider_evaluated` payloads, in order."""
    command = {"turn": 3, "runtime_event_id": "rt", **fields, "evaluations": list(evaluations)}
    decision = driver.run("evaluate", **command)
    assert decision.ok, decision.reply
    return [e.payload for e in decision.events if isinstance(e.payload, ProviderEvaluated)]


# --- the decider ----------------------------------------------------------------------------


def test_every_evaluation_records_the_view_the_providers_saw() -> None:
    driver = Driver()
    driver.inject("earlier")
    results = evaluated(
        driver, fired("b"), evaluation("q", fired=False, reason="predicate_false"), view_seq=1
    )
    assert [(r.reason, r.view_seq) for r in results] == [("fired", 1), ("predicate_false", 1)]


def test_an_evaluation_that_did_not_fire_names_no_reminder() -> None:
    driver = Driver()
    driver.ok("mute", selector={"provider_id": "muted"})
    results = evaluated(
        driver,
        evaluation("low", fired=False, reason="below_threshold"),
        fired("held back", "muted"),
        evaluation("broken", fired=False, reason="provider_error", error="boom"),
    )
    assert [(r.reason, r.fired, r.reminder_id) for r in results] == [
        ("below_threshold", False, None),
        ("muted", False, None),
        ("provider_error", False, None),
    ]


def test_a_fired_reminder_is_held_to_the_configured_body_bound() -> None:
    driver = Driver(config=CoreConfig(max_body_bytes=16))
    fits, over = evaluated(driver, fired("x" * 16, "fits"), fired("x" * 17, "over"))
    assert (fits.reason, fits.fired) == ("fired", True)
    assert (over.reason, over.fired, over.reminder_id) == ("malformed_spec", False, None)
    assert over.error.startswith("too_large ")
    assert driver.pending_ids() == [fits.reminder_id]


def test_a_refused_reminders_error_is_cut_at_1024_characters() -> None:
    unknown: dict[str, Any] = {f"option_{n:02d}_" + "x" * 90: 1 for n in range(20)}
    (result,) = evaluated(Driver(), fired("b", "p", **unknown))
    full = "HARN-RMD-001 unknown option(s): " + ", ".join(sorted(unknown))
    assert len(full) > 1024
    assert (result.reason, result.error) == ("malformed_spec", full[:1024])


def test_two_providers_firing_on_one_runtime_event_at_the_same_time_get_distinct_ids() -> None:
    # Two `evaluate` commands for the same runtime event (two providers services, or a
    # retry after the remembered reply was evicted) can carry the same time: the session's
    # clock never goes backwards, so a gateway whose clock lags records the last time again.
    state = SessionState()
    ids: list[str | None] = []
    for n, provider_id in enumerate(("first", "second"), 1):
        context = CommandContext(
            command_id=f"cmd-{n}", occurred_at="2026-11-29T15:00:00.000Z", new_reminder_id="unused"
        )
        command = {
            "session_id": "s1",
            "turn": 3,
            "runtime_event_id": "rt",
            "evaluations": [fired(f"from {provider_id}", provider_id)],
        }
        decision = handle(state, "evaluate", command, context, CoreConfig())
        assert decision.ok, decision.reply
        state = fold_all(state, decision.events)
        (result,) = [e.payload for e in decision.events if isinstance(e.payload, ProviderEvaluated)]
        assert (result.reason, result.error) == ("fired", None)
        ids.append(result.reminder_id)
    assert ids[0] != ids[1]
    assert [row.spec.id for row in state.pending] == ids


# --- the fold ---------------------------------------------------------------------------------


def test_a_fired_evaluation_marks_only_its_own_reminder_as_the_providers() -> None:
    driver = Driver()
    own = driver.inject("the host's own")
    (result,) = evaluated(driver, fired("from p"))
    assert [(row.spec.id, row.provider_id) for row in driver.state.pending] == [
        (own, None),
        (result.reminder_id, "p"),
    ]
    driver.ok("mute", selector={"provider_id": "p"})
    reply = driver.ok("render", turn=3)
    assert reply["envelope"]["directive_ids"] == [own]
    assert reply["summary"]["muted_ids"] == [result.reminder_id]


def test_the_per_turn_provider_budget_counts_exactly_the_bodies_of_that_turn() -> None:
    driver = Driver()
    evaluated(driver, fired("bb"), fired("ccc", "q"))
    providers = driver.state.providers
    assert providers is not None
    assert (providers.budget_turn, providers.budget_bytes) == (3, 5)
    evaluated(driver, fired("ddddddd"), turn=4, runtime_event_id="rt2")
    providers = driver.state.providers
    assert providers is not None
    assert (providers.budget_turn, providers.budget_bytes) == (4, 7)


def test_a_fired_evaluation_whose_reminder_is_not_live_still_folds() -> None:
    # This build never writes one (the reminder goes live in the same batch), but the fold
    # must read any log that decodes, an edited one or an older build's included: it counts
    # the fire and no body bytes.
    driver = Driver()
    evaluated(driver, fired("bb"))
    injected, recorded = driver.log
    payload = recorded.payload
    assert isinstance(payload, ProviderEvaluated)
    elsewhere = payload.model_copy(update={"reminder_id": "not-live"})
    log: list[Event] = [injected, recorded.model_copy(update={"payload": elsewhere})]
    state = fold_all(SessionState(), log)
    assert state.providers is not None
    assert (state.providers.budget_bytes, state.providers.marks["p"].fired_count) == (0, 1)
    assert [row.provider_id for row in state.pending] == [None]

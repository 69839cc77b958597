"""Behaviour that mutation testing of the split core (`core/deciders/`, `core/fold.py`,
`core/canonical.py`) showed no other unit test pins down (docs/mutation-testing.md)."""

from __future__ import annotations

from typing import Any

from contracts.events import ProviderEvaluated
from contracts.spec import ReminderSpec, ResolvedSpec
from contracts.state import DeliveredDigest, DeliveredEnvelope, PendingRow, SessionState
from contracts.stored import read_stored
from core import CoreConfig, fold
from core.canonical import canonical_bytes, canonical_json, derived_uuid7
from core.projection import project_all
from core.rules import compact_dedupe, rebuilt_reply, reply_op, unchanged_durable
from core.size import FULL_ENVELOPE_TEXT_BYTES, spec_bytes
from tests.support import Driver, context_for, session_log, stored
from tests.unit.test_mutation_gaps import inherit_into
from tests.unit.test_rules_mutation_gaps import applied, degraded_copy_of


def evaluation(provider_id: str = "p", **fields: Any) -> dict[str, Any]:
    return {"provider_id": provider_id, "event": "budget", **fields}


def evaluate(driver: Driver, *evaluations: dict[str, Any], event_id: str = "rt") -> list[Any]:
    decision = driver.run(
        "evaluate", turn=3, runtime_event_id=event_id, evaluations=list(evaluations)
    )
    assert decision.ok, decision.reply
    return [e.payload for e in decision.events if isinstance(e.payload, ProviderEvaluated)]


def test_a_fired_evaluation_without_a_reminder_is_malformed_spec() -> None:
    (result,) = evaluate(Driver(), evaluation(fired=True, reason="fired"))
    assert (result.reason, result.error, result.fired) == (
        "malformed_spec",
        "HARN-RMD-006 a fired evaluation carries no reminder",
        False,
    )


def test_an_evaluation_that_did_not_fire_cannot_claim_it_fired() -> None:
    (result,) = evaluate(Driver(), evaluation(fired=False, reason="fired"))
    assert (result.reason, result.error) == ("provider_error", "an evaluation that did not fire")


def test_one_provider_firing_twice_in_one_event_gets_two_reminders() -> None:
    driver = Driver()
    fire = evaluation(fired=True, reason="fired", reminder={"body": "b", "dedupe_key": None})
    results = evaluate(driver, fire, {**fire, "reminder": {"body": "c"}})
    assert [r.reason for r in results] == ["fired", "fired"]
    assert len({r.reminder_id for r in results}) == 2 and len(driver.state.pending) == 2


def test_a_refused_evaluation_records_the_level_the_log_holds() -> None:
    driver = Driver()
    fire = evaluation(fired=True, reason="fired", once=True, level=5, reminder={"body": "b"})
    assert evaluate(driver, fire)[0].reason == "fired"
    (again,) = evaluate(driver, {**fire, "level": 7}, event_id="rt2")
    assert (again.reason, again.level) == ("once_latched", 5)


def test_the_fold_counts_evaluations_and_records_the_turn_a_provider_last_fired() -> None:
    driver = Driver()
    evaluate(driver, evaluation(fired=True, reason="fired", reminder={"body": "b"}))
    evaluate(driver, evaluation("q", fired=False, reason="predicate_false"), event_id="rt2")
    providers = driver.state.providers
    assert providers is not None and providers.evaluations == 2
    assert providers.marks["p"].last_fired_turn == 3


def test_a_float_with_an_exponent_is_written_the_canonical_way() -> None:
    for value in (
        {"x": 1e20},
        {"x": 1.5e-7},
        {"a": "e+", "b": 1e20, "c": "e+ e+"},
        {"a": "the.", "b": 2.5},
    ):
        assert canonical_bytes(value) == canonical_json(value).encode("utf-8"), value


def test_inherit_takes_a_reminder_that_fills_the_child_budget_exactly() -> None:
    parent = Driver("parent")
    parent.inject("from parent", id="p", propagate="all")
    handoff = parent.run("handoff", child_session_id="child").events[0]
    probe = Driver("child")
    inherit_into(probe, handoff)
    size = spec_bytes(probe.state.pending[0].spec)
    exact = Driver("child", config=CoreConfig(max_session_bytes=size))
    assert inherit_into(exact, handoff)["inherited_ids"] == ["p"]
    short = Driver("child", config=CoreConfig(max_session_bytes=size - 1))
    assert inherit_into(short, handoff)["skipped_ids"] == ["p"]


def test_a_durable_reminder_is_unchanged_only_with_the_same_key_and_body() -> None:
    def durable(body: str, key: str) -> Any:
        spec = ReminderSpec(body=body, dedupe_key=key, preserve_on_compact=True)
        return ResolvedSpec.resolve(spec, id=f"{key}-{body}", fired_at_turn=0)

    live = [
        PendingRow(
            spec=durable("same", "k1"),
            ttl_remaining=None,
            delivered=False,
            delivered_at_turn=None,
            audit_only=False,
        )
    ]
    assert unchanged_durable(live, durable("same", "k1"))
    assert not unchanged_durable(live, durable("same", "k2"))
    assert not unchanged_durable(live, durable("other", "k1"))
    # The same key and body with a TTL is no durable reminder: it is injected again.
    with_ttl = ReminderSpec(body="same", dedupe_key="k1", preserve_on_compact=True, ttl_turns=3)
    assert not unchanged_durable(live, with_ttl)


def test_fold_records_the_stream_sequence_it_is_given() -> None:
    driver = Driver()
    driver.inject("x")
    assert fold(SessionState(), driver.log[0], 7).stream_seq == 7


def test_project_all_keeps_the_state_a_first_poison_message_degrades() -> None:
    state = applied(stored(session_log())[:2])
    unreadable = read_stored(b"{not json", 9, "transcript.reminder.fired.s1")
    after, _ = project_all(state, [unreadable])
    degraded_copy_of(state, after, 9, "undecodable")


def test_a_reply_of_no_known_command_has_no_op() -> None:
    assert reply_op({"ok": True, "session_seq": 1}) is None


def test_a_fired_reminder_without_an_id_gets_one_derived_from_event_provider_and_place() -> None:
    driver = Driver()
    skipped = evaluation("p", fired=False, reason="below_threshold")
    fired = evaluation("q", fired=True, reason="fired", reminder={"body": "hello"})
    decision = driver.run(
        "evaluate", turn=3, runtime_event_id="rt", view_seq=0, evaluations=[skipped, fired]
    )
    expected = derived_uuid7(context_for(1).occurred_at, "provider", "rt", "q", "1")
    assert decision.reply["injected_ids"] == [expected]
    results = [e.payload for e in decision.events if isinstance(e.payload, ProviderEvaluated)]
    assert [(r.provider_id, r.reminder_id, r.view_seq) for r in results] == [
        ("p", None, 0),
        ("q", expected, 0),
    ]


def test_a_fired_reminder_over_the_body_bound_is_malformed_spec_naming_the_bound() -> None:
    driver = Driver(config=CoreConfig(max_body_bytes=10))
    fired = evaluation(fired=True, reason="fired", reminder={"body": "x" * 20})
    (result,) = evaluate(driver, fired)
    assert (result.reason, result.error) == (
        "malformed_spec",
        "too_large body is 20 bytes; the bound is 10",
    )


def test_a_fired_reminder_s_refusal_is_cut_at_1024_characters() -> None:
    unknown = {f"k{i:04d}": 1 for i in range(300)}
    fired = evaluation(fired=True, reason="fired", reminder={"body": "x", **unknown})
    (result,) = evaluate(Driver(), fired)
    assert result.reason == "malformed_spec"
    assert result.error.startswith("HARN-RMD-001 unknown option(s): k0000, ")
    assert len(result.error) == 1024


def test_a_fired_evaluation_marks_only_its_reminder_and_spends_only_its_body() -> None:
    driver = Driver()
    other = driver.inject("not from a provider")
    body = "from the provider"
    before = driver.state
    decision = driver.run(
        "evaluate",
        turn=3,
        runtime_event_id="rt",
        evaluations=[evaluation("p", fired=True, reason="fired", reminder={"body": body})],
    )
    assert decision.ok, decision.reply
    (fired_id,) = decision.reply["injected_ids"]
    marked = {row.spec.id: row.provider_id for row in driver.state.pending}
    assert marked == {other: None, fired_id: "p"}
    assert driver.state.providers is not None
    assert driver.state.providers.budget_bytes == len(body)
    # Folded without its `injected` event (no live reminder of that id), it spends nothing.
    (evaluated,) = [e for e in decision.events if isinstance(e.payload, ProviderEvaluated)]
    alone = fold(before, evaluated)
    assert alone.providers is not None
    assert (alone.providers.budget_bytes, alone.providers.marks["p"].fired_count) == (0, 1)


def test_compaction_keeps_the_newest_of_three_rows_of_one_key_and_drops_both_older() -> None:
    def row(body: str, key: str) -> PendingRow:
        spec = ReminderSpec(body=body, dedupe_key=key, preserve_on_compact=True)
        return PendingRow(
            spec=ResolvedSpec.resolve(spec, id=body, fired_at_turn=0),
            ttl_remaining=None,
            delivered=False,
            delivered_at_turn=None,
            audit_only=True,
        )

    first, second, other, third = row("a", "k"), row("b", "k"), row("c", "j"), row("d", "k")
    (group,) = compact_dedupe([first, second, other, third])
    assert (group.survivor, group.dropped) == (third, (first, second))


def test_a_remembered_render_reply_takes_back_the_text_of_its_own_turn_and_ids() -> None:
    def delivered(turn: int, text: str) -> DeliveredEnvelope:
        return DeliveredEnvelope(
            turn_number=turn,
            speaker="harness",
            directive_ids=["a"],
            text=text,
            format="context-directives",
            nonce=None,
        )

    reply = {"op": "render", "envelope": {"turn_number": 0, "directive_ids": ["a"]}}
    history = [delivered(0, "turn 0"), delivered(1, "turn 1")]
    rebuilt = rebuilt_reply(reply, history)
    assert rebuilt is not None and rebuilt["envelope"]["text"] == "turn 0"
    # A reply that still holds its text is answered as it is, history or none.
    whole = {"op": "render", "envelope": {"text": "kept", "turn_number": 5, "directive_ids": []}}
    assert rebuilt_reply(whole, []) == whole


def test_envelopes_whose_texts_fill_the_full_text_budget_exactly_are_both_kept_in_full() -> None:
    driver = Driver()
    driver.inject("x")
    (delivered,) = [e for e in driver.run("render", turn=0).events if e.kind == "delivered"]
    half = FULL_ENVELOPE_TEXT_BYTES // 2

    def with_text(text: str) -> Any:
        payload = delivered.payload.model_copy(update={"text": text})
        return delivered.model_copy(update={"payload": payload})

    before = fold(SessionState(), with_text("a" * half))
    exact = fold(before, with_text("b" * (FULL_ENVELOPE_TEXT_BYTES - half)))
    assert [type(row) for row in exact.delivered] == [DeliveredEnvelope, DeliveredEnvelope]
    over = fold(before, with_text("b" * (FULL_ENVELOPE_TEXT_BYTES - half + 1)))
    assert [type(row) for row in over.delivered] == [DeliveredDigest, DeliveredEnvelope]

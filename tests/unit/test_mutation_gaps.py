"""Behaviour that mutation testing of `core/` showed no other unit test pins down.

Each test names the outcome it guards; docs/mutation-testing.md says how the gaps were found.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from contracts.events import Compacted, Delivered, Expired, Fired, HandedOff, Inherited, Injected
from contracts.spec import ReminderSpec, ResolvedSpec
from contracts.state import DegradedMark, PendingRow, SessionState
from core import CommandContext, CoreConfig, fold, fold_all, handle, sha256_hex
from core.canonical import (
    chain_link,
    derived_uuid7,
    epoch_millis,
    event_subject,
    links,
    session_subject_filter,
    session_token,
    uuid7_text,
)
from core.render import context_directives_text, inline_placement, speaker_for
from core.rules import fired_by
from tests.support import Driver


def inherit_into(child: Driver, handoff: Any, parent_agent: str = "parent-agent") -> dict[str, Any]:
    """What the propagator sends the child for one `handed_off` event (reply, accepted)."""
    payload = handoff.payload
    assert isinstance(payload, HandedOff)
    return child.ok(
        "inherit",
        parent_session_id=handoff.session_id,
        parent_agent_id=parent_agent,
        handoff_event_id=handoff.event_id,
        sub_agent_id=payload.sub_agent_id,
        reminders=[spec.model_dump(mode="json") for spec in payload.reminders],
    )


# --- compaction (§4.8) ---------------------------------------------------------------------


def test_compaction_counts_every_unpreserved_reminder_it_expires() -> None:
    driver = Driver()
    gone = [driver.inject(f"gone {n}", ttl_turns=5) for n in range(3)]
    kept = driver.inject("kept", preserve_on_compact=True)
    decision = driver.run("compact", turn=0)
    assert driver.kinds(decision) == ["expired", "expired", "expired", "compacted"]
    assert [e.payload.reminder_id for e in decision.events[:3]] == gone  # type: ignore[union-attr]
    assert decision.reply["compacted_count"] == 3
    assert decision.reply["preserved_count"] == 1
    assert driver.pending_ids() == [kept]
    assert driver.state.compactions == 1


def test_compaction_expiry_reports_the_ttl_after_the_compaction_turns_decrement() -> None:
    driver = Driver()
    driver.inject("three turns", ttl_turns=3)
    decision = driver.run("compact", turn=0)
    expired = decision.events[0].payload
    assert isinstance(expired, Expired)
    assert (expired.reason, expired.ttl_turns_before) == ("compaction", 2)
    assert (expired.expired_at_turn, expired.expired_at_boundary) == (0, "pre_compact")


def test_compaction_at_an_already_ended_turn_does_not_run_the_ttl_pass_again() -> None:
    driver = Driver()
    kept = driver.inject("kept", ttl_turns=3, preserve_on_compact=True)
    driver.inject("short", ttl_turns=1, preserve_on_compact=True)
    driver.inject("plain", ttl_turns=4)
    driver.ok("end_turn", turn=0)  # "short" expires, "kept" goes to 2, "plain" to 3
    decision = driver.run("compact", turn=0)
    assert driver.kinds(decision) == ["expired", "compacted"]
    expired = decision.events[0].payload
    assert isinstance(expired, Expired)
    assert expired.ttl_turns_before == 3  # not lowered a second time for turn 0
    compacted = decision.events[-1].payload
    assert isinstance(compacted, Compacted)
    assert compacted.decremented_ids == []
    assert decision.reply["expired_count"] == 0
    assert driver.pending_ids() == [kept]
    assert driver.state.pending[0].ttl_remaining == 2


def test_compaction_at_a_new_turn_runs_the_ttl_pass_first() -> None:
    driver = Driver()
    driver.inject("kept", ttl_turns=3, preserve_on_compact=True)
    driver.inject("last turn", ttl_turns=1, preserve_on_compact=True)
    driver.ok("end_turn", turn=0)
    decision = driver.run("compact", turn=1)
    assert decision.reply["expired_count"] == 0  # "last turn" already expired at turn 0
    assert driver.state.pending[0].ttl_remaining == 1
    assert driver.state.last_ended_turn == 1


def test_compaction_at_an_older_turn_does_not_move_the_last_ended_turn_back() -> None:
    driver = Driver()
    driver.inject("kept", ttl_turns=5, preserve_on_compact=True)
    driver.ok("end_turn", turn=3)
    driver.ok("compact", turn=1)
    assert driver.state.last_ended_turn == 3
    assert driver.state.pending[0].ttl_remaining == 4
    # The turn-3 TTL pass is still not repeated.
    assert driver.run("end_turn", turn=3).reply["already_applied"] is True


def test_compaction_reports_how_many_delivered_directives_it_cleared() -> None:
    driver = Driver()
    driver.inject("a", preserve_on_compact=True)
    driver.inject("b", preserve_on_compact=True)
    driver.ok("render", turn=0)
    driver.inject("c", preserve_on_compact=True)
    driver.ok("render", turn=0)
    reply = driver.ok("compact", turn=0)
    assert reply["directives_cleared"] == 3
    assert driver.state.delivered == []
    # Preserved reminders are re-issued: all three render again after compaction.
    assert len(driver.ok("render", turn=1)["envelope"]["directive_ids"]) == 3


# --- the envelope cap (§4.6) ---------------------------------------------------------------


def one_directive_envelope_bytes(body: str, config: CoreConfig) -> int:
    """UTF-8 size of a context-directives envelope holding only `body`."""
    driver = Driver(config=config)
    driver.inject(body)
    return len(driver.ok("render", turn=0)["envelope"]["text"].encode("utf-8"))


def test_an_envelope_of_exactly_the_cap_is_rendered() -> None:
    base = CoreConfig(instructions="")
    size = one_directive_envelope_bytes("fits exactly", base)
    driver = Driver(config=base.model_copy(update={"max_envelope_bytes": size}))
    rid = driver.inject("fits exactly")
    envelope = driver.ok("render", turn=0)["envelope"]
    assert envelope["directive_ids"] == [rid]
    assert len(envelope["text"].encode("utf-8")) == size


def test_an_envelope_one_byte_over_the_cap_is_not_rendered() -> None:
    base = CoreConfig(instructions="")
    size = one_directive_envelope_bytes("one byte too many", base)
    driver = Driver(config=base.model_copy(update={"max_envelope_bytes": size - 1}))
    rid = driver.inject("one byte too many")
    assert driver.ok("render", turn=0)["envelope"] is None
    assert driver.pending_ids() == [rid]
    assert driver.state.pending[0].delivered is False


def test_an_oversized_directive_after_one_that_fits_ends_the_envelope() -> None:
    driver = Driver(config=CoreConfig(instructions="", max_envelope_bytes=200))
    driver.inject("first", id="first")
    driver.inject("x" * 300, id="huge")
    driver.inject("third", id="third")
    first = driver.ok("render", turn=0)["envelope"]
    # The envelope is the longest fitting prefix: "third" waits behind the oversized one.
    assert first["directive_ids"] == ["first"]
    second = driver.ok("render", turn=0)["envelope"]
    assert second["directive_ids"] == ["third"]
    assert driver.pending_ids() == ["first", "huge", "third"]


def test_a_system_reminder_envelope_is_capped_in_utf8_bytes_too() -> None:
    driver = Driver(config=CoreConfig(max_envelope_bytes=120))
    driver.inject("é" * 30, id="a", dedupe_key="a")
    driver.inject("é" * 30, id="b", dedupe_key="b", authority="advisory")
    envelope = driver.ok("render", turn=0, format="system-reminder")["envelope"]
    # Each block is 60 UTF-8 bytes of body (30 characters) plus its tags.
    assert envelope["directive_ids"] == ["a"]
    assert len(envelope["text"].encode("utf-8")) <= 120


# --- handoff and inherit (§4.9) ------------------------------------------------------------


def test_a_handed_off_reminder_fires_from_the_childs_current_turn() -> None:
    parent = Driver("parent")
    rid = parent.inject("carry on", propagate="all")
    decision = parent.run("handoff", child_session_id="child", child_turn=4)
    payload = decision.events[0].payload
    assert isinstance(payload, HandedOff)
    assert payload.reminders[0].fired_at_turn == 4
    child = Driver("child")
    inherit_into(child, decision.events[0])
    assert child.state.pending[0].spec.fired_at_turn == 4
    assert child.ok("render", turn=3)["envelope"] is None
    assert child.ok("render", turn=4)["envelope"]["directive_ids"] == [rid]


def test_a_handoff_carries_the_remaining_ttl_and_the_first_emitter() -> None:
    parent = Driver("parent")
    parent.inject("mine", propagate="all", ttl_turns=3)
    parent.inject("theirs", propagate="all", originating_agent_id="grandparent")
    parent.ok("end_turn", turn=0)
    payload = parent.run("handoff", child_session_id="child").events[0].payload
    assert isinstance(payload, HandedOff)
    assert [spec.ttl_turns for spec in payload.reminders] == [2, None]
    assert [spec.originating_agent_id for spec in payload.reminders] == ["parent", "grandparent"]
    assert {spec.source for spec in payload.reminders} == {"inherited"}
    assert payload.sub_agent_id == "child"  # defaults to the child session


def test_inherit_counts_queued_reminders_against_a_full_child() -> None:
    parent = Driver("parent")
    parent.inject("from parent", id="p", propagate="all")
    handoff = parent.run("handoff", child_session_id="child").events[0]
    child = Driver("child", config=CoreConfig(max_live=2))
    child.inject("live", id="live")
    child.inject("queued", id="queued", mode="steer")
    reply = inherit_into(child, handoff)
    assert (reply["inherited_ids"], reply["skipped_ids"]) == ([], ["p"])
    assert child.pending_ids() == ["live"]
    assert child.queued_ids() == ["queued"]


def test_inherit_into_a_full_child_replaces_a_live_reminder_with_the_same_dedupe_key() -> None:
    parent = Driver("parent")
    parent.inject("parent budget", id="p", propagate="all", dedupe_key="budget")
    parent.inject("parent extra", id="x", propagate="all")
    handoff = parent.run("handoff", child_session_id="child").events[0]
    child = Driver("child", config=CoreConfig(max_live=2))
    child.inject("child budget", id="own", dedupe_key="budget")
    child.inject("queued", id="queued", mode="steer")
    before = len(child.log)
    reply = inherit_into(child, handoff)
    assert (reply["inherited_ids"], reply["skipped_ids"]) == (["p"], ["x"])
    assert [event.kind for event in child.log[before:]] == ["deduped", "injected", "inherited"]
    assert child.pending_ids() == ["p"]
    assert child.queued_ids() == ["queued"]


def test_an_audit_only_row_with_the_same_key_does_not_make_room_in_a_full_child() -> None:
    parent = Driver("parent")
    parent.inject("parent budget", id="p", propagate="all", dedupe_key="budget")
    handoff = parent.run("handoff", child_session_id="child").events[0]
    child = Driver("child", config=CoreConfig(max_live=1))
    child.inject("audit budget", id="audit", dedupe_key="budget", mode="audit_only")
    child.ok("checkpoint", seam="loop_exit", turn=0)
    reply = inherit_into(child, handoff)
    assert (reply["inherited_ids"], reply["skipped_ids"]) == ([], ["p"])
    assert child.pending_ids() == ["audit"]


def test_inherit_skips_a_reminder_without_an_id_and_one_listed_twice() -> None:
    child = Driver("child")
    reply = child.ok(
        "inherit",
        parent_session_id="parent",
        parent_agent_id="pa",
        handoff_event_id="h1",
        sub_agent_id="child",
        reminders=[{"body": "no id"}, {"body": "twice", "id": "t"}, {"body": "again", "id": "t"}],
    )
    assert (reply["inherited_ids"], reply["skipped_ids"]) == (["t"], ["", "t"])
    assert child.pending_ids() == ["t"]
    inherited = child.log[-1].payload
    assert isinstance(inherited, Inherited)
    assert inherited.originating_agent_id == "pa"


def test_an_inherited_reminder_keeps_the_first_emitter_over_the_parent_agent() -> None:
    child = Driver("child")
    child.ok(
        "inherit",
        parent_session_id="parent",
        parent_agent_id="pa",
        handoff_event_id="h1",
        sub_agent_id="child",
        reminders=[{"body": "b", "id": "r", "originating_agent_id": "first"}],
    )
    inherited = child.log[-1].payload
    assert isinstance(inherited, Inherited)
    assert inherited.originating_agent_id == "first"
    assert child.state.pending[0].spec.originating_agent_id == "first"
    assert child.state.pending[0].spec.source == "inherited"


# --- the session nonce (§5.1) --------------------------------------------------------------


def test_without_a_candidate_the_nonce_is_derived_from_the_command_id() -> None:
    config = CoreConfig(nonce_enabled=True, instructions="")
    state = SessionState()
    context = CommandContext(
        command_id="cmd-1", occurred_at="2026-11-29T00:00:00.000Z", new_reminder_id="r1"
    )
    first = handle(state, "inject", {"session_id": "s", "reminder": {"body": "b"}}, context, config)
    state = fold_all(state, first.events)
    render_context = context.model_copy(update={"command_id": "cmd-2"})
    decision = handle(state, "render", {"session_id": "s", "turn": 0}, render_context, config)
    assert decision.ok, decision.reply
    derived = sha256_hex("nonce\ncmd-2")[:16]
    assert decision.events[-1].payload.nonce == derived  # type: ignore[union-attr]
    assert decision.reply["envelope"]["text"].startswith(
        f'<context-directives speaker="harness" nonce="{derived}">'
    )
    # Deciding again gives the same nonce: replay reproduces it.
    again = handle(state, "render", {"session_id": "s", "turn": 0}, render_context, config)
    assert again.events == decision.events
    assert fold_all(state, decision.events).nonce == derived


def test_without_a_nonce_configured_the_tag_has_no_nonce() -> None:
    assert context_directives_text([], "person", "", None) == (
        '<context-directives speaker="person">\n</context-directives>'
    )


# --- handle's guard and the event envelope (§3) --------------------------------------------


def test_handle_refuses_a_command_for_another_session_once_the_state_has_events() -> None:
    driver = Driver("mine")
    driver.inject("only one event")
    assert driver.state.session_seq == 1
    context = CommandContext(
        command_id="c", occurred_at="2026-11-29T00:00:00.000Z", new_reminder_id="r"
    )
    decision = handle(
        driver.state, "inject", {"session_id": "theirs", "reminder": {"body": "x"}}, context
    )
    assert decision.events == ()
    assert decision.reply["ok"] is False
    assert decision.reply["error"]["code"] == "invalid_request"
    assert "another session" in decision.reply["error"]["message"]


def test_handle_accepts_any_session_on_an_empty_state() -> None:
    context = CommandContext(
        command_id="c", occurred_at="2026-11-29T00:00:00.000Z", new_reminder_id="r"
    )
    raw = {"session_id": "fresh", "reminder": {"body": "x"}}
    decision = handle(SessionState(), "inject", raw, context)
    assert decision.ok, decision.reply
    assert decision.events[0].session_id == "fresh"


def test_every_event_carries_the_commands_task_id_and_agent_id() -> None:
    driver = Driver()
    driver.ok("inject", reminder={"body": "a", "dedupe_key": "k"}, task_id="t1", agent_id="ag")
    decision = driver.run(
        "inject", reminder={"body": "b", "dedupe_key": "k"}, task_id="t2", agent_id="ag"
    )
    assert driver.kinds(decision) == ["deduped", "injected"]
    assert {(event.task_id, event.agent_id) for event in decision.events} == {("t2", "ag")}
    plain = driver.run("end_turn", turn=0)
    assert (plain.events[0].task_id, plain.events[0].agent_id) == (None, "s1")


def test_injected_and_fired_events_record_the_originating_agent() -> None:
    driver = Driver()
    driver.inject("from afar", originating_agent_id="origin")
    injected = driver.log[-1].payload
    assert isinstance(injected, Injected)
    assert injected.originating_agent_id == "origin"
    decision = driver.run("render", turn=0)
    fired = decision.events[0].payload
    assert isinstance(fired, Fired)
    assert fired.originating_agent_id == "origin"


def test_an_id_inherited_then_deduped_in_the_same_batch_is_not_inherited_twice() -> None:
    child = Driver("child")
    reply = child.ok(
        "inherit",
        parent_session_id="parent",
        parent_agent_id="pa",
        handoff_event_id="h1",
        sub_agent_id="child",
        reminders=[
            {"body": "old budget", "id": "a", "dedupe_key": "k"},
            {"body": "new budget", "id": "b", "dedupe_key": "k"},
            {"body": "old budget again", "id": "a"},
        ],
    )
    assert (reply["inherited_ids"], reply["skipped_ids"]) == (["a", "b"], ["a"])
    assert child.pending_ids() == ["b"]


# --- subjects and derived ids (§3) ---------------------------------------------------------


def test_a_plain_session_id_is_its_own_subject_token() -> None:
    assert session_token("s1") == "s1"
    assert session_token("A-z_9" * 12 + "abcd") == "A-z_9" * 12 + "abcd"  # 64 characters


def test_any_other_session_id_becomes_an_equals_sign_and_forty_hex_digits() -> None:
    for session_id in ("has.dot", "has space", "x" * 65, "ünï"):
        token = session_token(session_id)
        assert token == "=" + sha256_hex(session_id)[:40]
        assert len(token) == 41
    assert event_subject("fired", "a.b") == "transcript.reminder.fired." + session_token("a.b")
    assert session_subject_filter("a.b") == "transcript.reminder.*." + session_token("a.b")
    assert session_subject_filter("s1") == "transcript.reminder.*.s1"


def test_a_derived_event_id_is_a_uuid7_stamped_with_the_decision_time() -> None:
    occurred_at = "2026-11-29T15:04:05.123Z"
    value = uuid.UUID(derived_uuid7(occurred_at, "cmd", "s1", "1"))
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert int.from_bytes(value.bytes[:6], "big") == epoch_millis(occurred_at)
    expected = datetime(2026, 11, 29, 15, 4, 5, 123000, tzinfo=UTC)
    assert epoch_millis(occurred_at) == round(expected.timestamp() * 1000)
    assert epoch_millis("2026-11-29T16:04:05.123+01:00") == epoch_millis(occurred_at)
    assert derived_uuid7(occurred_at, "cmd", "s1", "1") == str(value)
    assert derived_uuid7(occurred_at, "cmd", "s1", "2") != str(value)
    assert derived_uuid7(occurred_at, "cmd", "s1\n1") == str(value)  # seeds joined by newline
    seed_bits = hashlib.sha256(b"cmd\ns1\n1").digest()[:16]
    assert value.bytes[7:8] == seed_bits[7:8]
    assert value.bytes[9:] == seed_bits[9:]
    assert value.bytes[6] & 0x0F == seed_bits[6] & 0x0F
    assert value.bytes[8] & 0x3F == seed_bits[8] & 0x3F


@settings(max_examples=200)
@given(
    millis=st.integers(min_value=0, max_value=253_402_300_799_000),  # up to the year 9999
    seed=st.lists(
        st.text(st.characters(exclude_categories=("Cs",)), max_size=12), min_size=1, max_size=4
    ),
)
def test_a_derived_event_id_is_uuid7_text_of_the_digests_bits(millis: int, seed: list[str]) -> None:
    # `derived_uuid7` sets the version and variant on the digest's bytes in place; the ids
    # it made before did the same through `uuid7_text` and big integers.
    occurred_at = datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds")
    digest = hashlib.sha256("\n".join(seed).encode("utf-8")).digest()
    rand_a = int.from_bytes(digest[6:8], "big") & 0xFFF
    rand_b = int.from_bytes(digest[8:16], "big") & 0x3FFF_FFFF_FFFF_FFFF
    before = uuid7_text(epoch_millis(occurred_at), (rand_a << 68 | rand_b).to_bytes(10, "big"))
    assert derived_uuid7(occurred_at, *seed) == before


def test_links_accepts_the_next_envelope_and_rejects_a_changed_one() -> None:
    body = {"kind": "injected", "session_seq": 1}
    envelope = {**body, "chain": chain_link("", body)}
    assert links("", envelope)
    assert not links("other", envelope)
    assert not links("", {**envelope, "session_seq": 2})
    assert not links("", body)


# --- rejections carry a stable code, a message naming the field, and details (§2.2) ---------


def rejection(driver: Driver, op: str, **fields: Any) -> dict[str, Any]:
    """The error body of a rejected command (which appends nothing)."""
    driver.error(op, **fields)
    decision = driver.run(op, **fields)
    error: dict[str, Any] = decision.reply["error"]
    return error


def test_an_inherited_source_on_inject_is_rejected_naming_the_field() -> None:
    error = rejection(Driver(), "inject", reminder={"body": "b", "source": "inherited"})
    assert error["code"] == "HARN-RMD-001"
    assert error["details"] == {"field": "source"}
    assert error["message"].startswith("invalid source: ")  # the project's field convention


def test_a_live_or_queued_id_on_inject_is_rejected_naming_the_field() -> None:
    driver = Driver()
    driver.inject("queued", id="q", mode="steer")
    driver.inject("live", id="l")
    for taken in ("q", "l"):
        error = rejection(driver, "inject", reminder={"body": "again", "id": taken})
        assert (error["code"], error["details"]) == ("HARN-RMD-001", {"field": "id"})
        assert error["message"].startswith("invalid id: ")


def test_too_many_names_the_bound_and_how_many_the_session_holds() -> None:
    driver = Driver(config=CoreConfig(max_live=2))
    driver.inject("one")
    driver.inject("two", mode="steer")
    error = rejection(driver, "inject", reminder={"body": "three"})
    assert (error["code"], error["details"]) == ("too_many", {"limit": 2})
    assert "2 live or queued" in error["message"]


def test_a_stale_turn_names_the_turn_and_the_highest_turn_seen() -> None:
    driver = Driver()
    driver.ok("end_turn", turn=5)
    for op in ("render", "checkpoint"):
        fields: dict[str, Any] = {"turn": 4}
        if op == "checkpoint":
            fields["seam"] = "iteration_start"
        error = rejection(driver, op, **fields)
        assert (error["code"], error["details"]) == ("stale_turn", {"turn": 4, "highest_turn": 5})
        assert "4" in error["message"] and "5" in error["message"]
    assert driver.ok("render", turn=5)["envelope"] is None


def test_revoking_a_delivered_or_unknown_reminder_names_it() -> None:
    driver = Driver()
    drained = driver.inject("drained", id="d", mode="steer")
    driver.ok("checkpoint", seam="iteration_start", turn=0)
    error = rejection(driver, "revoke", reminder_id=drained)
    assert (error["code"], error["details"]) == ("already_delivered", {"reminder_id": "d"})
    error = rejection(driver, "revoke", reminder_id="never")
    assert (error["code"], error["details"]) == ("unknown_reminder_id", {"reminder_id": "never"})


def test_a_handoff_to_itself_names_the_child_session_field() -> None:
    error = rejection(Driver("s"), "handoff", child_session_id="s")
    assert (error["code"], error["details"]) == ("invalid_request", {"field": "child_session_id"})
    assert error["message"].startswith("invalid child_session_id: ")


def test_a_command_the_core_does_not_decide_is_an_invalid_request_naming_the_op() -> None:
    context = CommandContext(
        command_id="c", occurred_at="2026-11-29T00:00:00.000Z", new_reminder_id="r"
    )
    decision = handle(SessionState(), "state", {"session_id": "s"}, context)
    assert decision.events == ()
    assert decision.reply["error"]["code"] == "invalid_request"
    assert decision.reply["error"]["message"].startswith("state ")


# --- render helpers called on their own (§5) -----------------------------------------------


def test_a_reminder_renders_from_its_fired_at_turn_on_and_not_before() -> None:
    # The core resolves every stored spec (ResolvedSpec: id and fired_at_turn required), so
    # the former `fired_at(spec) or 0` fallback is gone; what is left to pin is the bound.
    spec = ResolvedSpec.resolve(ReminderSpec(body="later"), id="r", fired_at_turn=3)
    row = PendingRow(
        spec=spec, ttl_remaining=None, delivered=False, delivered_at_turn=None, audit_only=False
    )
    assert [fired_by(row, turn) for turn in (2, 3, 4)] == [False, True, True]
    with pytest.raises(ValidationError):
        ResolvedSpec.model_validate({"body": "unresolved", "id": "r"})


def test_no_directives_means_the_harness_speaks() -> None:
    assert speaker_for([]) == "harness"


def test_the_inline_range_is_a_pair_of_integers() -> None:
    _, span = inline_placement("h\u00e9llo \U0001f44b", "<x/>")
    assert span == [10, 14]
    assert [type(offset) for offset in span] == [int, int]


def test_folding_and_deciding_keep_a_sessions_degraded_mark() -> None:
    driver = Driver()
    driver.inject("before the poison message")
    mark = DegradedMark(stream_seq=7, code="invalid_event")
    driver.state = driver.state.model_copy(update={"degraded": mark})
    driver.inject("after it")
    assert driver.state.degraded == mark


def test_a_sessions_nonce_is_the_first_one_delivered_and_a_later_one_does_not_replace_it() -> None:
    driver = Driver(config=CoreConfig(nonce_enabled=True))
    driver.inject("a")
    delivered = driver.run("render", turn=0).events[-1]
    assert isinstance(delivered.payload, Delivered)
    first = delivered.payload.nonce
    assert first is not None and driver.state.nonce == first
    # decide always reuses the session nonce; fold must not let a later event change it.
    later = delivered.model_copy(
        update={"payload": delivered.payload.model_copy(update={"nonce": "0123456789abcdef"})}
    )
    assert fold(driver.state, later).nonce == first


def test_fold_reissues_only_the_reminders_a_compacted_event_lists_as_preserved() -> None:
    driver = Driver()
    kept = driver.inject("kept", preserve_on_compact=True)
    other = driver.inject("other", preserve_on_compact=True)
    driver.ok("render", turn=0)
    before = driver.state
    compacted = driver.run("compact", turn=0).events[-1]
    assert isinstance(compacted.payload, Compacted)
    assert compacted.payload.preserved_ids == [kept, other]
    # Fold applies what the event records, not the rule: a row it does not list stays as is.
    narrower = compacted.model_copy(
        update={"payload": compacted.payload.model_copy(update={"preserved_ids": [kept]})}
    )
    after = fold(before, narrower)
    rows = {row.spec.id: row for row in after.pending}
    assert (rows[kept].delivered, rows[kept].delivered_at_turn) == (False, None)
    assert (rows[other].delivered, rows[other].delivered_at_turn) == (True, 0)


def test_a_full_session_takes_a_dedupe_replacement_but_not_a_reminder_with_a_new_key() -> None:
    driver = Driver(config=CoreConfig(max_live=2))
    driver.inject("budget", id="old", dedupe_key="budget")
    driver.inject("queued", id="q", mode="steer")
    error = rejection(driver, "inject", reminder={"body": "x", "dedupe_key": "other"})
    assert error["code"] == "too_many"
    reply = driver.ok(
        "inject", reminder={"body": "new budget", "id": "new", "dedupe_key": "budget"}
    )
    assert reply["deduped_count"] == 1
    assert driver.pending_ids() == ["new"]

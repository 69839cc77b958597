"""Every field the rules copy into an event is validated by the model that reads it back
(SPEC §4.1.1). Regressions of issue #10: a handoff with a padded `agent_id`, or an inherit
with a blank `parent_agent_id`, copied it unvalidated as `originating_agent_id`, and the
projector dead-lettered the event."""

from __future__ import annotations

from contracts.decode import decode
from core import canonical_json
from tests.support import Driver


def _decodes(driver: Driver) -> None:
    for event in driver.log:
        decode(canonical_json(event.to_wire()).encode())


def test_a_handoff_with_a_padded_agent_id_is_refused_not_copied() -> None:
    driver = Driver()
    driver.inject("hand me down", propagate="all")
    decision = driver.run("handoff", child_session_id="child", agent_id=" padded ")
    assert not decision.ok
    assert decision.reply["error"]["code"] == "invalid_request"
    assert decision.reply["error"]["details"]["field"] == "agent_id"
    assert decision.events == ()
    _decodes(driver)


def test_a_padded_agent_id_is_fine_when_nothing_copies_it() -> None:
    driver = Driver()
    driver.inject("kept emitter", propagate="all", originating_agent_id="origin")
    reply = driver.ok("handoff", child_session_id="child", agent_id=" padded ")
    assert reply["propagated_ids"]
    _decodes(driver)


def test_an_inherit_with_a_blank_parent_agent_id_is_refused_not_copied() -> None:
    child = Driver("child")
    decision = child.run(
        "inherit",
        parent_session_id="parent",
        parent_agent_id="\u00a0",
        handoff_event_id="ev-1",
        sub_agent_id="sub",
        reminders=[{"body": "inherited", "id": "r1", "fired_at_turn": 0}],
    )
    assert not decision.ok
    assert decision.reply["error"]["code"] == "invalid_request"
    assert decision.reply["error"]["details"]["field"] == "parent_agent_id"
    assert decision.events == ()


def test_a_valid_inherit_decodes_with_the_readers_model() -> None:
    child = Driver("child")
    child.ok(
        "inherit",
        parent_session_id="parent",
        parent_agent_id="parent-agent",
        handoff_event_id="ev-1",
        sub_agent_id="sub",
        reminders=[{"body": "inherited", "id": "r1", "fired_at_turn": 0}],
    )
    _decodes(child)
    assert child.state.pending[0].spec.originating_agent_id == "parent-agent"

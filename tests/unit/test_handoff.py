"""SPEC §4.9: which reminders a handoff propagates and how the child inherits them."""

from __future__ import annotations

from typing import Any

from contracts.events import Event, HandedOff, Inherited, Injected
from contracts.state import SessionState
from core import CommandContext, CoreConfig, fold_all, handle
from core.size import spec_bytes
from tests.support import Driver


def inherit_into(
    child: Driver, handoff_event: Event, parent_agent: str = "parent-agent"
) -> dict[str, Any]:
    """What the propagator does with one `handed_off` event."""
    payload = handoff_event.payload
    assert isinstance(payload, HandedOff)
    return child.ok(
        "inherit",
        agent_id=payload.sub_agent_id,
        parent_session_id=handoff_event.session_id,
        parent_agent_id=parent_agent,
        handoff_event_id=handoff_event.event_id,
        sub_agent_id=payload.sub_agent_id,
        reminders=[spec.model_dump(mode="json") for spec in payload.reminders],
    )


def test_handoff_propagates_pending_reminders_by_their_propagate_value() -> None:
    parent = Driver("parent")
    every = parent.inject("all", propagate="all", ttl_turns=3)
    own = parent.inject("session", propagate="session")
    parent.inject("none", propagate="none")
    parent.inject("queued", propagate="all", mode="steer")
    parent.inject("audit", propagate="all", mode="queue")
    parent.ok("checkpoint", seam="loop_exit", turn=0)
    parent.ok("end_turn", turn=0)
    decision = parent.run("handoff", child_session_id="child", sub_agent_id="sub", agent_id="pa")
    assert parent.kinds(decision) == ["handed_off"]
    payload = decision.events[0].payload
    assert isinstance(payload, HandedOff)
    assert payload.propagated_ids == [every, own]
    assert decision.reply["propagated_ids"] == [every, own]
    first = payload.reminders[0]
    assert first.ttl_turns == 2  # the remaining TTL
    assert first.fired_at_turn == 0  # the child's current turn
    assert first.source == "inherited"
    assert first.originating_agent_id == "pa"
    assert (payload.child_session_id, payload.sub_agent_id) == ("child", "sub")


def test_the_child_receives_deduped_injected_and_inherited_per_reminder() -> None:
    parent = Driver("parent")
    rid = parent.inject("budget", propagate="all", dedupe_key="k", originating_agent_id="first")
    handoff = parent.run("handoff", child_session_id="child").events[0]
    child = Driver("child")
    child.inject("child's own", dedupe_key="k", id="own")
    reply = inherit_into(child, handoff)
    assert reply["inherited_ids"] == [rid]
    kinds = [event.kind for event in child.log[1:]]
    assert kinds == ["deduped", "injected", "inherited"]
    injected = child.log[2].payload
    assert isinstance(injected, Injected)
    assert (injected.reminder_id, injected.source) == (rid, "inherited")
    assert injected.originating_agent_id == "first"
    inherited = child.log[3].payload
    assert isinstance(inherited, Inherited)
    assert (inherited.parent_session_id, inherited.sub_agent_id) == ("parent", "child")
    assert inherited.propagate == "all"
    assert child.log[3].command_id == handoff.event_id
    assert child.state.inherited_from == [handoff.event_id]


def test_a_redelivered_handoff_has_no_second_effect() -> None:
    parent = Driver("parent")
    parent.inject("x", propagate="all", ttl_turns=1)
    handoff = parent.run("handoff", child_session_id="child").events[0]
    child = Driver("child")
    inherit_into(child, handoff)
    child.ok("end_turn", turn=0)  # the inherited reminder expires
    before = len(child.log)
    assert inherit_into(child, handoff)["already_applied"] is True
    assert len(child.log) == before


def test_an_id_already_live_in_the_child_is_skipped() -> None:
    parent = Driver("parent")
    parent.inject("x", propagate="all", id="shared")
    handoff = parent.run("handoff", child_session_id="child").events[0]
    child = Driver("child")
    child.inject("child copy", id="shared")
    reply = inherit_into(child, handoff)
    assert (reply["inherited_ids"], reply["skipped_ids"]) == ([], ["shared"])


def run_chain(propagate: str) -> tuple[list[str], list[str]]:
    """parent -> child -> grandchild; returns the ids live in child and grandchild."""
    parent = Driver("parent")
    parent.inject("p", propagate=propagate, id="p")
    child = Driver("child")
    inherit_into(child, parent.run("handoff", child_session_id="child").events[0])
    grandchild = Driver("grandchild")
    inherit_into(grandchild, child.run("handoff", child_session_id="grandchild").events[0])
    return child.pending_ids(), grandchild.pending_ids()


def test_session_propagation_stops_at_grandchildren_and_all_does_not() -> None:
    assert run_chain("session") == (["p"], [])
    assert run_chain("all") == (["p"], ["p"])
    assert run_chain("none") == ([], [])


def test_a_session_cannot_hand_off_to_itself() -> None:
    assert Driver("s").error("handoff", child_session_id="s") == "invalid_request"


def test_inheritance_keeps_the_parents_agent_id_when_no_originating_agent_is_set() -> None:
    parent = Driver("parent")
    parent.inject("x", propagate="all")
    handoff = parent.run("handoff", child_session_id="child").events[0]
    spec = handoff.payload.reminders[0]  # type: ignore[union-attr]
    assert spec.originating_agent_id == "parent"
    state = fold_all(
        SessionState(),
        handle(
            SessionState(),
            "inherit",
            {
                "session_id": "child",
                "parent_session_id": "parent",
                "parent_agent_id": "parent",
                "handoff_event_id": handoff.event_id,
                "sub_agent_id": "child",
                "reminders": [spec.model_dump(mode="json")],
            },
            CommandContext(
                command_id="c", occurred_at="2026-11-29T00:00:00.000Z", new_reminder_id="n"
            ),
        ).events,
    )
    assert state.pending[0].spec.originating_agent_id == "parent"


def test_inheritance_respects_the_live_bound_and_reports_what_it_skipped() -> None:
    from core import CoreConfig

    parent = Driver("parent")
    for n in range(4):
        parent.inject(f"p{n}", id=f"p{n}", propagate="all")
    handoff = parent.run("handoff", child_session_id="child").events[0]
    child = Driver("child", config=CoreConfig(max_live=3))
    child.inject("own", id="own")
    reply = inherit_into(child, handoff)
    assert reply["inherited_ids"] == ["p0", "p1"]
    assert reply["skipped_ids"] == ["p2", "p3"]
    assert len(child.state.pending) == 3


def inherit_raw(child: Driver, *reminders: dict[str, Any], parent_agent_id: str = "pa") -> Any:
    """An inherit of these raw specs into `child` (the decision, accepted or not)."""
    return child.run(
        "inherit",
        parent_session_id="parent",
        parent_agent_id=parent_agent_id,
        handoff_event_id="h1",
        sub_agent_id="child",
        reminders=list(reminders),
    )


def child_bytes(spec: dict[str, Any]) -> int:
    """The stored bytes of `spec` once inherited into an empty child."""
    probe = Driver("child")
    assert inherit_raw(probe, spec).ok
    return spec_bytes(probe.state.pending[0].spec)


def test_a_reminder_too_large_for_the_child_budget_is_skipped_and_the_next_still_comes() -> None:
    big = {"body": "x" * 500, "id": "big", "fired_at_turn": 0}
    small = {"body": "small", "id": "s", "fired_at_turn": 0}
    child = Driver("child", config=CoreConfig(max_session_bytes=child_bytes(small)))
    reply = inherit_raw(child, big, small).reply
    assert (reply["inherited_ids"], reply["skipped_ids"]) == (["s"], ["big"])


def test_an_inherited_reminder_counts_the_room_its_dedupe_victim_leaves() -> None:
    own = {"body": "the child's own words", "dedupe_key": "k", "fired_at_turn": 0}
    parents = {"body": "the parent's words", "id": "p", "dedupe_key": "k", "fired_at_turn": 0}
    probe = Driver("child")
    probe.inject(**own)
    budget = max(spec_bytes(probe.state.pending[0].spec), child_bytes(parents))
    child = Driver("child", config=CoreConfig(max_session_bytes=budget))
    child.inject(**own)
    reply = inherit_raw(child, parents).reply
    assert (reply["inherited_ids"], reply["skipped_ids"]) == (["p"], [])
    assert child.pending_ids() == ["p"]


def test_a_parent_agent_id_that_cannot_be_copied_is_refused_saying_why() -> None:
    child = Driver("child")
    decision = inherit_raw(child, {"body": "b", "id": "r1"}, parent_agent_id=" pa")
    assert not decision.ok and decision.events == ()
    assert decision.reply["error"] == {
        "code": "invalid_request",
        "message": "invalid parent_agent_id: it would be copied as originating_agent_id, which "
        "must not contain control characters nor start or end with whitespace",
        "details": {"field": "parent_agent_id"},
    }


def test_a_session_id_that_cannot_be_copied_as_the_emitter_is_refused_naming_it() -> None:
    # Without an agent id the parent's session id is the emitter copied to the child.
    parent = Driver(" parent")
    parent.inject("from parent", id="p", propagate="all")
    decision = parent.run("handoff", child_session_id="child")
    assert not decision.ok and decision.events == ()
    assert decision.reply["error"] == {
        "code": "invalid_request",
        "message": "invalid session_id: it would be copied as originating_agent_id, which must "
        "not contain control characters nor start or end with whitespace",
        "details": {"field": "session_id"},
    }

"""`handoff` and `inherit` (SPEC §4.9, the byte budget of §4.1.1): what mutation testing of
`core/deciders/handoff.py` showed no other unit test pins down
(docs/mutation-survivors-deciders-s18.md)."""

from __future__ import annotations

from contracts.events import Event
from core import CoreConfig
from core.size import spec_bytes
from tests.support import Driver
from tests.unit.test_handoff import inherit_into


def _handoff(*reminders: tuple[str, str, str | None]) -> Event:
    """A parent's `handed_off` event carrying these (id, body, dedupe key) reminders."""
    parent = Driver("parent")
    for rid, body, key in reminders:
        parent.inject(body, id=rid, propagate="all", dedupe_key=key)
    decision = parent.run("handoff", child_session_id="child")
    assert decision.ok, decision.reply
    return decision.events[0]


def _inherited_sizes(handoff: Event) -> dict[str, int]:
    """The stored size of each reminder once inherited into an empty child."""
    probe = Driver("child")
    inherit_into(probe, handoff)
    return {row.spec.id: spec_bytes(row.spec) for row in probe.state.pending}


def test_a_reminder_that_replaces_a_same_key_one_needs_room_only_for_the_difference() -> None:
    handoff = _handoff(("p", "the parent's longer reminder", "k"))
    size = _inherited_sizes(handoff)["p"]
    child = Driver("child", config=CoreConfig(max_session_bytes=size))
    own = child.inject("own", dedupe_key="k")
    reply = inherit_into(child, handoff)
    assert (reply["inherited_ids"], reply["skipped_ids"]) == (["p"], [])
    assert child.pending_ids() == ["p"]
    assert own not in child.pending_ids()


def test_a_reminder_without_room_is_skipped_and_the_next_one_still_inherited() -> None:
    handoff = _handoff(("big", "x" * 2000, None), ("small", "s", None))
    size = _inherited_sizes(handoff)["small"]
    child = Driver("child", config=CoreConfig(max_session_bytes=size))
    reply = inherit_into(child, handoff)
    assert (reply["inherited_ids"], reply["skipped_ids"]) == (["small"], ["big"])
    assert child.pending_ids() == ["small"]

"""The id sets a session's state carries (`core.fold._ID_SETS`) always match its lists: taken
by the scratch a command thaws, handed back when the command decides no events, kept away
from the state when the command changed them and was then refused."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.state import SessionState
from core import CoreConfig, Decision, fold_all, handle
from core.fold import _HISTORY_BYTES, _ID_SETS, Scratch
from core.kept import history_bytes
from tests.support import context_for


def _run(
    state: SessionState, n: int, op: str, config: CoreConfig | None = None, **fields: Any
) -> Decision:
    raw = {"session_id": "s1", **fields}
    return handle(state, op, raw, context_for(n, "n0nce"), config or CoreConfig())


def _lived(commands: int) -> SessionState:
    """A session of `commands` injects, each decided on the state the last one folded."""
    state = SessionState()
    for n in range(1, commands + 1):
        decision = _run(state, n, "inject", reminder={"body": f"note {n}", "dedupe_key": "k"})
        state = decision.state_after(state, n)
    return state


def _sets_match(state: SessionState) -> bool:
    """Whether the sets registered for `state`, if any, are those of its lists."""
    seen, fired = _ID_SETS.known(state) or (None, None)
    return (seen is None or seen == set(state.seen_ids)) and (
        fired is None or fired == set(state.fired_ids)
    )


def test_a_command_that_decides_no_events_hands_the_sets_back() -> None:
    state = _lived(30)
    carried = _ID_SETS.known(state)
    assert carried is not None and carried[0] == set(state.seen_ids)
    refused = _run(state, 31, "revoke", reminder_id="never-seen")
    assert refused.events == ()
    assert _ID_SETS.known(state) == carried  # given back, unchanged
    assert _sets_match(state)
    # The next command decides as it would on the same state without any sets.
    fresh = SessionState.model_validate(state.model_dump(mode="json"))
    body = {"reminder": {"body": "again", "id": "r-00003"}}  # an id seen long ago
    assert _run(state, 32, "inject", **body).reply == _run(fresh, 32, "inject", **body).reply


def test_a_command_refused_after_its_drafts_leaves_no_changed_set_behind() -> None:
    state = _lived(30)
    # Too small to store the state after the inject: refused once its events are drafted,
    # after the fold added the new id to the scratch's set.
    limit = len(state.model_dump_json()) + 16 + 64 + 40
    tight = CoreConfig(max_payload_bytes=limit, max_session_bytes=4096)
    spec = {"body": "x" * 100, "id": "fresh-id", "dedupe_key": "k"}
    refused = _run(state, 31, "inject", tight, reminder=spec)
    assert refused.reply["error"]["code"] == "too_large"
    assert _sets_match(state)
    assert "fresh-id" not in (_ID_SETS.known(state) or (set(), None))[0]


def test_state_after_folds_a_decision_made_without_a_batch() -> None:
    state = _lived(3)
    decided = _run(state, 4, "inject", reminder={"body": "more", "dedupe_key": "k"})
    assert [event.kind for event in decided.events] == ["deduped", "injected"]
    bare = Decision(events=decided.events, reply=decided.reply)
    *earlier, last = decided.events
    expected = fold_all(state, [*((event, None) for event in earlier), (last, 99)])
    assert bare.state_after(state, 99) == expected
    assert Decision(events=(), reply={"ok": True}).state_after(state, 99) is state


def test_a_scratch_gives_back_a_fired_set_alone_and_never_changes_what_it_gave() -> None:
    state = _lived(3)
    scratch = Scratch.thaw(state)
    fired: set[str] = set(state.fired_ids)
    scratch._seen, scratch._fired = None, fired
    scratch.give_back(state)
    assert _ID_SETS.known(state) == (None, fired)
    # Given back means given away: what the scratch adds later goes to sets of its own.
    scratch.see("later")
    scratch.fire("later")
    assert "later" not in fired
    assert scratch.seen_ids[-1] == scratch.fired_ids[-1] == "later"


@pytest.mark.parametrize(
    ("add", "carried", "ids"), [("fire", "_fired", "fired_ids"), ("see", "_seen", "seen_ids")]
)
def test_fire_and_see_add_to_the_set_the_scratch_carries(add: str, carried: str, ids: str) -> None:
    state = _lived(3)
    scratch = Scratch.thaw(state)
    kept: set[str] = set(getattr(state, ids))
    setattr(scratch, carried, kept)
    getattr(scratch, add)("r-x")
    getattr(scratch, add)("r-x")
    assert getattr(scratch, carried) is kept and "r-x" in kept  # the carried set itself
    assert getattr(scratch, ids).count("r-x") == 1


def test_each_state_a_decision_folded_carries_its_measure_and_its_sets() -> None:
    state = _lived(12)
    measured = history_bytes(state.seen_ids, state.revoked_ids, state.fired_ids)
    assert _HISTORY_BYTES.known(state) == measured  # carried, not measured again on use
    decision = _run(state, 13, "inject", reminder={"body": "one more", "dedupe_key": "k"})
    assert decision.folded is not None  # the batch's own fold, not a second one
    assert decision.folded.session_seq == decision.events[-1].session_seq
    after = decision.state_after(state, 13)
    assert _HISTORY_BYTES.known(after) == measured + len("r-00013") + 3  # quotes, comma
    assert (_ID_SETS.known(after) or (None, None))[0] == set(after.seen_ids)


def test_an_accepted_command_with_no_events_hands_the_sets_back_too() -> None:
    state = _lived(5)
    carried = _ID_SETS.known(state)
    assert carried is not None
    cleared = _run(state, 6, "clear", selector={"tag": "nothing-has-this-tag"})
    assert cleared.ok and cleared.events == ()
    assert _ID_SETS.known(state) == carried


def test_a_released_scratch_hands_over_a_fired_set_alone_and_keeps_no_reference() -> None:
    state = _lived(3)
    scratch = Scratch.thaw(state)
    fired: set[str] = set(state.fired_ids)
    scratch._seen, scratch._fired = None, fired
    released = scratch.release()
    assert _ID_SETS.known(released) == (None, fired)
    # Released twice (state_after asked twice): the second state gets no sets, and both
    # decide the next command alike.
    again = scratch.release()
    assert _ID_SETS.known(again) is None
    body = {"reminder": {"body": "next"}}
    assert _run(released, 4, "inject", **body).reply == _run(again, 4, "inject", **body).reply


def test_thaw_takes_the_sets_and_the_measure_the_state_carries_without_working_them_out() -> None:
    state = _lived(4)
    seen: set[str] = set(state.seen_ids)
    fired: set[str] = set(state.fired_ids)
    _ID_SETS.put(state, (seen, fired))
    # A measure no full count would give: only the carried one can come out of the scratch.
    _HISTORY_BYTES.put(state, 123_456)
    scratch = Scratch.thaw(state)
    assert scratch._seen is seen and scratch._fired is fired  # taken, not built again
    assert _ID_SETS.known(state) is None  # taken away: the scratch goes on to change them
    assert scratch.history_bytes() == 123_456

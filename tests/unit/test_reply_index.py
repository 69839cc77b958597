"""The index of a state's remembered replies (`core.fold.remembered_row`): built on a state's
first lookup and carried by the fold to the states after it, it always says what a scan of
`recent_replies` says (SPEC §4.1)."""

from __future__ import annotations

import gc

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.state import RECENT_REPLIES_BYTES, RecentReply, SessionState
from core import fold_all
from core.fold import _REPLY_INDEX, Scratch, _index_replies, remembered_row
from tests.support import Driver


def scanned(state: SessionState, request_id: str) -> RecentReply | None:
    """What `decide` found before the index: the first row with the id."""
    return next((row for row in state.recent_replies if row.request_id == request_id), None)


def test_a_carried_index_follows_the_window_past_its_count() -> None:
    driver = Driver()
    driver.ok("inject", reminder={"body": "first"}, request_id="q0")
    assert remembered_row(driver.state, "q0") is driver.state.recent_replies[0]
    for n in range(1, 300):
        driver.ok("inject", reminder={"body": f"r{n}", "dedupe_key": "k"}, request_id=f"q{n}")
        carried = _REPLY_INDEX.known(driver.state)
        assert carried == _index_replies(driver.state), n  # carried, and exact
    assert len(driver.state.recent_replies) == 256
    assert remembered_row(driver.state, "q43") is None  # evicted
    assert remembered_row(driver.state, "q44") is driver.state.recent_replies[0]
    # A repeat is still answered from the window, appending nothing.
    before = driver.state
    assert driver.run("inject", reminder={"body": "again"}, request_id="q299").events == ()
    assert driver.state == before


def test_a_state_nobody_looked_up_carries_no_index() -> None:
    driver = Driver()
    for n in range(3):
        driver.ok("inject", reminder={"body": f"r{n}"}, request_id=f"q{n}")
    # Driver decides on each state, so each is indexed; a fold from a state never looked up
    # (the projector's) builds none.
    plain = fold_all(SessionState(), driver.log)
    assert _REPLY_INDEX.known(plain) is None
    assert remembered_row(plain, "q1") is plain.recent_replies[1]
    assert _REPLY_INDEX.known(plain) == {row.request_id: row for row in plain.recent_replies}


def test_a_request_id_twice_in_the_log_drops_the_carried_index() -> None:
    # The gateway never appends a request id its window holds; a log that does anyway still
    # reads as the scan reads it: the first row.
    driver = Driver()
    driver.ok("inject", reminder={"body": "a"}, request_id="q")
    driver.ok("inject", reminder={"body": "b"}, request_id="other")
    first = driver.state
    assert remembered_row(first, "q") is first.recent_replies[0]
    (again,) = [event for event in driver.log if event.request_id == "other"]
    forged = again.model_copy(update={"request_id": "q", "session_seq": again.session_seq + 1})
    later = fold_all(first, [forged])
    assert _REPLY_INDEX.known(later) is None
    assert remembered_row(later, "q") is later.recent_replies[0] is first.recent_replies[0]


def test_an_index_goes_with_its_state() -> None:
    driver = Driver()
    driver.ok("inject", reminder={"body": "a"}, request_id="q")
    state = driver.state
    remembered_row(state, "q")
    held = len(_REPLY_INDEX.table)
    del driver, state
    gc.collect()
    assert len(_REPLY_INDEX.table) < held


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "d", None]), min_size=1, max_size=30))
def test_the_index_answers_as_the_scan_for_any_run_of_commands(ids: list[str | None]) -> None:
    driver = Driver()
    for n, request_id in enumerate(ids):
        fields = {} if request_id is None else {"request_id": request_id}
        driver.run("inject", reminder={"body": f"r{n}", "dedupe_key": "k"}, **fields)
        for probe in ("a", "b", "c", "d", "e"):
            assert remembered_row(driver.state, probe) is scanned(driver.state, probe)


def test_rows_dropped_for_their_bytes_leave_the_carried_index() -> None:
    driver = Driver()
    for n in range(3):
        driver.ok("inject", reminder={"body": f"r{n}"}, request_id=f"q{n}")
    state = driver.state
    assert _REPLY_INDEX.known(state) is not None
    scratch = Scratch.thaw(state)
    big = RecentReply(
        request_id="big", reply={"ok": True, "pad": "p" * (RECENT_REPLIES_BYTES - 64)}
    )
    scratch.remember(big)
    later = scratch.release()
    assert [row.request_id for row in later.recent_replies] == ["big"]
    assert _REPLY_INDEX.known(later) == {"big": big}


def test_a_full_window_over_its_bytes_drops_rows_for_both_from_the_carried_index() -> None:
    driver = Driver()
    for n in range(256):
        driver.ok("inject", reminder={"body": f"r{n}", "dedupe_key": "k"}, request_id=f"q{n}")
    state = driver.state
    assert len(state.recent_replies) == 256 and _REPLY_INDEX.known(state) is not None
    scratch = Scratch.thaw(state)
    big = RecentReply(
        request_id="big", reply={"ok": True, "pad": "p" * (RECENT_REPLIES_BYTES - 64)}
    )
    scratch.remember(big)  # the oldest goes for the count, the rest for the bytes
    later = scratch.release()
    assert [row.request_id for row in later.recent_replies] == ["big"]
    assert _REPLY_INDEX.known(later) == {"big": big}

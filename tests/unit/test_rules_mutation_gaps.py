"""Behaviour of the lifecycle rules (`core/rules.py`) and the projector's rules
(`core/projection.py`) that mutation testing showed no other unit test pins down.

Each test names the outcome it guards; docs/mutation-testing.md says how the gaps were found.
"""

from __future__ import annotations

import pytest

from contracts.decode import DecodeError, decode
from contracts.records import Tombstone
from contracts.state import SessionState
from contracts.stored import StoredEvent, Unreadable, read_stored
from core.projection import Record, Verdict, project, project_all
from tests.support import session_log, stored


def applied(rows: list[StoredEvent]) -> SessionState:
    record, outcomes = project_all(None, rows)
    assert {o.verdict for o in outcomes} == {Verdict.APPLIED}
    assert isinstance(record, SessionState)
    return record


def degraded_copy_of(before: SessionState, after: Record, stream_seq: int, code: str) -> None:
    """`after` is `before` with only a degraded mark added, at `stream_seq` with `code`."""
    assert isinstance(after, SessionState) and after.degraded is not None
    assert (after.degraded.stream_seq, after.degraded.code) == (stream_seq, code)
    assert after.model_copy(update={"degraded": None}) == before


# --- poison keeps what the session already holds (§6.4) ------------------------------------


def test_an_unreadable_message_degrades_the_state_it_finds_and_dead_letters_its_reason() -> None:
    state = applied(stored(session_log())[:2])
    unreadable = read_stored(b"{not json", 9, "transcript.reminder.fired.s1")
    assert isinstance(unreadable, Unreadable)
    after, outcome = project(state, unreadable)
    assert (outcome.verdict, outcome.code) == (Verdict.POISON, "undecodable")
    assert outcome.reason == unreadable.error.reason != ""
    degraded_copy_of(state, after, 9, "undecodable")


def test_an_event_failing_to_decode_degrades_the_state_it_finds_and_dead_letters_its_reason() -> (
    None
):
    rows = stored(session_log())
    state = applied(rows[:2])
    wrong = StoredEvent(rows[2].envelope, rows[2].stream_seq, "transcript.reminder.injected.s1")
    with pytest.raises(DecodeError) as raised:
        decode(wrong.envelope, wrong.subject)
    expected_reason = raised.value.reason
    after, outcome = project(state, wrong)
    assert (outcome.verdict, outcome.code) == (Verdict.POISON, "wrong_subject")
    assert outcome.reason == expected_reason != ""
    degraded_copy_of(state, after, rows[2].stream_seq, "wrong_subject")


def test_a_final_gap_degrades_the_state_it_finds_and_says_the_previous_event_never_arrived() -> (
    None
):
    rows = stored(session_log())
    state = applied(rows[:2])
    after, outcome = project(state, rows[3], gap_is_final=True)
    # The DLQ's Reminders-Error header carries this reason to the operator.
    assert (outcome.code, outcome.reason) == ("gap", "the previous event never arrived")
    degraded_copy_of(state, after, rows[3].stream_seq, "gap")


def test_a_broken_chain_degrades_the_state_it_finds_and_says_the_chain_does_not_follow() -> None:
    rows = stored(session_log())
    state = applied(rows[:2])
    forged = StoredEvent({**rows[2].envelope, "turn": 9}, rows[2].stream_seq, rows[2].subject)
    after, outcome = project(state, forged)
    assert (outcome.code, outcome.reason) == ("broken_chain", "chain does not follow chain_head")
    degraded_copy_of(state, after, rows[2].stream_seq, "broken_chain")


# --- tombstones (§6.4) ----------------------------------------------------------------------


def test_a_first_event_stored_exactly_at_the_purge_point_is_still_purged() -> None:
    tombstone = Tombstone(session_token="s1", purged_through=10, forgotten_at="2026-11-29T00:00Z")
    record, outcomes = project_all(tombstone, stored(session_log(), first_seq=10))
    assert record is tombstone
    assert [o.code for o in outcomes] == ["tombstoned"] * 5


# --- project_all: gaps in a batch ------------------------------------------------------------


def test_after_a_gap_that_may_still_fill_every_later_event_of_the_batch_waits() -> None:
    rows = stored(session_log())
    batch = [rows[0], rows[2], rows[1]]  # rows[1] is next in line, but arrives after the gap
    record, outcomes = project_all(None, batch, gap_is_final=[False, False, False])
    assert [o.verdict for o in outcomes] == [Verdict.APPLIED, Verdict.GAP, Verdict.GAP]
    assert record == applied(rows[:1])


def test_without_redelivery_flags_project_all_treats_every_gap_as_final() -> None:
    rows = stored(session_log())
    record, outcomes = project_all(None, [rows[0], rows[2], rows[3]])
    assert [(o.verdict, o.code) for o in outcomes] == [
        (Verdict.APPLIED, ""),
        (Verdict.POISON, "gap"),
        (Verdict.SKIPPED, "degraded"),
    ]
    degraded_copy_of(applied(rows[:1]), record, rows[2].stream_seq, "gap")

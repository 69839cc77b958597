"""`core.projection.project`: the projector's rules as one pure function (SPEC §6.3–§6.4)."""

from __future__ import annotations

from typing import Any

import orjson

from contracts.records import Tombstone
from contracts.state import DegradedMark, SessionState
from contracts.stored import StoredEvent, read_stored
from core import fold_all
from core.projection import SessionFold, Verdict, project, project_all
from tests.support import session_log, stored


def test_a_whole_log_projects_to_the_fold_of_its_events() -> None:
    log = session_log()
    record, outcomes = project_all(None, stored(log))
    assert [o.verdict for o in outcomes] == [Verdict.APPLIED] * len(log)
    assert record == fold_all(SessionState(), [(e, i + 1) for i, e in enumerate(log)])


def test_duplicates_gaps_and_waiting_after_a_gap() -> None:
    rows = stored(session_log())
    record, _ = project(None, rows[0])
    assert project(record, rows[0])[1].verdict is Verdict.DUPLICATE
    assert project(record, rows[2])[1].verdict is Verdict.GAP
    assert project(record, rows[1], after_gap=True)[1].verdict is Verdict.GAP
    degraded, outcome = project(record, rows[2], gap_is_final=True)
    assert (outcome.verdict, outcome.code) == (Verdict.POISON, "gap")
    assert isinstance(degraded, SessionState) and degraded.degraded is not None
    assert project(degraded, rows[1])[1].verdict is Verdict.SKIPPED


def test_a_broken_chain_is_poison_and_marks_the_session() -> None:
    rows = stored(session_log())
    record, _ = project(None, rows[0])
    forged = StoredEvent({**rows[1].envelope, "turn": 9}, rows[1].stream_seq, rows[1].subject)
    after, outcome = project(record, forged)
    assert (outcome.verdict, outcome.code) == (Verdict.POISON, "broken_chain")
    assert isinstance(after, SessionState) and after.degraded is not None
    assert after.degraded.stream_seq == rows[1].stream_seq


def test_undecodable_and_unknown_versions_are_poison_with_their_codes() -> None:
    subject = "transcript.reminder.injected.s1"
    for data, code in (
        (b"{not json", "undecodable"),
        (b"[]", "invalid_event"),
        (orjson.dumps({"schema": "reminder-ledger.event/v9"}), "unknown_schema"),
    ):
        record, outcome = project(None, read_stored(data, 4, subject))
        assert (outcome.verdict, outcome.code) == (Verdict.POISON, code)
        assert isinstance(record, SessionState) and record.degraded is not None
        assert record.degraded.code == code and record.degraded.stream_seq == 4


def with_subject(row: StoredEvent, subject: str, **envelope: Any) -> StoredEvent:
    return StoredEvent({**row.envelope, **envelope}, row.stream_seq, subject)


def test_an_event_its_subject_does_not_confirm_is_poison_and_degrades_the_subjects_session() -> (
    None
):
    row = stored(session_log("K"))[0]
    for subject in ("transcript.reminder.fired.K", "transcript.reminder.injected.L"):
        record, outcome = project(None, with_subject(row, subject))
        assert (outcome.verdict, outcome.code) == (Verdict.POISON, "wrong_subject")
        assert isinstance(record, SessionState) and record.degraded is not None
        assert record.degraded.code == "wrong_subject"
    other_session = with_subject(row, row.subject, session_id="L")
    assert project(None, other_session)[1].code == "wrong_subject"


def test_an_event_on_a_subject_of_the_wrong_shape_is_poison_but_degrades_no_session() -> None:
    rows = stored(session_log("K"))
    junk = with_subject(rows[0], "transcript.reminder.injected.junk.K")
    record, outcome = project(None, junk)
    assert (outcome.verdict, outcome.code) == (Verdict.POISON, "wrong_subject")
    assert record is None
    record, outcomes = project_all(None, [junk, *rows])
    assert [o.verdict for o in outcomes] == [Verdict.POISON] + [Verdict.APPLIED] * len(rows)
    assert isinstance(record, SessionState) and record.degraded is None


def test_a_tombstone_skips_purged_events_and_a_new_life_starts_afresh() -> None:
    log = session_log()
    tombstone = Tombstone(session_token="s1", purged_through=10, forgotten_at="2026-11-29T00:00Z")
    record, outcomes = project_all(tombstone, stored(log))
    assert record is tombstone and {o.code for o in outcomes} == {"tombstoned"}
    record, outcomes = project_all(tombstone, stored(log, first_seq=11))
    assert isinstance(record, SessionState) and record.session_seq == len(log)
    # A poison message cannot turn a tombstone back into a state.
    assert project(tombstone, read_stored(b"{", 12, "transcript.reminder.x.s1"))[0] is tombstone


def test_project_folds_each_event_into_the_state_it_is_given_at_its_stream_seq() -> None:
    log = session_log()
    record = None
    for row in stored(log, first_seq=7):
        record, outcome = project(record, row)
        assert outcome.verdict is Verdict.APPLIED
    assert record == fold_all(SessionState(), [(e, i + 7) for i, e in enumerate(log)])


def test_a_fold_goes_on_from_the_state_it_starts_with() -> None:
    log = session_log()
    rows = stored(log)
    first, _ = project_all(None, rows[:2])
    record, outcomes = project_all(first, rows[2:])
    assert {o.verdict for o in outcomes} == {Verdict.APPLIED}
    assert record == project_all(None, rows)[0]


def test_a_gap_is_final_for_a_session_fold_unless_told_otherwise() -> None:
    rows = stored(session_log())
    judgement = SessionFold(None).add(rows[1])
    assert (judgement.verdict, judgement.code) == (Verdict.POISON, "gap")
    assert SessionFold(None).add(rows[1], gap_is_final=False).verdict is Verdict.GAP


def test_a_new_life_whose_first_event_is_poison_is_a_degraded_state_not_the_tombstone() -> None:
    tombstone = Tombstone(session_token="s1", purged_through=10, forgotten_at="2026-11-29T00:00Z")
    first = stored(session_log(), first_seq=11)[0]
    forged = StoredEvent({**first.envelope, "turn": 9}, first.stream_seq, first.subject)
    mark = DegradedMark(stream_seq=11, code="broken_chain")
    assert project(tombstone, forged)[0] == SessionState(degraded=mark)
    record, outcomes = project_all(tombstone, [forged])
    assert record == SessionState(degraded=mark) and outcomes[0].code == "broken_chain"


def test_a_new_life_s_first_event_that_waits_on_a_gap_leaves_the_tombstone_as_it_is() -> None:
    # Nothing is applied, so nothing changes: were the tombstone dropped, a caller storing the
    # record would let the purged events through again (rule 2 reads `purged_through`).
    tombstone = Tombstone(session_token="s1", purged_through=10, forgotten_at="2026-11-29T00:00Z")
    first = stored(session_log(), first_seq=11)[0]
    record, outcome = project(tombstone, first, after_gap=True)
    assert outcome.verdict is Verdict.GAP and record is tombstone
    # The same event applied, or found poison once the gap is final, is the new life.
    applied, _ = project(tombstone, first)
    assert isinstance(applied, SessionState) and applied.session_seq == 1
    poisoned, outcome = project(tombstone, first, after_gap=True, gap_is_final=True)
    assert (outcome.verdict, outcome.code) == (Verdict.POISON, "gap")
    assert poisoned == SessionState(degraded=DegradedMark(stream_seq=11, code="gap"))

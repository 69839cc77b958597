"""The fold's delivered history and remembered replies (SPEC §6.2, §4.1.1): what mutation
testing of `core/fold.py` showed no other unit test pins down
(docs/mutation-survivors-deciders-s18.md)."""

from __future__ import annotations

from contracts.events import Delivered, Event, Fired
from contracts.state import (
    FULL_ENVELOPE_TEXT_BYTES,
    RECENT_REPLIES_BYTES,
    DeliveredDigest,
    DeliveredEnvelope,
    SessionState,
)
from core import fold_all
from core.size import json_bytes
from tests.support import Driver


def _delivered_with_texts(*texts: str) -> SessionState:
    """The state after one `delivered` event per text (a real render's event, text replaced)."""
    driver = Driver()
    driver.inject("x")
    driver.ok("render", turn=0)
    (rendered,) = [e for e in driver.log if isinstance(e.payload, Delivered)]
    assert isinstance(rendered.payload, Delivered)
    log: list[Event] = [
        rendered.model_copy(update={"payload": rendered.payload.model_copy(update={"text": text})})
        for text in texts
    ]
    return fold_all(SessionState(), log)


def test_envelopes_whose_texts_fill_the_kept_bytes_exactly_are_all_kept_in_full() -> None:
    half = FULL_ENVELOPE_TEXT_BYTES // 2
    exact = _delivered_with_texts("a" * half, "b" * (FULL_ENVELOPE_TEXT_BYTES - half))
    assert [type(row) for row in exact.delivered] == [DeliveredEnvelope, DeliveredEnvelope]
    over = _delivered_with_texts("a" * (half + 1), "b" * (FULL_ENVELOPE_TEXT_BYTES - half))
    assert [type(row) for row in over.delivered] == [DeliveredDigest, DeliveredEnvelope]


def test_the_newest_envelope_is_kept_in_full_however_long_its_text() -> None:
    alone = _delivered_with_texts("b" * (FULL_ENVELOPE_TEXT_BYTES + 1))
    assert [type(row) for row in alone.delivered] == [DeliveredEnvelope]
    after_one = _delivered_with_texts("a", "b" * (FULL_ENVELOPE_TEXT_BYTES + 1))
    assert [type(row) for row in after_one.delivered] == [DeliveredDigest, DeliveredEnvelope]


def _remembering(*pads: int) -> SessionState:
    """The state after one remembered reply per pad (a real inject's event, reply padded)."""
    driver = Driver()
    for n in range(len(pads)):
        driver.ok("inject", reminder={"body": f"r{n}"}, request_id=f"q{n}")
    log: list[Event] = [
        event.model_copy(update={"reply": {"ok": True, "pad": "p" * pad}})
        for event, pad in zip(driver.log, pads, strict=True)
    ]
    return fold_all(SessionState(), log)


def row_bytes(request_id: str, pad: int) -> int:
    """The stored size of a remembered reply `_remembering` makes."""
    return json_bytes({"request_id": request_id, "reply": {"ok": True, "pad": "p" * pad}})


def test_remembered_replies_that_fill_their_bytes_exactly_are_all_kept() -> None:
    first = RECENT_REPLIES_BYTES // 2
    second = RECENT_REPLIES_BYTES - row_bytes("q0", first) - row_bytes("q1", 0)
    exact = _remembering(first, second)
    assert row_bytes("q0", first) + row_bytes("q1", second) == RECENT_REPLIES_BYTES
    assert [row.request_id for row in exact.recent_replies] == ["q0", "q1"]
    over = _remembering(first + 1, second)
    assert [row.request_id for row in over.recent_replies] == ["q1"]


def test_of_replies_over_their_bytes_the_newest_that_fill_them_exactly_are_kept() -> None:
    first = RECENT_REPLIES_BYTES // 2
    second = RECENT_REPLIES_BYTES - row_bytes("q1", first) - row_bytes("q2", 0)
    state = _remembering(10, first, second)
    assert [row.request_id for row in state.recent_replies] == ["q1", "q2"]


def test_an_id_seen_and_fired_again_within_one_fold_is_recorded_once() -> None:
    # The projector folds a run of events on one scratch, whose index of seen and fired ids
    # is built once: an id injected and rendered again after it expired must stay one entry
    # in each list, as when the events are folded one decision at a time.
    driver = Driver()
    first = driver.inject("once", id="again", ttl_turns=1)
    driver.ok("render", turn=0)
    driver.ok("end_turn", turn=0)
    assert driver.pending_ids() == []
    driver.inject("twice", id="again", ttl_turns=1)
    driver.ok("render", turn=1)
    fired = [e.payload.reminder_id for e in driver.log if isinstance(e.payload, Fired)]
    assert fired == [first, first]
    whole = fold_all(SessionState(), driver.log)
    assert whole == driver.state
    assert (whole.seen_ids, whole.fired_ids) == ([first], [first])

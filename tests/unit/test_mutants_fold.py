"""The fold's delivered history (SPEC §6.2, §4.1.1): what mutation testing of `core/fold.py`
showed no other unit test pins down (docs/mutation-survivors-deciders-s18.md)."""

from __future__ import annotations

from contracts.events import Delivered, Event
from contracts.state import (
    FULL_ENVELOPE_TEXT_BYTES,
    DeliveredDigest,
    DeliveredEnvelope,
    SessionState,
)
from core import fold_all
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

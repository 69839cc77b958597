"""`encode_state` writes the bytes of its definition, `canonical_json(model_dump(mode="json"))`."""

from __future__ import annotations

import json

import pytest

from contracts.state import RecentReply, SessionState
from contracts.stored import StoredEvent
from core.fold import Scratch
from core.projection import project_all
from services.adapters.records import decode_record, encode_state, encode_state_reference
from tests.golden.regen import GOLDEN_DIR, scripts
from tests.support import session_log, stored

NAMES = [path.name.removesuffix(".commands.json") for path in scripts()]


@pytest.mark.parametrize("name", NAMES)
def test_every_state_along_a_golden_log_encodes_as_its_definition(name: str) -> None:
    text = (GOLDEN_DIR / f"{name}.events.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines()]
    record = None
    for index, row in enumerate(rows):
        subject, stream_seq = row.pop("subject"), row.pop("stream_seq")
        record, _ = project_all(record, [StoredEvent(row, stream_seq, subject)])
        assert isinstance(record, SessionState), index
        assert encode_state(record) == encode_state_reference(record)
        assert decode_record(encode_state(record)) == record


def test_a_reply_holding_floats_or_float_like_text_still_encodes_as_its_definition() -> None:
    state, _ = project_all(None, stored(session_log()))
    assert isinstance(state, SessionState)
    scratch = Scratch.thaw(state)
    scratch.recent_replies.append(
        RecentReply(request_id="r", reply={"ok": True, "x": 1e16, "t": ":1.5,", "n": -0.0})
    )
    odd = scratch.freeze()
    assert encode_state(odd) == encode_state_reference(odd)
    assert encode_state(state) == encode_state_reference(state)

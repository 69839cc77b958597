"""`encode_state` writes the bytes of its definition, `canonical_json(model_dump(mode="json"))`."""

from __future__ import annotations

import json

import orjson
import pytest
from pydantic import ValidationError

from contracts.records import Tombstone
from contracts.state import RecentReply, SessionState
from contracts.stored import StoredEvent
from core.fold import Scratch
from core.projection import project_all
from services.adapters.record_codec import (
    _reply_row,
    decode_record,
    encode_state,
    encode_state_reference,
    record_position,
)
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


def test_remembered_replies_with_control_characters_encode_as_their_definition() -> None:
    # The replies go where orjson left a NUL byte; a NUL in any text is written escaped.
    state, _ = project_all(None, stored(session_log()))
    assert isinstance(state, SessionState)
    scratch = Scratch.thaw(state)
    for text in ("\x00", "a\x00b\x01", "[\x00]"):
        scratch.recent_replies.append(RecentReply(request_id=text, reply={"ok": True, "t": text}))
    odd = scratch.freeze()
    assert encode_state(odd) == encode_state_reference(odd)
    assert decode_record(encode_state(odd)) == odd
    bare = SessionState(session_id="s\x00")
    assert encode_state(bare) == encode_state_reference(bare)


def test_a_remembered_reply_shared_by_states_is_written_once() -> None:
    base, _ = project_all(None, stored(session_log()))
    assert isinstance(base, SessionState)
    scratch = Scratch.thaw(base)
    for n in range(3):
        scratch.recent_replies.append(RecentReply(request_id=f"r{n}", reply={"ok": True, "n": n}))
    state = scratch.freeze()
    encode_state(state)
    rows = state.recent_replies
    assert [_reply_row.table[id(row)][1] for row in rows] == [
        orjson.dumps(json.loads(RecentReply.model_dump_json(row)), option=orjson.OPT_SORT_KEYS)
        for row in rows
    ]
    scratch = Scratch.thaw(state)
    scratch.recent_replies.append(RecentReply(request_id="new", reply={"ok": True}))
    later = scratch.freeze()
    assert later.recent_replies[: len(rows)] == rows  # the same row objects
    assert encode_state(later) == encode_state_reference(later)
    assert id(later.recent_replies[-1]) in _reply_row.table


def test_record_position_reads_where_a_value_stands_as_a_full_decode_would() -> None:
    state, _ = project_all(None, stored(session_log()))
    assert isinstance(state, SessionState)
    tombstone = Tombstone(session_token="t", purged_through=7, forgotten_at="2026-12-03T00:00:00Z")
    assert record_position(encode_state(state)) == state.stream_seq > 0
    assert record_position(encode_state(SessionState())) == 0
    assert record_position(tombstone.model_dump_json().encode()) == tombstone
    assert record_position(None) is None
    assert record_position(b"") is None
    # A stream_seq that is not an integer is decoded in full, which refuses it.
    with pytest.raises(ValidationError):
        record_position(b'{"stream_seq": "seven"}')

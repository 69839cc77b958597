"""The `state` reply passes a stored state's bytes on unchanged (SPEC §4.10): what a client
reads must be exactly what the model round trip gave, and anything not written by the current
`encode_state` must still go through the model."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from contracts.state import ProviderMark, ProvidersState, SessionState
from services.adapters.projection import Projected, read_projected
from services.adapters.record_codec import encode_state

GOLDEN = Path(__file__).parent.parent / "golden"


def stored_states() -> list[SessionState]:
    golden = [
        SessionState.model_validate_json(path.read_bytes())
        for path in sorted(GOLDEN.glob("*.state.json"))
    ]
    with_providers = golden[0].model_copy(
        update={
            "providers": ProvidersState(
                marks={"idle_nudge": ProviderMark(fired_count=1, last_fired_turn=3)},
                evaluations=2,
            )
        }
    )
    return [SessionState(), SessionState(session_id="s", session_seq=2), *golden, with_providers]


@pytest.mark.parametrize("state", stored_states(), ids=lambda state: state.session_id or "empty")
def test_a_stored_state_passed_on_reads_as_its_model_dump(state: SessionState) -> None:
    record = read_projected(encode_state(state))
    assert record.is_state and record.current
    assert (record.session_seq, record.stream_seq) == (state.session_seq, state.stream_seq)
    reply = orjson.loads(orjson.dumps({"ok": True, "state": orjson.Fragment(record.value)}))
    assert reply["state"] == state.model_dump(mode="json")
    assert record.session_state() == state


def test_a_value_of_another_shape_is_not_passed_on() -> None:
    raw = orjson.loads(encode_state(SessionState(session_id="s", session_seq=1)))
    del raw["seen_ids"]  # e.g. written before a field existed: the model fills it in
    record = read_projected(orjson.dumps(raw))
    assert record.is_state and not record.current and record.session_seq == 1


def test_empty_and_tombstone_values_are_no_state() -> None:
    assert read_projected(None) == Projected() == read_projected(b"")
    tombstone = orjson.dumps(
        {"tombstone": True, "session_token": "s", "purged_through": 7, "forgotten_at": "x"}
    )
    record = read_projected(tombstone)
    assert record.purged_through == 7 and not record.is_state
    assert record.session_state() is None


@pytest.mark.parametrize("value", [b"[]", b"{", b'{"session_seq": "1"}'])
def test_what_the_projector_would_not_write_is_refused(value: bytes) -> None:
    with pytest.raises(ValueError):
        read_projected(value)

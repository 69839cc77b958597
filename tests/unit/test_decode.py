"""`contracts.decode`: one decoder, one stable DLQ code per failure, and the §3.7 upcast seam."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from contracts.decode import (
    CURRENT_SCHEMA,
    UPCASTERS,
    DecodeError,
    InvalidEvent,
    Undecodable,
    UnknownSchema,
    WrongSubject,
    decode,
    upcast,
)
from contracts.events import Event
from contracts.stored import StoredEvent, Unreadable, read_stored
from contracts.subjects import event_subject, parse_event_subject, session_token
from tests.support import Driver


def an_event(session_id: str = "s1") -> Event:
    driver = Driver(session_id)
    driver.inject("a")
    return driver.log[0]


def test_bytes_and_envelopes_decode_to_the_same_event() -> None:
    event = an_event()
    wire = event.to_wire()
    assert decode(orjson.dumps(wire)) == event
    assert decode(wire) == event
    assert decode(wire, event_subject(event.kind, event.session_id)) == event


@pytest.mark.parametrize(
    ("source", "error", "code"),
    [
        (b"{not json", Undecodable, "undecodable"),
        (b"[1, 2]", InvalidEvent, "invalid_event"),
        ({"schema": "reminder-ledger.event/v9"}, UnknownSchema, "unknown_schema"),
        ({"schema": None}, UnknownSchema, "unknown_schema"),
        ({"schema": CURRENT_SCHEMA, "kind": "teleported"}, InvalidEvent, "invalid_event"),
    ],
)
def test_each_failure_has_one_stable_code(
    source: bytes | dict[str, Any], error: type[DecodeError], code: str
) -> None:
    with pytest.raises(error) as caught:
        decode(source)
    assert caught.value.code == code
    assert isinstance(caught.value, ValueError)


def test_an_invalid_event_names_the_failing_fields_but_never_quotes_the_message() -> None:
    wire = an_event().to_wire()
    wire["payload"] = {**wire["payload"], "reminder_id": 7, "secret body": "do not leak"}
    with pytest.raises(InvalidEvent) as caught:
        decode(wire)
    assert "reminder_id" in caught.value.places
    assert "do not leak" not in caught.value.reason


def test_the_subject_must_confirm_kind_and_session() -> None:
    event = an_event("K")
    wire = event.to_wire()
    assert parse_event_subject("transcript.reminder.injected.K") == ("injected", "K")
    for subject in (
        "transcript.reminder.fired.K",  # kind differs
        "transcript.reminder.injected.other",  # session differs
        "transcript.reminder.injected.junk.K",  # five tokens
        "transcript.reminder.K",  # three tokens
    ):
        with pytest.raises(WrongSubject) as caught:
            decode(wire, subject)
        assert caught.value.code == "wrong_subject"


def test_a_session_id_that_is_not_plain_is_matched_by_its_hashed_token() -> None:
    event = an_event("user@example.com/1")
    token = session_token(event.session_id)
    assert token.startswith("=") and len(token) == 41
    assert decode(event.to_wire(), f"transcript.reminder.injected.{token}") == event
    with pytest.raises(WrongSubject):
        decode(event.to_wire(), "transcript.reminder.injected.user")


def test_v1_is_the_current_version_and_has_no_upcaster() -> None:
    assert CURRENT_SCHEMA == "reminder-ledger.event/v1"
    assert dict(UPCASTERS) == {}


def test_an_older_version_is_read_through_an_explicit_upcaster() -> None:
    """The §3.7 seam: a (here invented) v0 whose `seq` became `session_seq` in v1."""
    wire = an_event().to_wire()
    v0 = {**wire, "schema": "reminder-ledger.event/v0", "seq": wire["session_seq"]}
    del v0["session_seq"]

    def v0_to_v1(envelope: dict[str, Any]) -> dict[str, Any]:
        envelope["session_seq"] = envelope.pop("seq")
        return {**envelope, "schema": CURRENT_SCHEMA}

    steps = {"reminder-ledger.event/v0": (CURRENT_SCHEMA, v0_to_v1)}
    assert decode(v0, upcasters=steps) == decode(wire)
    assert v0["schema"] == "reminder-ledger.event/v0", "the stored envelope is not changed"
    with pytest.raises(UnknownSchema):
        decode(v0)  # no such step in this build
    looping = {"reminder-ledger.event/v0": ("reminder-ledger.event/v0", lambda e: e)}
    with pytest.raises(UnknownSchema):
        upcast(v0, looping)


def test_a_stored_event_keeps_the_envelope_as_stored_with_its_place() -> None:
    event = an_event()
    data = orjson.dumps(event.to_wire())
    stored = read_stored(data, 5, "transcript.reminder.injected.s1")
    assert isinstance(stored, StoredEvent)
    assert stored.envelope == orjson.loads(data)
    assert stored.export() == {
        **orjson.loads(data),
        "stream_seq": 5,
        "subject": "transcript.reminder.injected.s1",
    }
    unreadable = read_stored(b"\xff", 6, "transcript.reminder.injected.s1")
    assert isinstance(unreadable, Unreadable) and unreadable.error.code == "undecodable"

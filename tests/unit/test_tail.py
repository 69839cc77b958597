"""`reminders tail`'s pure parts: option parsing, filters and the lines it prints."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from contracts.events import PAYLOADS
from replay.tail import (
    Since,
    TailInputError,
    TailItem,
    TailQuery,
    as_record,
    first_words,
    item_of,
    parse_kinds,
    parse_since,
    table_line,
    valid_kinds,
)


def test_the_valid_kinds_are_the_contracts_kinds_so_a_new_kind_appears_by_itself() -> None:
    assert valid_kinds() == tuple(PAYLOADS)
    assert parse_kinds(["fired", "injected,expired"]) == {"fired", "injected", "expired"}


def test_an_unknown_kind_is_one_coded_line_listing_every_valid_kind() -> None:
    with pytest.raises(TailInputError) as raised:
        parse_kinds(["fired", "bogus"])
    message = str(raised.value)
    assert raised.value.code == "invalid_request"
    assert "'bogus'" in message and "\n" not in message
    assert all(kind in message for kind in PAYLOADS)


@pytest.mark.parametrize(
    ("text", "since"),
    [
        (None, Since()),
        ("1", Since(after_seq=0)),
        ("42", Since(after_seq=41)),
        ("now", Since(at_end=True)),
        ("2026-01-02T03:04:05Z", Since(at_time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))),
        ("2026-01-02T03:04:05", Since(at_time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))),
    ],
)
def test_since_takes_a_sequence_a_time_or_now(text: str | None, since: Since) -> None:
    assert parse_since(text) == since


@pytest.mark.parametrize("text", ["0", "yesterday", "-3", "2026-13-01", "12abc"])
def test_a_bad_since_is_one_line(text: str) -> None:
    with pytest.raises(TailInputError) as raised:
        parse_since(text)
    assert "\n" not in str(raised.value)


def test_the_subject_filter_is_as_narrow_as_the_query() -> None:
    assert TailQuery("s-1").subject_filter() == "transcript.reminder.*.s-1"
    assert TailQuery("s-1", frozenset({"fired"})).subject_filter() == (
        "transcript.reminder.fired.s-1"
    )
    assert TailQuery(None, frozenset({"fired"})).subject_filter() == "transcript.reminder.fired.>"
    assert TailQuery(None, frozenset({"fired", "queued"})).subject_filter() == (
        "transcript.reminder.>"
    )


def test_first_words_keeps_a_body_on_one_short_line() -> None:
    assert first_words("short body") == "short body"
    assert first_words("one two three four five six seven eight nine ten") == (
        "one two three four five six seven eight …"
    )
    long = first_words("x" * 200)
    assert len(long) == 60 and long.endswith("…")
    assert "\n" not in first_words("line one\nline two")


FIRED = {
    "schema": "reminder-ledger.event/v1",
    "event_id": "01900000-0000-7000-8000-000000000001",
    "kind": "fired",
    "session_id": "s-1",
    "agent_id": "s-1",
    "task_id": None,
    "session_seq": 3,
    "turn": 2,
    "occurred_at": "2026-01-01T00:00:00Z",
    "command_id": "c-1",
    "request_id": None,
    "payload": {
        "reminder_id": "r-1",
        "turn_number": 2,
        "tags": [],
        "dedupe_key": None,
        "source": "hook",
        "role_hint": "system",
        "authority": "contract",
        "rendered_role": "user",
        "ttl_turns": None,
        "propagate": "none",
        "originating_agent_id": None,
        "body": "Work only inside /srv/app; never touch /etc.",
    },
    "reply": None,
    "chain": "0" * 64,
}


def fired_item() -> TailItem:
    return item_of(orjson.dumps(FIRED), 7, "transcript.reminder.fired.s-1")


def test_a_line_shows_turn_kind_reminder_authority_and_the_first_words_unless_told_not_to() -> None:
    item = fired_item()
    assert item.event is not None, item.error
    line = table_line(item, bodies=True, all_sessions=False)
    assert line.split()[:5] == ["7", "2", "fired", "r-1", "contract"]
    assert "Work only inside" in line
    hidden = table_line(item, bodies=False, all_sessions=True)
    assert "Work" not in hidden and "s-1" in hidden
    assert "body" not in as_record(item, bodies=False)
    assert as_record(item, bodies=True)["body"] == FIRED["payload"]["body"]  # type: ignore[index]


def test_a_message_that_is_not_an_event_is_shown_with_its_dead_letter_code() -> None:
    item = item_of(b"not json", 9, "transcript.reminder.fired.s-1")
    assert item.event is None
    assert "undecodable" in table_line(item, bodies=True, all_sessions=False)
    assert as_record(item, bodies=True)["error"] == "undecodable"
    wrong = item_of(orjson.dumps(FIRED), 10, "transcript.reminder.injected.s-1")
    assert as_record(wrong, bodies=True)["error"] == "wrong_subject"

"""SPEC §2: ReminderSpec defaults, bounds and the coded errors of §2.2."""

from __future__ import annotations

import sys
import unicodedata
from typing import Any

import pytest
from pydantic import ValidationError

from contracts.commands import parse_command
from contracts.errors import ErrorCode, ReminderError
from contracts.spec import ReminderSpec, ResolvedSpec, has_control_chars, parse_reminder
from tests.support import Driver


def code_of(raw: Any, **kwargs: Any) -> str:
    with pytest.raises(ReminderError) as caught:
        parse_reminder(raw, **kwargs)
    return caught.value.code.value


def test_a_minimal_spec_gets_every_default_of_the_spec() -> None:
    spec, warnings = parse_reminder({"body": "hello"})
    assert spec == ReminderSpec(body="hello")
    assert spec.tags == []
    assert spec.dedupe_key is None
    assert spec.ttl_turns is None
    assert spec.preserve_on_compact is False
    assert spec.propagate == "session"
    assert spec.authority == "contract"
    assert spec.role_hint == "system"
    assert spec.source == "in_pipeline"
    assert spec.originating_agent_id is None
    assert warnings == []


def test_unknown_keys_are_listed_in_the_message() -> None:
    with pytest.raises(ReminderError) as caught:
        parse_reminder({"body": "x", "colour": "red", "size": 1})
    assert caught.value.code is ErrorCode.INVALID_OPTION
    assert caught.value.message == "unknown option(s): colour, size"
    assert caught.value.details == {"unknown": ["colour", "size"]}


@pytest.mark.parametrize("body", ["", "   ", "\n\t"])
def test_an_empty_body_after_trim_is_harn_rmd_001(body: str) -> None:
    assert code_of({"body": body}) == "HARN-RMD-001"


def test_a_missing_body_is_harn_rmd_001() -> None:
    assert code_of({"tags": ["a"]}) == "HARN-RMD-001"


@pytest.mark.parametrize("ttl", [0, -1, "3", 1.5, True])
def test_ttl_turns_must_be_an_integer_of_at_least_one(ttl: Any) -> None:
    assert code_of({"body": "x", "ttl_turns": ttl}) == "HARN-RMD-001"


@pytest.mark.parametrize(
    ("field", "value"),
    [("role_hint", "assistant"), ("authority", "binding"), ("source", "elsewhere")],
)
def test_bad_enum_values_are_harn_rmd_001(field: str, value: str) -> None:
    assert code_of({"body": "x", field: value}) == "HARN-RMD-001"


def test_a_bad_propagate_value_is_harn_rmd_005() -> None:
    assert code_of({"body": "x", "propagate": "everyone"}) == "HARN-RMD-005"


@pytest.mark.parametrize(
    "raw",
    [
        {"body": 5},
        {"body": "x", "tags": "a"},
        {"body": "x", "tags": [1]},
        {"body": "x", "preserve_on_compact": "yes"},
        {"body": "x", "fired_at_turn": -1},
        {"body": "x", "id": ""},
        {"body": "x", "id": "a" * 129},
        {"body": "x", "tags": ["a"] * 33},
        {"body": "x", "tags": ["   "]},
        {"body": "x", "tags": ["t" * 129]},
        {"body": "x", "dedupe_key": "k" * 257},
        {"body": "x", "dedupe_key": 7},
        "not an object",
        ["body"],
        None,
    ],
)
def test_wrong_types_and_out_of_bound_fields_are_harn_rmd_001(raw: Any) -> None:
    assert code_of(raw) == "HARN-RMD-001"


def test_the_error_message_names_the_field() -> None:
    with pytest.raises(ReminderError) as caught:
        parse_reminder({"body": "x", "ttl_turns": 0})
    assert "ttl_turns" in caught.value.message
    assert caught.value.details["field"] == "ttl_turns"


def test_an_empty_dedupe_key_means_none_and_tags_are_trimmed() -> None:
    spec, _ = parse_reminder({"body": "x", "dedupe_key": "", "tags": ["  a  ", "b"]})
    assert spec.dedupe_key is None
    assert spec.tags == ["a", "b"]


def test_a_body_over_the_byte_bound_is_too_large() -> None:
    assert code_of({"body": "é" * 17_000}) == "too_large"  # 34,000 bytes > 32 KiB
    assert code_of({"body": "abcd"}, max_body_bytes=3) == "too_large"
    parse_reminder({"body": "a" * 32 * 1024})


def test_explicit_no_preserve_without_ttl_is_accepted_with_warning_harn_rmd_004() -> None:
    _, warnings = parse_reminder({"body": "x", "preserve_on_compact": False})
    assert [w.code.value for w in warnings] == ["HARN-RMD-004"]
    _, silent = parse_reminder({"body": "x", "preserve_on_compact": False, "ttl_turns": 2})
    assert silent == []
    _, implicit = parse_reminder({"body": "x"})
    assert implicit == []


def test_the_inject_reply_carries_the_harn_rmd_004_warning() -> None:
    driver = Driver()
    reply = driver.ok("inject", reminder={"body": "x", "preserve_on_compact": False})
    assert reply["warnings"][0]["code"] == "HARN-RMD-004"
    plain = driver.ok("inject", reminder={"body": "y"})
    assert "warnings" not in plain


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("interrupt", "interrupt_immediate"),
        ("interrupt_immediate", "interrupt_immediate"),
        ("steer", "finish_step"),
        ("after_current_operation", "finish_step"),
        ("finish_step", "finish_step"),
        ("queue", "audit_only"),
        ("audit_only", "audit_only"),
    ],
)
def test_mode_aliases_resolve_to_the_canonical_mode(alias: str, canonical: str) -> None:
    driver = Driver()
    driver.ok("inject", mode=alias, reminder={"body": "x"})
    assert driver.state.queued[0].mode == canonical
    assert driver.log[-1].payload.mode == canonical  # type: ignore[union-attr]


def test_an_unknown_mode_is_rejected_with_a_code_and_appends_nothing() -> None:
    assert Driver().error("inject", mode="whenever", reminder={"body": "x"}) == "HARN-RMD-001"


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"session_id": ""},
        {"session_id": "s" * 257},
        {"session_id": "bad\x00id"},
        {"session_id": 12},
        {"session_id": "s", "turn": "1"},
        {"session_id": "s", "turn": -1},
        {"session_id": "s", "turn": 1, "extra": True},
    ],
)
def test_malformed_command_envelopes_are_invalid_request(raw: dict[str, Any]) -> None:
    with pytest.raises(ReminderError) as caught:
        parse_command("render", raw)
    assert caught.value.code is ErrorCode.INVALID_REQUEST


def test_an_unknown_op_is_invalid_request() -> None:
    with pytest.raises(ReminderError) as caught:
        parse_command("explode", {"session_id": "s"})
    assert caught.value.code is ErrorCode.INVALID_REQUEST


def test_a_session_id_may_hold_any_printable_unicode_up_to_256_chars() -> None:
    command, _ = parse_command("end_turn", {"session_id": "sessión/ü 😀" * 20, "turn": 0})
    assert command.session_id.startswith("sessión")


def test_dedupe_keys_are_trimmed_and_ids_with_surrounding_whitespace_are_refused() -> None:
    spec, _ = parse_reminder({"body": "x", "dedupe_key": "  k1 "})
    assert spec.dedupe_key == "k1"
    assert code_of({"body": "x", "id": "a "}) == "HARN-RMD-001"


def test_a_resolved_spec_is_the_same_json_object_as_the_spec_it_resolves() -> None:
    spec, _ = parse_reminder({"body": "x", "tags": ["a"], "ttl_turns": 2})
    resolved = ResolvedSpec.resolve(spec, id="r-1", fired_at_turn=3)
    wire = spec.model_copy(update={"id": "r-1", "fired_at_turn": 3})
    assert resolved.model_dump_json() == wire.model_dump_json()
    assert list(ResolvedSpec.model_fields) == list(ReminderSpec.model_fields)
    assert ResolvedSpec.model_validate(resolved.model_dump(mode="json")) == resolved
    given, _ = parse_reminder({"body": "x", "id": "mine", "fired_at_turn": 0})
    kept = ResolvedSpec.resolve(given, id="other", fired_at_turn=9)
    assert (kept.id, kept.fired_at_turn) == ("mine", 0)


@pytest.mark.parametrize(
    "raw",
    [
        {"body": "x", "fired_at_turn": 0},
        {"body": "x", "id": "r-1"},
        {"body": "x", "id": None, "fired_at_turn": 0},
        {"body": "x", "id": "r\x00", "fired_at_turn": 0},
        {"body": "x", "id": " r", "fired_at_turn": 0},
        {"body": "x", "id": "r", "fired_at_turn": -1},
    ],
)
def test_a_resolved_spec_needs_an_id_and_a_turn_and_keeps_every_spec_rule(
    raw: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError):
        ResolvedSpec.model_validate(raw)


def test_control_characters_are_exactly_unicode_category_cc() -> None:
    """The one-search check against the category of every code point, alone and in text."""
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        is_control = unicodedata.category(char) == "Cc"
        assert has_control_chars(char) is is_control, hex(point)
        assert has_control_chars(f"id-{char}-7") is is_control, hex(point)
    assert has_control_chars("") is False

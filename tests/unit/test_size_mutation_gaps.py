"""Tests that close gaps mutation testing found in `core/size.py` (docs/mutation-testing.md).

The worst case and the state bound decide which configurations a service starts with and
when `decide` may skip measuring a state, so their figures are pinned: a change to either
formula must be deliberate and show up here."""

from __future__ import annotations

import pytest

from contracts.errors import ErrorCode, ReminderError
from contracts.spec import ResolvedSpec, parse_reminder
from contracts.state import ProviderMark, ProvidersState, SessionState
from core.config import CoreConfig
from core.size import (
    _MARK,
    _PROVIDERS,
    HEADER_ALLOWANCE_BYTES,
    SPEC_SKELETON_BYTES,
    WorstCase,
    check_fits,
    fits,
    json_bytes,
    spec_bytes,
    state_upper_bound,
    worst_case,
)


def test_the_worst_case_of_the_defaults_and_of_a_small_configuration() -> None:
    # Since SPEC §12: the render summary in delivered events and render replies, and the
    # mutes, acknowledgements and fired ids in the state.
    assert worst_case(CoreConfig()) == WorstCase(event=798_778, reply=921_096, state=806_274)
    small = CoreConfig(
        max_live=3, max_session_bytes=5000, max_envelope_bytes=2000, max_user_text_bytes=100
    )
    assert worst_case(small) == WorstCase(event=19_454, reply=9_746, state=508_650)


def test_the_largest_of_a_worst_case_is_whichever_part_is_largest() -> None:
    assert WorstCase(event=3, reply=1, state=2).largest() == 3
    assert WorstCase(event=1, reply=3, state=2).largest() == 3
    assert WorstCase(event=1, reply=2, state=3).largest() == 3


def test_the_state_bound_counts_every_kind_of_row_and_id() -> None:
    counts = {
        "live_bytes": 5,
        "rows": 1,
        "delivered_text": 7,
        "delivered_rows": 2,
        "delivered_ids": 3,
        "replies": 4,
        "history_bytes": 43,
        "inherited": 6,
        "mutes": 0,
        "acknowledged": 0,
        "provider_marks": 0,
    }
    # The fixed part: the state's base fields, the remembered replies' bytes and the
    # providers' trail; the live reminders and kept texts are counted as measured.
    assert state_upper_bound(**counts) == 147_100
    empty = state_upper_bound(**dict.fromkeys(counts, 0))
    steps = {
        name: state_upper_bound(**{**dict.fromkeys(counts, 0), name: 1}) - empty for name in counts
    }
    assert steps == {
        "live_bytes": 1,
        "rows": 160,
        "delivered_text": 1,
        "delivered_rows": 240,
        "delivered_ids": 515,
        "replies": 1058,
        "history_bytes": 1,
        "inherited": 1027,
        "mutes": 2762,
        "acknowledged": 48,
        "provider_marks": 898,
    }


def test_the_state_bound_holds_the_providers_trail_and_marks_at_their_longest() -> None:
    # Provider ids are up to 128 characters of any kind (a control character is stored as
    # six bytes), the counters at their largest: what each adds to the stored state is within
    # what the bound allows for it.
    mark = ProviderMark(fired_count=10**19, level=1_000_000, last_fired_turn=2**53 - 1)
    most = {"evaluations": 10**19, "budget_turn": 2**53 - 1, "budget_bytes": 10**19}

    def stored(providers: ProvidersState | None) -> int:
        return len(SessionState(session_id="s1", providers=providers).model_dump_json().encode())

    trail = stored(ProvidersState(**most)) - stored(None)
    marks = {chr(n) * 128: mark for n in range(0x0E, 0x16)}  # each stored as \u00XX
    per_mark = (stored(ProvidersState(marks=marks, **most)) - stored(None) - trail) / 8
    assert (trail, per_mark) == (127, 858.875)
    assert trail <= _PROVIDERS
    assert per_mark <= _MARK


def test_json_bytes_is_the_utf8_length_of_canonical_json() -> None:
    assert json_bytes({"b": "é", "a": [1, 2]}) == len('{"a":[1,2],"b":"é"}'.encode())


def test_fits_refuses_one_byte_over_the_limit_with_the_sizes() -> None:
    fits("state", 10, 10)
    with pytest.raises(ReminderError) as refused:
        fits("state", 11, 10)
    assert refused.value.code is ErrorCode.TOO_LARGE
    assert refused.value.message == "the state would be 11 bytes; the server's max_payload is 10"
    assert refused.value.details == {"limit": 10, "size": 11}


def test_a_configuration_dominated_by_its_envelope_has_that_worst_case() -> None:
    envelope_heavy = CoreConfig(
        max_session_bytes=1000, max_envelope_bytes=100_000, max_user_text_bytes=10, max_live=2
    )
    assert worst_case(envelope_heavy) == WorstCase(event=213_394, reply=204_176, state=504_490)


@pytest.mark.parametrize(
    ("user_text", "envelope", "limit", "part", "size"),
    [
        (100_000, 1000, 500_000, "reply", 606_116),
        (10, 100_000, 300_000, "state", 504_490),
    ],
)
def test_check_fits_names_the_first_part_that_would_not_fit(
    user_text: int, envelope: int, limit: int, part: str, size: int
) -> None:
    config = CoreConfig(
        max_session_bytes=1000,
        max_envelope_bytes=envelope,
        max_user_text_bytes=user_text,
        max_live=2,
        max_payload_bytes=limit,
    )
    assert check_fits(config, limit + HEADER_ALLOWANCE_BYTES) == (
        f"size bounds could break the invariant: a worst-case {part} is {size} bytes, "
        f"a body may take {limit} (max_payload_bytes, and the server's max_payload "
        f"less {HEADER_ALLOWANCE_BYTES} for headers) (lower REMINDERS_MAX_SESSION_BYTES, "
        "REMINDERS_MAX_ENVELOPE_BYTES, REMINDERS_MAX_USER_TEXT_BYTES or REMINDERS_MAX_LIVE)"
    )


def test_spec_bytes_adds_the_stored_size_of_each_string_to_the_skeleton() -> None:
    full, _ = parse_reminder(
        {"body": "héllo", "tags": ["a", "b"], "dedupe_key": 'k"', "originating_agent_id": "ag"}
    )
    spec = ResolvedSpec.resolve(full, id="r1", fired_at_turn=0)
    # body 6 (é is 2 bytes), id 2, dedupe key 3 (the quote is escaped), agent 2, tags 2 × (1 + 3)
    assert spec_bytes(spec) == SPEC_SKELETON_BYTES + 6 + 2 + 3 + 2 + 8
    assert spec_bytes(spec) >= json_bytes(spec.model_dump(mode="json"))
    bare = ResolvedSpec.resolve(parse_reminder({"body": "b"})[0], id="r", fired_at_turn=0)
    assert spec_bytes(bare) == SPEC_SKELETON_BYTES + 1 + 1


def test_check_fits_accepts_a_worst_case_equal_to_the_limit_and_names_the_event() -> None:
    largest = worst_case(CoreConfig()).largest()
    server = largest + HEADER_ALLOWANCE_BYTES
    assert check_fits(CoreConfig(max_payload_bytes=largest), server) is None
    assert check_fits(CoreConfig(max_payload_bytes=largest - 1), server) is not None
    limit = 798_777  # one byte below the default worst-case event
    problem = check_fits(CoreConfig(max_payload_bytes=limit), limit + HEADER_ALLOWANCE_BYTES)
    assert problem is not None and problem.startswith(
        f"size bounds could break the invariant: a worst-case event is 798778 bytes, "
        f"a body may take {limit} "
    )


def test_the_worst_case_leaves_the_server_room_for_headers() -> None:
    # NATS counts headers toward max_payload: a worst case that fills the server's limit
    # exactly would fail at publish once its headers are added.
    largest = worst_case(CoreConfig()).largest()
    config = CoreConfig(max_payload_bytes=largest)
    assert check_fits(config, largest + HEADER_ALLOWANCE_BYTES) is None
    problem = check_fits(config, largest + HEADER_ALLOWANCE_BYTES - 1)
    assert problem is not None
    assert f"a body may take {largest - 1} " in problem
    assert f"less {HEADER_ALLOWANCE_BYTES} for headers" in problem


def test_a_configuration_dominated_by_its_session_budget_has_the_inject_events_worst_case() -> None:
    # A reminder as large as the session's budget, in the event and in its copied fields.
    session_heavy = CoreConfig(
        max_live=4, max_session_bytes=100_000, max_envelope_bytes=1000, max_user_text_bytes=100
    )
    assert worst_case(session_heavy) == WorstCase(event=208_614, reply=8_776, state=603_810)

"""`bench.lean_inject` makes the core's output, byte for byte, for the injects it knows: so
`bench.gateway_floor`'s `null_lean` figure is the price of the same events made with only the
work they need, and not of less output."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.lean_gateway import lean_decide
from bench.lean_inject import LeanSessions
from contracts import commands as cmd
from contracts.errors import ReminderError
from contracts.state import SessionState
from core import decide
from services.adapters.ids import fresh_context

_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40
).filter(lambda text: text.strip() == text)

_REMINDER = st.fixed_dictionaries(
    {"body": _TEXT},
    optional={
        "dedupe_key": st.sampled_from(["k", "other"]),
        "ttl_turns": st.integers(min_value=1, max_value=50),
        "tags": st.lists(st.sampled_from(["a", "b", "ci"]), max_size=2, unique=True),
        "authority": st.sampled_from(["contract", "advisory"]),
        "role_hint": st.sampled_from(["system", "developer"]),
        "preserve_on_compact": st.booleans(),
    },
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["s-1", "s-2"]), _REMINDER, st.booleans(), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_the_lean_path_writes_the_cores_bytes(script: list[tuple[str, Any, bool, bool]]) -> None:
    states: dict[str, SessionState] = {}
    lean = LeanSessions()
    for number, (session_id, reminder, with_request, with_agent) in enumerate(script):
        raw: dict[str, Any] = {"session_id": session_id, "reminder": reminder}
        if with_request:
            raw["request_id"] = f"req-{number}"
        if with_agent:
            raw["agent_id"] = "agent-7"
        context = fresh_context()
        command, _ = cmd.parse_command("inject", raw)
        state = states.get(session_id) or SessionState()
        decision = decide(state, command, context)
        assert decision.ok
        states[session_id] = decision.state_after(state, number + 1)
        kind, encoded = lean.decide("inject", raw, context)
        assert encoded == list(decision.encoded)
        assert kind == decision.events[-1].kind


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["s-1", "s-2"]), _REMINDER), min_size=1, max_size=8))
def test_the_gateways_stand_in_decides_as_the_core_and_keeps_only_what_was_stored(
    script: list[tuple[str, Any]],
) -> None:
    states: dict[str, SessionState] = {}
    lean = LeanSessions()
    stand_in = lean_decide(lean)
    for number, (session_id, reminder) in enumerate(script):
        context = fresh_context()
        command, _ = cmd.parse_command("inject", {"session_id": session_id, "reminder": reminder})
        state = states.get(session_id) or SessionState()
        decision = decide(state, command, context)
        states[session_id] = decision.state_after(state, number + 1)
        # A decision whose events were not stored changes nothing the next one sees.
        stand_in(SessionState(), command, fresh_context())
        kept = stand_in(SessionState(), command, context)
        assert kept.encoded == decision.encoded
        assert kept.reply == decision.reply
        assert [(e.kind, e.session_id, e.event_id) for e in kept.events] == [
            (e.kind, e.session_id, e.event_id) for e in decision.events
        ]
        unchanged = SessionState()
        assert kept.state_after(unchanged, number + 1) is unchanged


def test_what_the_lean_path_does_not_know_is_refused() -> None:
    with pytest.raises(ReminderError):
        LeanSessions().decide("inject", {"session_id": "s-1"}, fresh_context())
    queued = {"session_id": "s-1", "mode": "queue", "reminder": {"body": "later"}}
    with pytest.raises(ValueError, match="only an inject"):
        LeanSessions().decide("inject", queued, fresh_context())

"""Robustness of the pure core (SPEC §2.2): `core.handle` turns any JSON value into a reply.

Any op name with any JSON value, and every op's valid command with one field replaced,
deleted or added, against an empty and a populated session: the reply is ok (its events
fold and serialize) or carries a known error code and appends nothing. Never an exception.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

from contracts.commands import COMMANDS, ClearSelector
from contracts.errors import ErrorCode
from contracts.spec import REMINDER_FIELDS
from contracts.state import SessionState
from core import CoreConfig, canonical_json, fold_all, handle
from tests.support import Driver, context_for, json_paths
from tests.unit.test_properties import SESSION, reload_event

FIELD_NAMES = sorted(
    {name for command in COMMANDS.values() for name in command.model_fields}
    | set(REMINDER_FIELDS)
    | set(ClearSelector.model_fields)
    | {"op", "content", "_meta", "reminderId", "sessionId"}
)
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)  # lone surrogates too
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.sampled_from([0, -1, 1, 2**53 - 1, 2**53, 2**63, -(2**63) - 1])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | ANY_TEXT
    | st.sampled_from(
        [
            "",
            "  ",
            SESSION,
            "contract",
            "all",
            "user_block",
            "inherited",
            "turn_start",
            "queue",
            "system-reminder",
            "x1",
            "r-00002",
        ]
    )
)
KEYS = st.sampled_from(FIELD_NAMES) | st.text(max_size=8) | ANY_TEXT
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=16,
)
RAW_OBJECTS = st.dictionaries(KEYS, JSON_VALUES, max_size=8) | st.fixed_dictionaries(
    {"session_id": st.just(SESSION)},
    optional={name: JSON_VALUES for name in FIELD_NAMES if name != "session_id"},
)
OP_NAMES = st.sampled_from(sorted(COMMANDS)) | st.text(max_size=16)

#: Valid (or nearly valid) raw commands for every op, to mutate one field at a time.
TEMPLATES: dict[str, dict[str, Any]] = {
    "inject": {
        "session_id": SESSION,
        "request_id": "q9",
        "mode": "finish_step",
        "reminder": {
            "body": "b",
            "tags": ["tests"],
            "dedupe_key": "k1",
            "ttl_turns": 2,
            "preserve_on_compact": True,
            "propagate": "all",
            "authority": "corrective",
            "role_hint": "user_block",
            "not_before": "2026-11-29T16:00:00+01:00",
            "expires_at": "2099-01-01T00:00:00Z",
            "source": "hook",
            "id": "x9",
            "fired_at_turn": 1,
            "originating_agent_id": "agent-origin",
        },
    },
    "clear": {"session_id": SESSION, "selector": {"id": "x1", "tag": "files", "dedupe_key": "k1"}},
    "checkpoint": {"session_id": SESSION, "seam": "turn_start", "turn": 3},
    "revoke": {"session_id": SESSION, "reminder_id": "r-00002"},
    "render": {
        "session_id": SESSION,
        "turn": 3,
        "format": "system-reminder",
        "user_text": "hello",
        "max_tokens": 400,
    },
    "mute": {
        "session_id": SESSION,
        "selector": {"source": "hook", "tag": "files", "provider_id": "idle_nudge"},
        "until_turn": 9,
    },
    "unmute": {"session_id": SESSION, "mute_id": "m-1"},
    "sanitize": {
        "session_id": SESSION,
        "text": "out <system-reminder>x</system-reminder>",
        "turn": 3,
        "tool_name": "bash",
    },
    "end_turn": {"session_id": SESSION, "turn": 3},
    "compact": {"session_id": SESSION, "turn": 3},
    "handoff": {
        "session_id": SESSION,
        "child_session_id": "child-1",
        "sub_agent_id": "sub-1",
        "child_turn": 1,
    },
    "inherit": {
        "session_id": SESSION,
        "parent_session_id": "parent",
        "parent_agent_id": "agent-parent",
        "handoff_event_id": "h-1",
        "sub_agent_id": "sub-1",
        "reminders": [{"body": "inherited body", "id": "i1", "ttl_turns": 2}],
    },
    "acknowledge": {
        "session_id": SESSION,
        "reminder_id": "x1",
        "turn": 3,
        "outcome": "acted",
        "by": "model",
        "note": "did it",
    },
    "forget": {"session_id": SESSION},
    "state": {"session_id": SESSION, "min_seq": 1, "timeout_ms": 10},
    "pending_injections": {"session_id": SESSION, "timeout_ms": 10},
    "events": {"session_id": SESSION, "after_stream_seq": 7, "from_session_seq": 2},
    "sessions": {"after": 3},
    "evaluate": {
        "session_id": SESSION,
        "turn": 3,
        "runtime_event_id": "rt-1",
        "view_seq": 2,
        "evaluations": [
            {
                "provider_id": "token_pressure",
                "event": "budget",
                "fired": True,
                "reason": "fired",
                "level": 850,
                "reminder": {
                    "body": "context 86% full",
                    "tags": ["token_pressure"],
                    "ttl_turns": 2,
                },
            },
            {
                "provider_id": "workspace_anchor",
                "event": "budget",
                "fired": False,
                "reason": "predicate_false",
            },
        ],
    },
}
assert set(TEMPLATES) == set(COMMANDS)


def _populated_state() -> SessionState:
    driver = Driver(SESSION)
    driver.inject("live one", id="x1", dedupe_key="k1", tags=["files"], ttl_turns=2)
    driver.inject("queued one", mode="interrupt")  # r-00002
    driver.inject("audit one", mode="queue", preserve_on_compact=True)
    driver.ok("render", turn=1)
    driver.ok("end_turn", turn=1)
    return driver.state


STATES = st.sampled_from([SessionState(), _populated_state()])


@st.composite
def mutated_commands(draw: st.DrawFn) -> tuple[str, Any]:
    """A template with one field replaced, deleted or one key added."""
    op = draw(st.sampled_from(sorted(TEMPLATES)))
    raw = copy.deepcopy(TEMPLATES[op])
    path = draw(st.sampled_from(json_paths(raw)))
    parent = raw
    for part in path[:-1]:
        parent = parent[part]
    action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
    if action == "replace":
        parent[path[-1]] = draw(JSON_VALUES)
    elif action == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(KEYS)] = draw(JSON_VALUES)
    return op, raw


def assert_handled(state: SessionState, op: str, raw: Any) -> None:
    """`handle` replies ok (and its events fold and serialize) or with a known error code."""
    decision = handle(state, op, raw, context_for(99), CoreConfig())
    reply = decision.reply
    json.dumps(reply)  # every reply can be sent
    if reply.get("ok") is True:
        after = fold_all(state, decision.events)
        assert after.session_seq == state.session_seq + len(decision.events)
        for event in decision.events:
            assert reload_event(event).to_wire() == event.to_wire()
            canonical_json(event.to_wire()).encode("utf-8")  # the log holds UTF-8
    else:
        assert reply["ok"] is False
        assert reply["error"]["code"] in {code.value for code in ErrorCode}
        assert decision.events == ()


@settings(max_examples=400, deadline=None)
@given(state=STATES, op=OP_NAMES, raw=JSON_VALUES | RAW_OBJECTS)
def test_handle_never_raises_on_any_json_value(state: SessionState, op: str, raw: Any) -> None:
    assert_handled(state, op, raw)


@settings(max_examples=400, deadline=None)
@given(state=STATES, command=mutated_commands())
def test_handle_never_raises_on_a_valid_command_with_one_field_garbled(
    state: SessionState, command: tuple[str, Any]
) -> None:
    op, raw = command
    note(f"{op} {raw!r}")
    assert_handled(state, op, raw)


def test_every_template_is_a_command_the_core_accepts_or_refuses_by_code() -> None:
    for op, raw in TEMPLATES.items():
        for state in (SessionState(), _populated_state()):
            assert_handled(state, op, copy.deepcopy(raw))

"""`render` (SPEC §4.6): what mutation testing of `core/deciders/envelope.py` showed no other
unit test pins down (docs/mutation-survivors-deciders-s18.md)."""

from __future__ import annotations

from contracts import commands as cmd
from contracts.state import SessionState
from core import CoreConfig, decide
from tests.support import context_for


def test_decide_refuses_a_user_text_over_the_configured_bound_itself() -> None:
    # `handle` and the gateway refuse it while parsing. `decide` is public: a caller that
    # builds the command without `parse_command`, or parses with a wider bound than the
    # configuration it decides with, meets the same bound here.
    config = CoreConfig(max_user_text_bytes=1024)
    command = cmd.Render.model_validate({"session_id": "s1", "turn": 0, "user_text": "é" * 513})
    decision = decide(SessionState(), command, context_for(1), config)
    assert decision.events == ()
    assert decision.reply == {
        "ok": False,
        "error": {
            "code": "too_large",
            "message": "user_text is 1026 bytes; the bound is 1024",
            "details": {"field": "user_text", "limit": 1024},
        },
    }
    exact = cmd.Render.model_validate({"session_id": "s1", "turn": 0, "user_text": "é" * 512})
    assert decide(SessionState(), exact, context_for(1), config).ok

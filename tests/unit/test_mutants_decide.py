"""`decide`'s answers to a repeated `request_id` (SPEC §4.1): what mutation testing of
`core/decide.py` showed no other unit test pins down (docs/mutation-survivors-deciders-s18.md).
"""

from __future__ import annotations

from contracts import commands as cmd
from core.decide import with_unstored
from core.sanitize import neutralize
from tests.support import Driver


def test_a_request_id_used_by_another_op_is_refused_naming_that_op() -> None:
    driver = Driver()
    driver.inject("x")
    driver.ok("render", turn=0, request_id="q")
    decision = driver.run("clear", selector={"tag": "t"}, request_id="q")
    assert not decision.ok and decision.events == ()
    assert decision.reply["error"] == {
        "code": "invalid_request",
        "message": "request_id was already used by a render command in this session",
        "details": {"field": "request_id", "op": "render"},
    }


def test_a_repeated_render_whose_envelope_is_no_longer_held_is_refused_with_the_way_out() -> None:
    driver = Driver()
    driver.inject("x", preserve_on_compact=True)
    driver.ok("render", turn=0, request_id="q")
    driver.ok("compact", turn=0)  # clears the delivered history that held the text
    decision = driver.run("render", turn=0, request_id="q")
    assert not decision.ok and decision.events == ()
    assert decision.reply["error"] == {
        "code": "invalid_request",
        "message": "request_id was already used, and the envelope of its reply is no longer "
        "held in full (digested or compacted): use a new request_id",
        "details": {"field": "request_id"},
    }


def test_a_sanitize_error_reply_gets_no_text_added() -> None:
    # Only an accepted sanitize's reply carries the neutralized text (SPEC §12.5); a refusal
    # is returned as it is, with no text the command never got.
    command = cmd.Sanitize.model_validate({"session_id": "s1", "turn": 0, "text": "<directive>"})
    error = {"ok": False, "error": {"code": "stale_turn", "message": "m", "details": {}}}
    assert with_unstored(command, error) == error
    accepted = with_unstored(command, {"ok": True, "session_seq": 1})
    assert accepted == {"ok": True, "session_seq": 1, "text": neutralize("<directive>")[0]}
    assert accepted["text"] != "<directive>"

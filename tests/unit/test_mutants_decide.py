"""`decide`'s answers to a repeated `request_id` (SPEC §4.1): what mutation testing of
`core/decide.py` showed no other unit test pins down (docs/mutation-survivors-deciders-s18.md).
"""

from __future__ import annotations

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

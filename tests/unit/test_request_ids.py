"""A `request_id` answers only for its own op (SPEC §4.1, issue #10 item C)."""

from __future__ import annotations

import pytest

from tests.support import Driver


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("inject", {"reminder": {"body": "a"}}), ("clear", {"selector": {"tag": "x"}})),
        (("inject", {"reminder": {"body": "a"}}), ("render", {"turn": 0})),
        (("end_turn", {"turn": 0}), ("compact", {"turn": 1})),
        (("compact", {"turn": 0}), ("end_turn", {"turn": 1})),
        (("checkpoint", {"seam": "turn_start", "turn": 0}), ("handoff", {"child_session_id": "c"})),
    ],
)
def test_a_request_id_reused_on_another_op_is_invalid_request(
    first: tuple[str, dict[str, object]], second: tuple[str, dict[str, object]]
) -> None:
    driver = Driver()
    driver.inject("queued", mode="interrupt")  # so a checkpoint drains, and is remembered
    driver.ok(first[0], request_id="same", **first[1])
    decision = driver.run(second[0], request_id="same", **second[1])
    assert not decision.ok
    assert decision.reply["error"]["code"] == "invalid_request"
    assert decision.reply["error"]["details"]["field"] == "request_id"
    assert decision.events == ()


def test_a_request_id_repeated_on_its_own_op_still_gets_the_first_reply() -> None:
    driver = Driver()
    first = driver.ok("inject", request_id="same", reminder={"body": "a"})
    again = driver.run("inject", request_id="same", reminder={"body": "b"})
    assert again.events == ()
    assert again.reply == first
    queued = driver.ok("inject", request_id="q", mode="queue", reminder={"body": "c"})
    assert driver.run("inject", request_id="q", reminder={"body": "c"}).reply == queued


def test_a_request_id_reused_on_another_op_names_the_op_it_was_used_by() -> None:
    driver = Driver()
    driver.ok("inject", request_id="same", reminder={"body": "a"})
    decision = driver.run("clear", request_id="same", selector={"tag": "x"})
    assert decision.reply["error"] == {
        "code": "invalid_request",
        "message": "request_id was already used by a inject command in this session",
        "details": {"field": "request_id", "op": "inject"},
    }


def test_a_repeated_render_whose_envelope_was_compacted_away_is_answered_from_the_log() -> None:
    driver = Driver()
    driver.inject("a")
    first = driver.ok("render", turn=0, request_id="r")
    driver.ok("compact", turn=0)  # clears the delivered envelope the reply's text came from
    decision = driver.run("render", turn=0, request_id="r")
    assert decision.events == ()
    # The first reply is on the render's last event, at the session_seq it names.
    assert decision.reply_in_log == first["session_seq"]
    # What is answered when the log has no such event:
    assert decision.reply["error"] == {
        "code": "invalid_request",
        "message": "request_id was already used, and the envelope of its reply is no longer "
        "held in full (digested or compacted): use a new request_id",
        "details": {"field": "request_id"},
    }

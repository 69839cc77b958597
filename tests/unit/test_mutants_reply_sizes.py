"""Which size check refuses a render too large for the server (SPEC §4.1.1), and what the
refusal says: the reply `Batch.finish` measures before anything else, each event it links,
and the reply `decide` measures once the inline placement is added; and `handle`'s parse
with the configured `user_text` bound (docs/mutation-survivors-final-s19.md)."""

from __future__ import annotations

from contracts.state import SessionState
from core import CoreConfig, Decision, handle
from core.size import json_bytes
from tests.support import Driver, context_for

#: Past `CoreConfig`'s default `user_text` bound (1,024 bytes), within the one used here.
USER_TEXT = "u" * 3000


def render_on_a_session_with_one_reminder(limit: int | None, **fields: str) -> Decision:
    """Inject a 200-byte reminder with the default configuration, then render it with
    `max_payload_bytes=limit` (the default when None) and a 4,000-byte user_text bound."""
    driver = Driver()
    driver.inject("x" * 200)
    config = CoreConfig(max_user_text_bytes=4000)
    if limit is not None:
        config = CoreConfig(max_user_text_bytes=4000, max_payload_bytes=limit)
    driver.config = config
    return driver.run("render", turn=0, **fields)


def refusal(what: str, size: int, limit: int) -> dict[str, object]:
    """The `too_large` error for `size` bytes of `what` over `limit`."""
    return {
        "code": "too_large",
        "message": f"the {what} would be {size} bytes; the server's max_payload is {limit}",
        "details": {"limit": limit, "size": size},
    }


def test_a_reply_over_the_limit_is_refused_as_the_reply_before_its_events_are_measured() -> None:
    roomy = render_on_a_session_with_one_reminder(None)
    assert roomy.ok, roomy.reply
    reply = json_bytes(roomy.reply)
    # The delivered event carries the reply and the envelope again: it is larger still, so
    # only the reply check, made first, names the reply.
    assert len(roomy.encoded[-1]) > reply
    refused = render_on_a_session_with_one_reminder(reply - 1)
    assert refused.events == ()
    assert refused.reply["error"] == refusal("reply", reply, reply - 1)


def test_an_event_over_the_limit_is_refused_naming_its_kind_and_counting_its_chain() -> None:
    roomy = render_on_a_session_with_one_reminder(None)
    assert roomy.ok, roomy.reply
    assert [event.kind for event in roomy.events] == ["fired", "delivered"]
    # Measured without its link, plus the 76 bytes of `,"chain":"<64 hex>"` it will carry.
    delivered = len(roomy.encoded[-1]) + 1
    assert json_bytes(roomy.reply) < delivered - 1

    refused = render_on_a_session_with_one_reminder(delivered - 1)
    assert refused.events == ()
    assert refused.reply["error"] == refusal("delivered event", delivered, delivered - 1)
    assert render_on_a_session_with_one_reminder(delivered).ok


def test_the_reply_with_its_inline_placement_is_measured_after_the_events() -> None:
    # The inline placement (user_text and envelope) is added to the reply after the events
    # are linked, and never stored: only `decide`'s last check sees the reply the caller gets.
    roomy = render_on_a_session_with_one_reminder(None, user_text=USER_TEXT)
    assert roomy.ok, roomy.reply
    answer = json_bytes(roomy.reply)
    assert answer > len(roomy.encoded[-1]) + 76

    refused = render_on_a_session_with_one_reminder(answer - 1, user_text=USER_TEXT)
    assert refused.events == ()
    assert refused.reply["error"] == refusal("reply", answer, answer - 1)
    exact = render_on_a_session_with_one_reminder(answer, user_text=USER_TEXT)
    assert exact.ok and exact.reply == roomy.reply


def test_a_state_of_another_session_is_refused_by_name() -> None:
    driver = Driver(session_id="s1")
    driver.inject("a reminder")
    raw = {"session_id": "s2", "reminder": {"body": "b"}}
    decision = handle(driver.state, "inject", raw, context_for(9))
    assert decision.events == ()
    assert decision.reply["error"] == {
        "code": "invalid_request",
        "message": "the state belongs to another session",
        "details": {},
    }
    # A fresh state belongs to no session yet: any session may start it.
    assert handle(SessionState(), "inject", raw, context_for(9)).ok


def test_handle_refuses_a_user_text_over_the_configured_bound_before_any_remembered_reply() -> None:
    # A repeated request_id is answered from the remembered replies only once the command
    # has parsed; `decide`'s own user_text check comes after that lookup, so only the parse,
    # with the configured bound, refuses this one.
    driver = Driver(config=CoreConfig(max_user_text_bytes=1024))
    driver.inject("a reminder")
    first = driver.ok("render", turn=0, request_id="r-1", user_text="u" * 1024)
    again = driver.run("render", turn=0, request_id="r-1", user_text="u" * 1024)
    assert again.ok and again.reply == first
    over = driver.run("render", turn=0, request_id="r-1", user_text="u" * 1025)
    assert over.events == ()
    assert over.reply["error"]["code"] == "too_large"
    assert over.reply["error"]["details"]["field"] == "user_text"

"""The size invariant (SPEC §4.1.1): every event, reply and state fits `max_payload`.

Regressions of issue #10: 36 injects of a 30 KB body pushed one session's state past 1 MiB
(the projector could not store it); a 1 MB `user_text` was accepted; an oversized handoff
could not be appended and ended in `conflict`.
"""

from __future__ import annotations

import json

import pytest

from contracts.state import DeliveredDigest, DeliveredEnvelope
from core import CoreConfig, canonical_json
from core.size import check_fits, stored_bytes, worst_case
from services.adapters.settings import PayloadTooSmall, Settings, check_payload_bounds
from tests.support import Driver

MIB = 1024 * 1024


def _state_bytes(driver: Driver) -> int:
    return len(canonical_json(driver.state.model_dump(mode="json")).encode())


def test_injects_past_the_session_budget_are_too_large_and_the_state_stays_bounded() -> None:
    driver = Driver()
    body = "x" * 30_000
    outcomes = [driver.run("inject", reminder={"body": f"{n} {body}"}) for n in range(36)]
    accepted = [d for d in outcomes if d.ok]
    refused = [d for d in outcomes if not d.ok]
    assert 0 < len(accepted) < 36
    assert all(d.reply["error"]["code"] == "too_large" for d in refused)
    assert all(d.events == () for d in refused)
    details = refused[0].reply["error"]["details"]
    assert details["budget_bytes"] == 256 * 1024
    assert details["used_bytes"] + 30_000 > 256 * 1024
    assert _state_bytes(driver) <= worst_case(CoreConfig()).state <= MIB
    # Queued reminders count against the same budget.
    assert driver.error("inject", mode="queue", reminder={"body": body}) == "too_large"


def test_a_dedupe_frees_the_budget_it_replaces() -> None:
    driver = Driver()
    body = "y" * 30_000
    for n in range(8):
        driver.ok("inject", reminder={"body": f"{n} {body}", "dedupe_key": f"k{n}"})
    assert driver.error("inject", reminder={"body": body, "dedupe_key": "new"}) == "too_large"
    driver.ok("inject", reminder={"body": body, "dedupe_key": "k0"})


def test_a_render_with_a_user_text_over_the_bound_is_too_large_and_appends_nothing() -> None:
    driver = Driver()
    driver.inject("z" * 30_000)
    assert driver.error("render", turn=0, user_text="u" * 1_000_000) == "too_large"
    # The configured bound is in UTF-8 bytes, not characters.
    small = Driver(config=CoreConfig(max_user_text_bytes=100))
    small.inject("a")
    assert small.error("render", turn=0, user_text="é" * 51) == "too_large"
    assert small.ok("render", turn=0, user_text="é" * 50)["inline"] is not None


def test_an_oversized_handoff_is_too_large_at_once() -> None:
    config = CoreConfig(max_payload_bytes=150_000)
    driver = Driver(config=config)
    for n in range(200):
        driver.inject(f"reminder {n}", propagate="all")
    agent = "😀" * 256  # copied into every handed-off spec as originating_agent_id
    decision = driver.run("handoff", child_session_id="child", agent_id=agent)
    assert not decision.ok
    assert decision.reply["error"]["code"] == "too_large"
    assert decision.events == ()
    assert driver.ok("handoff", child_session_id="child")["propagated_ids"]


def test_envelopes_are_kept_in_full_within_the_text_budget() -> None:
    driver = Driver()
    texts = []
    for n in range(3):
        for m in range(3):
            driver.inject(f"{n}.{m} " + "w" * 30_000, tags=[f"t{n}"])
        texts.append(driver.ok("render", turn=n)["envelope"]["text"])
        driver.ok("clear", selector={"tag": f"t{n}"})
    rows = driver.state.delivered
    assert [type(row) for row in rows] == [DeliveredDigest, DeliveredEnvelope, DeliveredEnvelope]
    assert sum(stored_bytes(t) for t in texts[1:]) <= 256 * 1024


def test_a_render_reply_is_remembered_without_its_text_and_rebuilt_from_its_row() -> None:
    driver = Driver()
    driver.inject("remember me")
    first = driver.ok("render", turn=0, request_id="r1")
    remembered = driver.state.recent_replies[-1].reply
    assert "text" not in remembered["envelope"]
    again = driver.run("render", turn=0, request_id="r1")
    assert again.events == ()
    assert again.reply == first
    assert json.dumps(again.reply) == json.dumps(first)  # same key order too
    # Once its row is compacted away, the reply cannot be rebuilt: said, not guessed.
    driver.ok("compact", turn=1)
    assert driver.error("render", turn=1, request_id="r1") == "invalid_request"


def test_the_default_bounds_fit_the_default_max_payload() -> None:
    worst = worst_case(CoreConfig())
    assert worst.largest() <= MIB
    assert check_fits(CoreConfig(), MIB) is None


def test_bounds_that_could_break_the_invariant_refuse_to_start_in_one_line() -> None:
    problem = check_fits(CoreConfig(), 512 * 1024)
    assert problem is not None and "max_payload" in problem and "\n" not in problem
    big = CoreConfig(max_session_bytes=900 * 1024)
    assert check_fits(big, MIB) is not None
    with pytest.raises(PayloadTooSmall, match="refusing to start"):
        check_payload_bounds(big, MIB)
    check_payload_bounds(CoreConfig(), MIB)


def test_the_bounds_are_read_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "REMINDERS_MAX_SESSION_BYTES": "65536",
            "REMINDERS_MAX_USER_TEXT_BYTES": "1024",
            "REMINDERS_MAX_ENVELOPE_BYTES": "32768",
            "REMINDERS_MAX_PAYLOAD_BYTES": "524288",
        }
    )
    core = settings.core
    assert (core.max_session_bytes, core.max_user_text_bytes) == (65536, 1024)
    assert (core.max_envelope_bytes, core.max_payload_bytes) == (32768, 524288)

"""`acknowledge` (SPEC §12.3) and its fold: what mutation testing of `core/deciders/effect.py`
and `core/fold.py` showed no other unit test pins down (docs/mutation-survivors-deciders-s18.md).

A refusal names the reminder and the field it is about, since the caller (often a model,
through the MCP tool) has no other clue; a note is redacted only when redaction is on; every
outcome recorded for a reminder is remembered, so a repeat of an earlier one is a no-op.
"""

from __future__ import annotations

from typing import Any

from contracts.events import Acknowledged
from core import CoreConfig
from tests.support import Driver


def _refusal(driver: Driver, **fields: Any) -> dict[str, Any]:
    """The error body of a refused `acknowledge`, which appended nothing."""
    before = driver.state
    decision = driver.run("acknowledge", **fields)
    assert not decision.ok and decision.events == () and driver.state == before
    error: dict[str, Any] = decision.reply["error"]
    return error


def _delivered(driver: Driver, body: str = "shown") -> str:
    """A reminder rendered once at turn 0."""
    rid = driver.inject(body)
    driver.ok("render", turn=0)
    return rid


def test_an_id_the_session_never_had_is_refused_naming_that_id() -> None:
    driver = Driver()
    _delivered(driver)
    error = _refusal(driver, reminder_id="never-seen", turn=0, outcome="acted")
    assert error == {
        "code": "unknown_reminder_id",
        "message": "no reminder with this id was ever seen in the session",
        "details": {"reminder_id": "never-seen"},
    }


def test_dismissing_a_reminder_that_is_no_longer_live_names_the_outcome_and_the_reminder() -> None:
    driver = Driver()
    rid = driver.inject("one turn", ttl_turns=1)
    driver.ok("render", turn=0)
    driver.ok("end_turn", turn=0)  # it expires by TTL: seen, delivered, no longer live
    assert rid not in driver.pending_ids()
    error = _refusal(driver, reminder_id=rid, turn=1, outcome="dismissed")
    assert error == {
        "code": "HARN-RMD-001",
        "message": "invalid outcome: dismissed needs a live reminder (a queued one is revoked)",
        "details": {"field": "outcome", "reminder_id": rid},
    }


def test_acting_on_a_never_delivered_reminder_names_the_outcome_and_the_reminder() -> None:
    driver = Driver()
    rid = driver.inject("not rendered yet")
    for outcome in ("acted", "ignored"):
        error = _refusal(driver, reminder_id=rid, turn=0, outcome=outcome)
        assert error == {
            "code": "HARN-RMD-001",
            "message": f"invalid outcome: {outcome} needs a reminder delivered at least once",
            "details": {"field": "outcome", "reminder_id": rid},
        }


def test_a_note_is_stored_as_given_when_redaction_is_off() -> None:
    driver = Driver(config=CoreConfig(redact=False))
    rid = _delivered(driver)
    note = "used sk-proj-Abc123Def456Ghi789Jkl012Mno345"
    driver.ok("acknowledge", reminder_id=rid, turn=0, outcome="acted", note=note)
    payload = driver.log[-1].payload
    assert isinstance(payload, Acknowledged)
    assert (payload.note, payload.redactions) == (note, 0)


def test_an_acknowledgement_without_a_note_is_accepted_when_redaction_is_on() -> None:
    driver = Driver(config=CoreConfig(redact=True))
    rid = _delivered(driver)
    reply = driver.ok("acknowledge", reminder_id=rid, turn=0, outcome="ignored")
    assert reply["already_acknowledged"] is False
    payload = driver.log[-1].payload
    assert isinstance(payload, Acknowledged)
    assert (payload.note, payload.redactions) == (None, 0)


def test_every_outcome_of_a_reminder_is_remembered_and_a_repeat_of_any_is_a_no_op() -> None:
    driver = Driver()
    rid = _delivered(driver)
    driver.ok("acknowledge", reminder_id=rid, turn=0, outcome="acted")
    driver.ok("acknowledge", reminder_id=rid, turn=0, outcome="ignored")
    driver.ok("acknowledge", reminder_id=rid, turn=0, outcome="dismissed")
    assert driver.state.acknowledged == {rid: ["acted", "ignored", "dismissed"]}
    for outcome in ("acted", "ignored", "dismissed"):
        again = driver.run("acknowledge", reminder_id=rid, turn=0, outcome=outcome)
        assert again.ok and again.events == (), outcome
        assert again.reply["already_acknowledged"] is True

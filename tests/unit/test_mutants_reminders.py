"""`revoke` (SPEC §4.5): what mutation testing of `core/deciders/reminders.py` showed no
other unit test pins down (docs/mutation-survivors-deciders-s18.md)."""

from __future__ import annotations

from tests.support import Driver


def test_revoking_a_reminder_that_is_not_queued_says_why_and_names_it() -> None:
    driver = Driver()
    live = driver.inject("injected directly")
    drained = driver.inject("queued, then drained", mode="steer")
    driver.ok("checkpoint", seam="iteration_start", turn=0)
    assert drained in driver.pending_ids()
    for rid in (live, drained):
        decision = driver.run("revoke", reminder_id=rid)
        assert not decision.ok and decision.events == ()
        assert decision.reply["error"] == {
            "code": "already_delivered",
            "message": "the reminder is no longer queued: it was drained or injected directly",
            "details": {"reminder_id": rid},
        }
    unknown = driver.run("revoke", reminder_id="never-seen")
    assert unknown.reply["error"] == {
        "code": "unknown_reminder_id",
        "message": "no reminder with this id was ever seen in the session",
        "details": {"reminder_id": "never-seen"},
    }

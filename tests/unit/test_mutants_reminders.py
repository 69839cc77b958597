"""`revoke` (SPEC §4.5): what mutation testing of `core/deciders/reminders.py` showed no
other unit test pins down (docs/mutation-survivors-deciders-s18.md)."""

from __future__ import annotations

from core import CoreConfig
from core.size import spec_bytes
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


def test_an_inject_that_fills_the_session_budget_exactly_is_accepted() -> None:
    probe = Driver()
    probe.inject("fills the budget", id="r")
    size = spec_bytes(probe.state.pending[0].spec)
    exact = Driver(config=CoreConfig(max_session_bytes=size))
    assert exact.inject("fills the budget", id="r") == "r"
    short = Driver(config=CoreConfig(max_session_bytes=size - 1))
    assert short.error("inject", reminder={"body": "fills the budget", "id": "r"}) == "too_large"


def test_live_and_queued_reminders_both_count_against_the_session_budget() -> None:
    probe = Driver()
    probe.inject("queued first", mode="finish_step", id="q")
    probe.inject("live first", id="p")
    queued, live = (
        spec_bytes(probe.state.queued[0].reminder),
        spec_bytes(probe.state.pending[0].spec),
    )
    driver = Driver(config=CoreConfig(max_session_bytes=queued + live + 100))
    driver.inject("queued first", mode="finish_step", id="q")
    driver.inject("live first", id="p")
    refused = driver.run("inject", reminder={"body": "x" * 200})
    assert refused.reply["error"]["code"] == "too_large"
    assert refused.reply["error"]["details"] == {
        "budget_bytes": queued + live + 100,
        "used_bytes": queued + live,
    }

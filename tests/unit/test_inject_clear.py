"""SPEC §4.1–§4.3: inject (direct, queued, dedupe), bounds, idempotency and clear."""

from __future__ import annotations

from contracts.events import Deduped, Expired, Injected, Queued
from core import CoreConfig
from tests.support import Driver


def test_a_direct_inject_appends_injected_with_the_full_spec_and_replies_its_id() -> None:
    driver = Driver()
    decision = driver.run("inject", reminder={"body": "hello", "tags": ["t"], "ttl_turns": 2})
    assert driver.kinds(decision) == ["injected"]
    payload = decision.events[0].payload
    assert isinstance(payload, Injected)
    assert payload.reminder.body == "hello"
    assert payload.reminder_id == payload.reminder.id == "r-00001"
    assert payload.reminder.fired_at_turn == 0
    assert payload.audit_only is False
    assert decision.reply == {
        "ok": True,
        "session_seq": 1,
        "reminder_id": "r-00001",
        "deduped_count": 0,
    }
    assert driver.state.pending[0].ttl_remaining == 2


def test_an_explicit_id_is_kept_and_fired_at_turn_defaults_to_the_current_turn() -> None:
    driver = Driver()
    driver.ok("end_turn", turn=4)
    driver.inject("x", id="mine")
    assert driver.state.pending[0].spec.id == "mine"
    assert driver.state.pending[0].spec.fired_at_turn == 4


def test_a_newer_reminder_with_the_same_dedupe_key_replaces_the_live_one() -> None:
    driver = Driver()
    first = driver.inject("old", dedupe_key="k", authority="contract")
    decision = driver.run(
        "inject", reminder={"body": "new", "dedupe_key": "k", "authority": "advisory"}
    )
    assert driver.kinds(decision) == ["deduped", "injected"]
    deduped = decision.events[0].payload
    assert isinstance(deduped, Deduped)
    new_id = decision.reply["reminder_id"]
    assert deduped.reminder_id == deduped.replacing_id == new_id
    assert deduped.replaced_id == first
    assert deduped.replaced_ids == [first]
    assert deduped.dropped_count == 1
    assert deduped.boundary == "inject"
    assert decision.reply["deduped_count"] == 1
    assert driver.pending_ids() == [new_id]


def test_dedupe_replaces_every_live_reminder_with_the_key_whatever_their_authority() -> None:
    driver = Driver()
    driver.inject("a", dedupe_key="k", authority="advisory", id="a")
    driver.inject("b", dedupe_key="other", id="b")
    # A queued reminder with the key is not live: it is not replaced.
    driver.inject("q", mode="steer", dedupe_key="k", id="q")
    reply = driver.ok(
        "inject", reminder={"body": "c", "dedupe_key": "k", "authority": "corrective"}
    )
    assert reply["deduped_count"] == 1
    assert driver.pending_ids() == ["b", reply["reminder_id"]]
    assert driver.queued_ids() == ["q"]


def test_a_queued_inject_records_mode_and_position_and_never_reuses_positions() -> None:
    driver = Driver()
    decision = driver.run("inject", mode="interrupt", reminder={"body": "x", "id": "q1"})
    assert driver.kinds(decision) == ["queued"]
    payload = decision.events[0].payload
    assert isinstance(payload, Queued)
    assert (payload.mode, payload.position) == ("interrupt_immediate", 1)
    assert decision.reply == {
        "ok": True,
        "session_seq": 1,
        "reminder_id": "q1",
        "queued": True,
        "position": 1,
    }
    driver.ok("revoke", reminder_id="q1")
    assert driver.ok("inject", mode="steer", reminder={"body": "y"})["position"] == 2
    driver.ok("checkpoint", seam="turn_start", turn=0)
    assert driver.ok("inject", mode="steer", reminder={"body": "z"})["position"] == 3


def test_an_id_already_live_or_queued_is_rejected() -> None:
    driver = Driver()
    driver.inject("x", id="dup")
    driver.inject("y", mode="steer", id="dupq")
    assert driver.error("inject", reminder={"body": "z", "id": "dup"}) == "HARN-RMD-001"
    assert driver.error("inject", mode="queue", reminder={"body": "z", "id": "dupq"}) == (
        "HARN-RMD-001"
    )


def test_an_id_may_be_reused_once_the_reminder_is_gone() -> None:
    driver = Driver()
    driver.inject("x", id="again")
    driver.ok("clear", selector={"id": "again"})
    driver.inject("x2", id="again")
    assert driver.pending_ids() == ["again"]


def test_source_inherited_is_set_only_by_propagation() -> None:
    assert Driver().error("inject", reminder={"body": "x", "source": "inherited"}) == (
        "HARN-RMD-001"
    )


def test_more_than_the_live_bound_is_too_many_and_appends_nothing() -> None:
    driver = Driver(config=CoreConfig(max_live=3))
    driver.inject("a")
    driver.inject("b", mode="steer")
    driver.inject("c", dedupe_key="k")
    assert driver.error("inject", reminder={"body": "d"}) == "too_many"
    assert driver.error("inject", mode="steer", reminder={"body": "d"}) == "too_many"
    # Replacing a live reminder through its dedupe key does not grow the session.
    driver.ok("inject", reminder={"body": "c2", "dedupe_key": "k"})


def test_a_body_over_the_configured_bound_is_too_large() -> None:
    driver = Driver(config=CoreConfig(max_body_bytes=10))
    assert driver.error("inject", reminder={"body": "x" * 11}) == "too_large"


def test_a_repeated_request_id_returns_the_first_reply_and_appends_nothing() -> None:
    driver = Driver()
    first = driver.run("inject", request_id="req-1", reminder={"body": "x"})
    assert first.events[-1].reply == first.reply
    assert first.events[-1].request_id == "req-1"
    again = driver.run("inject", request_id="req-1", reminder={"body": "other"})
    assert again.events == ()
    assert again.reply == first.reply
    assert len(driver.state.pending) == 1


def test_the_state_remembers_only_the_last_256_request_ids() -> None:
    driver = Driver()
    for n in range(257):
        driver.ok("inject", request_id=f"req-{n}", reminder={"body": f"b{n}", "ttl_turns": 1})
        if n % 200 == 199:
            driver.ok("end_turn", turn=n)
    remembered = [row.request_id for row in driver.state.recent_replies]
    assert len(remembered) == 256
    assert remembered[0] == "req-1"
    assert remembered[-1] == "req-256"
    again = driver.run("inject", request_id="req-0", reminder={"body": "fresh"})
    assert driver.kinds(again) == ["injected"]


def test_the_last_event_of_a_batch_carries_the_reply_and_the_others_none() -> None:
    driver = Driver()
    driver.inject("a", dedupe_key="k")
    decision = driver.run("inject", reminder={"body": "b", "dedupe_key": "k"})
    assert decision.events[0].reply is None
    assert decision.events[1].reply == decision.reply
    assert decision.reply["session_seq"] == decision.events[-1].session_seq == 3


def test_clear_expires_matching_live_reminders_when_every_selector_matches() -> None:
    driver = Driver()
    driver.inject("a", id="a", tags=["x", "y"], dedupe_key="k1", ttl_turns=3)
    driver.inject("b", id="b", tags=["y"], dedupe_key="k2")
    driver.inject("c", id="c", tags=["z"])
    decision = driver.run("clear", selector={"tag": " y ", "dedupe_key": "k1", "id": ""})
    assert decision.reply["removed_count"] == 1
    expired = decision.events[0].payload
    assert isinstance(expired, Expired)
    assert (expired.reminder_id, expired.reason, expired.expired_at_boundary) == (
        "a",
        "cleared",
        "clear",
    )
    assert expired.ttl_turns_before == 3
    assert driver.pending_ids() == ["b", "c"]
    assert driver.ok("clear", selector={"tag": "y"})["removed_count"] == 1
    assert driver.pending_ids() == ["c"]


def test_a_clear_that_matches_nothing_appends_nothing() -> None:
    driver = Driver()
    driver.inject("a")
    decision = driver.run("clear", selector={"tag": "none"})
    assert decision.reply == {"ok": True, "session_seq": 1, "removed_count": 0}
    assert decision.events == ()


def test_a_clear_without_any_selector_left_after_trim_is_harn_rmd_001() -> None:
    driver = Driver()
    assert driver.error("clear", selector={"tag": "  ", "id": ""}) == "HARN-RMD-001"
    assert driver.error("clear", selector={}) == "HARN-RMD-001"
    assert driver.error("clear", selector={"colour": "x"}) == "HARN-RMD-001"
    assert driver.error("clear") == "HARN-RMD-001"

"""SPEC §4.4–§4.5: seams drain queued reminders; revoke's four outcomes."""

from __future__ import annotations

import pytest

from contracts.events import Injected
from tests.support import Driver


def queue_one_of_each(driver: Driver) -> None:
    driver.inject("i", mode="interrupt_immediate", id="i")
    driver.inject("f", mode="finish_step", id="f")
    driver.inject("a", mode="audit_only", id="a")


@pytest.mark.parametrize(
    ("seam", "drained"),
    [
        ("iteration_start", ["i", "f"]),
        ("turn_start", ["i", "f"]),
        ("post_tool_dispatch", ["i", "f"]),
        ("iteration_end", ["i", "f"]),
        ("turn_end", ["i", "f"]),
        ("pre_tool_dispatch", ["i"]),
        ("daemon_idle_pre", ["i"]),
        ("daemon_idle_post", ["i"]),
        ("loop_exit", ["a"]),
    ],
)
def test_each_seam_drains_exactly_its_modes_oldest_first(seam: str, drained: list[str]) -> None:
    driver = Driver()
    queue_one_of_each(driver)
    reply = driver.ok("checkpoint", seam=seam, turn=0)
    assert reply["drained"] == drained
    assert [row.spec.id for row in driver.state.pending] == drained
    assert sorted(driver.queued_ids() + drained) == ["a", "f", "i"]


def test_pre_tool_dispatch_skips_the_tool_batch_only_when_it_drained_something() -> None:
    driver = Driver()
    driver.inject("f", mode="finish_step")
    assert driver.ok("checkpoint", seam="pre_tool_dispatch", turn=0)["dispatch_skipped"] is False
    driver.inject("i", mode="interrupt")
    assert driver.ok("checkpoint", seam="pre_tool_dispatch", turn=0)["dispatch_skipped"] is True
    assert driver.ok("checkpoint", seam="turn_start", turn=0)["dispatch_skipped"] is False


def test_a_drained_reminder_dedupes_exactly_as_a_direct_inject() -> None:
    driver = Driver()
    driver.inject("live", dedupe_key="k", id="live")
    driver.inject("q1", mode="steer", dedupe_key="k", id="q1")
    driver.inject("q2", mode="steer", dedupe_key="k", id="q2")
    decision = driver.run("checkpoint", seam="iteration_end", turn=1)
    assert driver.kinds(decision) == ["deduped", "injected", "deduped", "injected"]
    assert decision.events[0].payload.replaced_ids == ["live"]  # type: ignore[union-attr]
    assert decision.events[2].payload.replaced_ids == ["q1"]  # type: ignore[union-attr]
    assert driver.pending_ids() == ["q2"]
    assert decision.events[0].turn == 1


def test_loop_exit_records_audit_only_reminders_that_never_render_nor_dedupe() -> None:
    driver = Driver()
    driver.inject("live", dedupe_key="k", id="live")
    driver.inject("audit", mode="queue", dedupe_key="k", id="audit")
    decision = driver.run("checkpoint", seam="loop_exit", turn=0)
    assert driver.kinds(decision) == ["injected"]
    payload = decision.events[0].payload
    assert isinstance(payload, Injected)
    assert payload.audit_only is True
    assert driver.pending_ids() == ["live", "audit"]
    # A later direct inject with the key replaces `live` but not the audit-only record.
    driver.inject("newer", dedupe_key="k", id="newer")
    assert driver.pending_ids() == ["audit", "newer"]
    envelope = driver.ok("render", turn=0)["envelope"]
    assert envelope["directive_ids"] == ["newer"]


def test_an_unknown_seam_is_invalid_request() -> None:
    assert Driver().error("checkpoint", seam="coffee_break", turn=0) == "invalid_request"


def test_a_checkpoint_with_nothing_to_drain_appends_nothing() -> None:
    driver = Driver()
    decision = driver.run("checkpoint", seam="turn_start", turn=3)
    assert decision.events == ()
    assert decision.reply == {
        "ok": True,
        "session_seq": 0,
        "drained": [],
        "dispatch_skipped": False,
    }


def test_a_checkpoint_for_an_older_turn_is_stale_turn() -> None:
    driver = Driver()
    driver.ok("end_turn", turn=5)
    driver.inject("q", mode="steer")
    assert driver.error("checkpoint", seam="turn_start", turn=4) == "stale_turn"
    driver.ok("checkpoint", seam="turn_start", turn=5)


def test_revoking_a_queued_reminder_appends_revoked_and_then_reports_already_revoked() -> None:
    driver = Driver()
    driver.inject("q", mode="steer", id="q")
    decision = driver.run("revoke", reminder_id="q")
    assert driver.kinds(decision) == ["revoked"]
    assert decision.reply == {"ok": True, "session_seq": 2, "status": "revoked"}
    assert driver.queued_ids() == []
    again = driver.run("revoke", reminder_id="q")
    assert again.events == ()
    assert again.reply == {"ok": True, "session_seq": 2, "status": "already_revoked"}
    assert driver.ok("checkpoint", seam="turn_start", turn=0)["drained"] == []


def test_revoking_a_drained_or_directly_injected_reminder_is_already_delivered() -> None:
    driver = Driver()
    driver.inject("q", mode="steer", id="q")
    driver.ok("checkpoint", seam="turn_start", turn=0)
    assert driver.error("revoke", reminder_id="q") == "already_delivered"
    driver.inject("d", id="d")
    assert driver.error("revoke", reminder_id="d") == "already_delivered"


def test_revoking_an_id_never_seen_is_unknown_reminder_id() -> None:
    assert Driver().error("revoke", reminder_id="ghost") == "unknown_reminder_id"


def test_revoking_an_id_revoked_once_but_now_live_again_is_already_delivered() -> None:
    driver = Driver()
    driver.inject("q", mode="steer", id="again")
    driver.ok("revoke", reminder_id="again")
    driver.inject("now direct", id="again")
    assert driver.error("revoke", reminder_id="again") == "already_delivered"


def test_revoking_a_delivered_reminder_says_it_is_no_longer_queued() -> None:
    driver = Driver()
    driver.inject("d", id="d")
    decision = driver.run("revoke", reminder_id="d")
    assert not decision.ok and decision.events == ()
    assert decision.reply["error"] == {
        "code": "already_delivered",
        "message": "the reminder is no longer queued: it was drained or injected directly",
        "details": {"reminder_id": "d"},
    }


def test_revoking_an_id_never_seen_names_it_in_the_refusal() -> None:
    decision = Driver().run("revoke", reminder_id="ghost")
    assert not decision.ok and decision.events == ()
    assert decision.reply["error"] == {
        "code": "unknown_reminder_id",
        "message": "no reminder with this id was ever seen in the session",
        "details": {"reminder_id": "ghost"},
    }

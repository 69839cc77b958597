"""SPEC §4.7–§4.8: the post-turn TTL pass and compaction."""

from __future__ import annotations

from contracts.events import Compacted, Expired, PostTurn
from tests.support import Driver


def test_ttl_one_lives_until_the_next_end_turn() -> None:
    driver = Driver()
    rid = driver.inject("short", ttl_turns=1)
    assert driver.ok("render", turn=0)["envelope"]["directive_ids"] == [rid]
    decision = driver.run("end_turn", turn=0)
    assert driver.kinds(decision) == ["expired", "post_turn"]
    expired = decision.events[0].payload
    assert isinstance(expired, Expired)
    assert (expired.reason, expired.ttl_turns_before, expired.expired_at_turn) == ("ttl", 1, 0)
    assert expired.expired_at_boundary == "post_turn"
    assert driver.pending_ids() == []


def test_end_turn_decrements_ttls_above_one_and_reports_counts() -> None:
    driver = Driver()
    two = driver.inject("two", ttl_turns=2)
    driver.inject("forever")
    one = driver.inject("one", ttl_turns=1)
    decision = driver.run("end_turn", turn=0)
    post = decision.events[-1].payload
    assert isinstance(post, PostTurn)
    assert post.decremented_ids == [two]
    assert (post.expired_count, post.decremented_count, post.remaining_count) == (1, 1, 2)
    assert decision.reply == {
        "ok": True,
        "session_seq": 5,
        "expired_count": 1,
        "decremented_count": 1,
        "remaining_count": 2,
    }
    assert one not in driver.pending_ids()
    assert driver.state.pending[0].ttl_remaining == 1
    assert driver.state.last_ended_turn == 0


def test_post_turn_is_appended_even_when_nothing_changed() -> None:
    driver = Driver()
    decision = driver.run("end_turn", turn=0)
    assert driver.kinds(decision) == ["post_turn"]
    assert driver.state.last_ended_turn == 0


def test_a_ttl_is_never_decremented_twice_for_one_turn() -> None:
    driver = Driver()
    driver.inject("x", ttl_turns=3)
    driver.ok("end_turn", turn=2)
    for turn in (2, 1, 0):
        decision = driver.run("end_turn", turn=turn)
        assert decision.events == ()
        assert decision.reply == {"ok": True, "session_seq": 2, "already_applied": True}
    assert driver.state.pending[0].ttl_remaining == 2


def test_reminders_not_yet_fired_keep_their_ttl() -> None:
    driver = Driver()
    driver.inject("future", ttl_turns=1, fired_at_turn=3)
    driver.ok("end_turn", turn=0)
    assert driver.state.pending[0].ttl_remaining == 1
    driver.ok("end_turn", turn=3)
    assert driver.pending_ids() == []


def test_the_rendered_ttl_is_the_current_remaining_ttl() -> None:
    driver = Driver()
    driver.inject("x", ttl_turns=3)
    driver.ok("end_turn", turn=0)
    driver.inject("y")
    text = driver.ok("render", turn=1)["envelope"]["text"]
    assert 'ttl_turns="2"' in text


def test_compaction_runs_the_ttl_pass_expires_unpreserved_and_reissues_preserved() -> None:
    driver = Driver()
    keep = driver.inject("keep", preserve_on_compact=True, ttl_turns=3)
    gone = driver.inject("gone", ttl_turns=4)
    short = driver.inject("short", ttl_turns=1, preserve_on_compact=True)
    driver.ok("render", turn=0)
    decision = driver.run("compact", turn=0)
    assert driver.kinds(decision) == ["expired", "expired", "compacted"]
    ttl_expiry, compaction_expiry = (event.payload for event in decision.events[:2])
    assert isinstance(ttl_expiry, Expired) and isinstance(compaction_expiry, Expired)
    assert (ttl_expiry.reminder_id, ttl_expiry.reason, ttl_expiry.expired_at_boundary) == (
        short,
        "ttl",
        "pre_compact",
    )
    assert (compaction_expiry.reminder_id, compaction_expiry.reason) == (gone, "compaction")
    assert compaction_expiry.ttl_turns_before == 3
    compacted = decision.events[-1].payload
    assert isinstance(compacted, Compacted)
    assert compacted.decremented_ids == [keep, gone]
    assert compacted.preserved_ids == [keep]
    assert compacted.directives_cleared == 3
    assert decision.reply == {
        "ok": True,
        "session_seq": decision.events[-1].session_seq,
        "expired_count": 1,
        "compacted_count": 1,
        "preserved_count": 1,
        "directives_cleared": 3,
    }
    assert driver.state.delivered == []
    assert driver.state.compactions == 1
    row = driver.state.pending[0]
    assert (row.spec.id, row.ttl_remaining, row.delivered) == (keep, 2, False)
    # The compaction counted as turn 0's pass.
    assert driver.run("end_turn", turn=0).reply["already_applied"] is True
    # And a preserved reminder is re-issued after compaction.
    assert driver.ok("render", turn=1)["envelope"]["directive_ids"] == [keep]


def test_compaction_skips_the_ttl_pass_for_an_already_ended_turn() -> None:
    driver = Driver()
    driver.inject("keep", preserve_on_compact=True, ttl_turns=2)
    driver.ok("end_turn", turn=0)
    decision = driver.run("compact", turn=0)
    assert driver.kinds(decision) == ["compacted"]
    assert decision.events[0].payload.decremented_ids == []  # type: ignore[union-attr]
    assert driver.state.pending[0].ttl_remaining == 1


def test_compaction_leaves_queued_reminders_alone() -> None:
    driver = Driver()
    driver.inject("q", mode="steer", id="q")
    driver.ok("compact", turn=0)
    assert driver.queued_ids() == ["q"]


def test_without_compaction_the_delivered_texts_only_grow_by_appending() -> None:
    driver = Driver()
    texts: list[str] = []
    for turn in range(5):
        driver.inject(f"turn {turn}", ttl_turns=1)
        driver.ok("render", turn=turn)
        now = [row.text for row in driver.state.delivered]  # type: ignore[union-attr]
        assert now[: len(texts)] == texts
        texts = now
        driver.ok("end_turn", turn=turn)
    assert len(texts) == 5


def test_only_the_last_64_envelopes_are_kept_in_full() -> None:
    driver = Driver()
    for turn in range(66):
        driver.inject(f"turn {turn}", ttl_turns=1)
        driver.ok("render", turn=turn)
        driver.ok("end_turn", turn=turn)
    rows = driver.state.delivered
    assert len(rows) == 66
    assert [type(row).__name__ for row in rows[:3]] == [
        "DeliveredDigest",
        "DeliveredDigest",
        "DeliveredEnvelope",
    ]
    assert rows[0].turn_number == 0

"""`core/rules.py`: what mutation testing showed no other unit test pins down
(docs/mutation-survivors-deciders-s18.md)."""

from __future__ import annotations

from typing import Any

from contracts.spec import ReminderSpec, ResolvedSpec
from contracts.state import DeliveredEnvelope, PendingRow
from core.rules import compact_dedupe, rebuilt_reply, unchanged_durable


def _spec(body: str, key: str | None, **fields: Any) -> ResolvedSpec:
    spec = ReminderSpec(body=body, dedupe_key=key, **fields)
    return ResolvedSpec.resolve(spec, id=f"{key}-{body}", fired_at_turn=0)


def _live(spec: ResolvedSpec) -> list[PendingRow]:
    return [
        PendingRow(
            spec=spec,
            ttl_remaining=spec.ttl_turns,
            delivered=False,
            delivered_at_turn=None,
            audit_only=False,
        )
    ]


def test_only_a_durable_reminder_with_a_dedupe_key_can_be_unchanged() -> None:
    # SPEC §9.3: the skip is for a durable reminder (`preserve_on_compact`, no TTL) live with
    # the same key, body and fields. Without a key a repeat is a new reminder; a reminder
    # with a TTL is not durable, and replaces the durable one by its key.
    keyless = _spec("same", None, preserve_on_compact=True)
    assert unchanged_durable(_live(keyless), keyless) is None
    durable = _spec("same", "k", preserve_on_compact=True)
    assert unchanged_durable(_live(durable), durable) is not None
    assert unchanged_durable(_live(durable), _spec("same", "k", ttl_turns=2)) is None
    assert unchanged_durable(_live(durable), _spec("same", "k", preserve_on_compact=False)) is None


def test_compaction_keeps_the_newest_of_three_same_key_reminders_and_drops_the_others() -> None:
    # Three rows can share a key when some are `audit_only` (exempt from inject-time dedupe).
    rows = [_live(_spec(body, "k", preserve_on_compact=True))[0] for body in ("a", "b", "c")]
    (group,) = compact_dedupe(rows)
    assert group.survivor.spec.body == "c"
    assert [row.spec.body for row in group.dropped] == ["a", "b"]


def _envelope(turn: int, text: str) -> DeliveredEnvelope:
    return DeliveredEnvelope(
        turn_number=turn,
        speaker="harness",
        directive_ids=["a"],
        text=text,
        format="context-directives",
        nonce=None,
    )


def test_a_remembered_render_reply_takes_back_the_text_of_its_own_turn() -> None:
    # The same reminder rendered at turns 0 and 1 (the texts differ: a directive carries its
    # remaining `ttl_turns`): a repeat of turn 0's request gets turn 0's text, although turn
    # 1's row is newer and lists the same ids.
    remembered = {"ok": True, "envelope": {"turn_number": 0, "directive_ids": ["a"]}}
    delivered = [_envelope(0, "turn zero"), _envelope(1, "turn one")]
    rebuilt = rebuilt_reply(remembered, delivered)
    assert rebuilt is not None and rebuilt["envelope"]["text"] == "turn zero"
    assert rebuilt_reply(remembered, delivered[1:]) is None


def test_a_remembered_reply_that_still_holds_its_text_is_answered_as_it_is() -> None:
    # `remembered_reply` strips the text, but a reply remembered with it needs nothing taken
    # back from `delivered`, even once the row it came from is gone.
    held = {"ok": True, "envelope": {"turn_number": 0, "directive_ids": ["a"], "text": "t"}}
    assert rebuilt_reply(held, []) == held

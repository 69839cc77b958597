"""`core/rules.py`: what mutation testing showed no other unit test pins down
(docs/mutation-survivors-deciders-s18.md)."""

from __future__ import annotations

from typing import Any

from contracts.spec import ReminderSpec, ResolvedSpec
from contracts.state import PendingRow
from core.rules import compact_dedupe, unchanged_durable


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

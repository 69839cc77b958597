"""The turn boundaries: `end_turn` and `compact` (SPEC §4.7, §4.8)."""

from __future__ import annotations

from typing import Literal

from contracts import commands as cmd
from contracts import events as ev
from contracts.replies import AlreadyAppliedReply, CompactReply, EndTurnReply, Reply
from core import rules
from core.batch import Batch
from core.config import CoreConfig
from core.deciders.control import end_mutes


def _emit_ttl_pass(
    batch: Batch, ttl: rules.TtlPass, turn: int, boundary: Literal["post_turn", "pre_compact"]
) -> None:
    """`expired{reason: ttl}` for each expiring row; the decrements ride on the boundary's
    own event (`post_turn` or `compacted`)."""
    for row in ttl.expiring:
        batch.emit(
            ev.Expired(
                reminder_id=row.spec.id,
                reason="ttl",
                ttl_turns_before=row.ttl_remaining,
                expired_at_turn=turn,
                expired_at_boundary=boundary,
            )
        )


def end_turn(batch: Batch, command: cmd.EndTurn, config: CoreConfig) -> Reply:
    """The post-turn TTL pass, once per turn: expiries, then one `post_turn`."""
    if not rules.ttl_pass_due(batch.scratch.last_ended_turn, command.turn):
        return AlreadyAppliedReply(session_seq=0)
    ttl = rules.ttl_pass(batch.scratch.pending, command.turn)
    _emit_ttl_pass(batch, ttl, command.turn, "post_turn")
    end_mutes(batch, command.turn)
    expired, decremented = len(ttl.expiring), ttl.decremented_ids
    remaining = len(batch.scratch.pending)
    batch.emit(
        ev.PostTurn(
            turn_number=command.turn,
            decremented_ids=decremented,
            expired_count=expired,
            decremented_count=len(decremented),
            remaining_count=remaining,
        )
    )
    return EndTurnReply(
        session_seq=0,
        expired_count=expired,
        decremented_count=len(decremented),
        remaining_count=remaining,
    )


def _emit_compaction_dedupes(batch: Batch, plan: rules.Compaction) -> None:
    for group in plan.deduped:
        survivor, dropped = group.survivor.spec, group.dropped_ids
        assert survivor.dedupe_key is not None
        batch.emit(
            ev.Deduped(
                reminder_id=survivor.id,
                replacing_id=survivor.id,
                replaced_id=dropped[0],
                replaced_ids=dropped,
                dropped_reminder_ids=dropped,
                dedupe_key=survivor.dedupe_key,
                dropped_count=len(dropped),
                boundary="compact",
            )
        )


def compact(batch: Batch, command: cmd.Compact, config: CoreConfig) -> Reply:
    """The TTL pass if due, expiry of what compaction does not preserve, dedupe of what it
    keeps, then one `compacted`."""
    plan = rules.compaction(batch.scratch.pending, command.turn, batch.scratch.last_ended_turn)
    _emit_ttl_pass(batch, plan.ttl, command.turn, "pre_compact")
    if rules.ttl_pass_due(batch.scratch.last_ended_turn, command.turn):
        end_mutes(batch, command.turn)  # the pre-compact pass counts as the turn's pass
    for row in plan.compacted:
        batch.emit(
            ev.Expired(
                reminder_id=row.spec.id,
                reason="compaction",
                ttl_turns_before=plan.ttl_before(row),
                expired_at_turn=command.turn,
                expired_at_boundary="pre_compact",
            )
        )
    _emit_compaction_dedupes(batch, plan)
    cleared = rules.directives_cleared(batch.scratch.delivered)
    batch.emit(
        ev.Compacted(
            turn_number=command.turn,
            decremented_ids=plan.ttl.decremented_ids,
            preserved_ids=plan.preserved_ids,
            directives_cleared=cleared,
        )
    )
    return CompactReply(
        session_seq=0,
        expired_count=len(plan.ttl.expiring),
        compacted_count=len(plan.compacted),
        preserved_count=len(plan.preserved),
        directives_cleared=cleared,
    )

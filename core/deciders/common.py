"""What several deciders share: the rejection helper, the turn and budget checks, and the
path by which a reminder goes live (`deduped`? then `injected`)."""

from __future__ import annotations

from typing import Any

from contracts import events as ev
from contracts.errors import ErrorCode, ReminderError
from contracts.spec import ReminderSpec, ResolvedSpec
from contracts.state import PendingRow, SessionState
from core import rules
from core.batch import Batch
from core.config import CoreConfig
from core.fold import Scratch
from core.size import spec_bytes


def reject(code: ErrorCode, message: str, **details: Any) -> ReminderError:
    """A coded rejection (SPEC §2.2) with its details; the caller raises it."""
    return ReminderError(code, message, details)


def live_ids(scratch: Scratch) -> set[str]:
    """Ids of the session's live (pending) reminders."""
    return {row.spec.id for row in scratch.pending}


def queued_ids(scratch: Scratch) -> set[str]:
    """Ids of the session's queued reminders."""
    return {row.reminder.id for row in scratch.queued}


def resolve(spec: ReminderSpec, batch: Batch) -> ResolvedSpec:
    """Fill `id` and `fired_at_turn` from the context and the session (SPEC §2.1)."""
    return ResolvedSpec.resolve(
        spec, id=batch.context.new_reminder_id, fired_at_turn=batch.scratch.turn
    )


def check_turn(state: SessionState, turn: int) -> None:
    """Refuse a turn lower than the highest the session has seen (`stale_turn`)."""
    if turn < state.turn:
        raise reject(
            ErrorCode.STALE_TURN,
            f"turn {turn} is lower than the highest turn seen ({state.turn})",
            turn=turn,
            highest_turn=state.turn,
        )


def budget_used(batch: Batch, spec: ResolvedSpec, *, replacing: bool) -> int:
    """Stored bytes the session's reminders take before `spec` comes in, without those it
    replaces by dedupe."""
    used = rules.session_bytes(batch.scratch.pending, batch.scratch.queued)
    if replacing:
        victims = rules.dedupe_victims(batch.scratch.pending, spec.dedupe_key)
        used -= sum(spec_bytes(row.spec) for row in victims)
    return used


def check_budget(batch: Batch, spec: ResolvedSpec, config: CoreConfig, *, replacing: bool) -> None:
    """Live plus queued reminder bytes stay within the session budget (SPEC §4.1.1)."""
    used = budget_used(batch, spec, replacing=replacing)
    size = spec_bytes(spec)
    if used + size > config.max_session_bytes:
        raise reject(
            ErrorCode.TOO_LARGE,
            f"the reminder takes {size} bytes and the session's reminders already take "
            f"{used}; the budget is {config.max_session_bytes}",
            budget_bytes=config.max_session_bytes,
            used_bytes=used,
        )


def expire(
    batch: Batch,
    row: PendingRow,
    reason: ev.ExpiredReason,
    boundary: ev.ExpiredBoundary,
) -> None:
    """`expired` for a live reminder, at the command's turn."""
    batch.emit(
        ev.Expired(
            reminder_id=row.spec.id,
            reason=reason,
            ttl_turns_before=row.ttl_remaining,
            expired_at_turn=batch.turn,
            expired_at_boundary=boundary,
        )
    )


def make_live(batch: Batch, spec: ResolvedSpec, *, audit_only: bool, redactions: int = 0) -> int:
    """`deduped`? then `injected` for one reminder; returns how many it replaced."""
    replaced = [
        row.spec.id
        for row in rules.dedupe_victims(
            batch.scratch.pending, spec.dedupe_key, newcomer_audit_only=audit_only
        )
    ]
    reminder_id = spec.id
    if replaced and spec.dedupe_key is not None:
        batch.emit(
            ev.Deduped(
                reminder_id=reminder_id,
                replacing_id=reminder_id,
                replaced_id=replaced[0],
                replaced_ids=replaced,
                dropped_reminder_ids=replaced,
                dedupe_key=spec.dedupe_key,
                dropped_count=len(replaced),
                boundary="inject",
            )
        )
    batch.emit(
        ev.Injected(
            reminder_id=reminder_id,
            tags=spec.tags,
            dedupe_key=spec.dedupe_key,
            source=spec.source,
            role_hint=spec.role_hint,
            authority=spec.authority,
            ttl_turns=spec.ttl_turns,
            propagate=spec.propagate,
            originating_agent_id=spec.originating_agent_id,
            audit_only=audit_only,
            reminder=spec,
            redactions=redactions,
        )
    )
    return len(replaced)

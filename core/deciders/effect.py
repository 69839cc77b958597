"""What became of a reminder: `acknowledge` (SPEC §12.3), and the deadline pass every
command runs first (§12.4)."""

from __future__ import annotations

from contracts import commands as cmd
from contracts import events as ev
from contracts.errors import ErrorCode
from contracts.replies import AcknowledgeReply, Reply
from core.batch import Batch
from core.clock import past_deadline
from core.config import CoreConfig
from core.deciders.common import expire, reject
from core.redact import redact


def expire_past_deadline(batch: Batch) -> None:
    """`expired {reason: deadline}` for every live reminder whose `expires_at` is at or
    before the command's time, before the command's own rule runs, in its batch."""
    for row in past_deadline(batch.scratch.pending, batch.context.occurred_at):
        expire(batch, row, "deadline", "deadline")


def check_expires_after_now(batch: Batch, expires_at: str | None) -> None:
    """An injected reminder's `expires_at` must be later than the injecting command's time
    (SPEC §12.4; `HARN-RMD-001`)."""
    now = batch.context.occurred_at
    if expires_at is not None and expires_at <= now:
        raise reject(
            ErrorCode.INVALID_OPTION,
            f"invalid expires_at: {expires_at} is not later than the command's time {now}",
            field="expires_at",
            occurred_at=now,
        )


def acknowledge(batch: Batch, command: cmd.Acknowledge, config: CoreConfig) -> Reply:
    """`acknowledged`, and for `dismissed` the reminder's removal (`expired {reason:
    dismissed}`); a repeat of an outcome already recorded appends nothing."""
    scratch = batch.scratch
    target = command.reminder_id
    if not scratch.has_seen(target):
        raise reject(
            ErrorCode.UNKNOWN_REMINDER_ID,
            "no reminder with this id was ever seen in the session",
            reminder_id=target,
        )
    if command.outcome in scratch.acknowledged.get(target, []):
        return AcknowledgeReply(
            session_seq=0, reminder_id=target, outcome=command.outcome, already_acknowledged=True
        )
    live = next((row for row in scratch.pending if row.spec.id == target), None)
    if command.outcome == "dismissed" and live is None:
        raise reject(
            ErrorCode.INVALID_OPTION,
            "invalid outcome: dismissed needs a live reminder (a queued one is revoked)",
            field="outcome",
            reminder_id=target,
        )
    if command.outcome != "dismissed" and not scratch.has_fired(target):
        raise reject(
            ErrorCode.INVALID_OPTION,
            f"invalid outcome: {command.outcome} needs a reminder delivered at least once",
            field="outcome",
            reminder_id=target,
        )
    note, redactions = command.note, 0
    if note is not None and config.redact:
        note, redactions = redact(note)
    batch.emit(
        ev.Acknowledged(
            reminder_id=target,
            turn_number=command.turn,
            outcome=command.outcome,
            by=command.by,
            note=note,
            redactions=redactions,
        )
    )
    if live is not None and command.outcome == "dismissed":
        expire(batch, live, "dismissed", "acknowledge")
    return AcknowledgeReply(
        session_seq=0, reminder_id=target, outcome=command.outcome, already_acknowledged=False
    )

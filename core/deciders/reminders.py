"""What a caller does to a session's reminders: inject, clear, checkpoint, revoke (SPEC
§4.2–§4.5)."""

from __future__ import annotations

from contracts import commands as cmd
from contracts import events as ev
from contracts.errors import ErrorCode
from contracts.replies import (
    CheckpointReply,
    ClearReply,
    InjectedReply,
    QueuedReply,
    Reply,
    RevokeReply,
)
from core import rules
from core.batch import Batch
from core.config import CoreConfig
from core.deciders.common import (
    check_budget,
    check_turn,
    expire,
    live_ids,
    make_live,
    queued_ids,
    reject,
    resolve,
)
from core.deciders.effect import check_expires_after_now
from core.redact import redact


def inject(batch: Batch, command: cmd.Inject, config: CoreConfig) -> Reply:
    """A reminder goes live now, or is queued for a seam when the command has a `mode`."""
    spec = resolve(command.reminder, batch)
    redactions = 0
    if config.redact:
        body, redactions = redact(spec.body)
        if redactions:
            spec = spec.model_copy(update={"body": body})
    reminder_id = spec.id
    check_expires_after_now(batch, spec.expires_at)
    if spec.source == "inherited":
        raise reject(
            ErrorCode.INVALID_OPTION,
            "invalid source: inherited is set only by propagation",
            field="source",
        )
    if reminder_id in live_ids(batch.scratch) or reminder_id in queued_ids(batch.scratch):
        raise reject(
            ErrorCode.INVALID_OPTION,
            "invalid id: a reminder with this id is already live or queued",
            field="id",
        )
    # A queued reminder replaces nothing yet: it dedupes only when drained.
    replacing = 0
    if command.mode is None:
        replacing = len(rules.dedupe_victims(batch.scratch.pending, spec.dedupe_key))
    live = len(batch.scratch.pending) + len(batch.scratch.queued) - replacing
    if live + 1 > config.max_live:
        raise reject(
            ErrorCode.TOO_MANY,
            f"the session holds {live} live or queued reminders; the bound is {config.max_live}",
            limit=config.max_live,
        )
    check_budget(batch, spec, config, replacing=command.mode is None)
    if command.mode is not None:
        position = batch.scratch.counters.get("queued", 0) + 1
        batch.emit(
            ev.Queued(reminder=spec, mode=command.mode, position=position, redactions=redactions)
        )
        return QueuedReply(session_seq=0, reminder_id=reminder_id, position=position)
    deduped = make_live(batch, spec, audit_only=False, redactions=redactions)
    return InjectedReply(session_seq=0, reminder_id=reminder_id, deduped_count=deduped)


def clear(batch: Batch, command: cmd.Clear, config: CoreConfig) -> Reply:
    """Every live reminder the selector matches expires as `cleared`."""
    matched = [row for row in batch.scratch.pending if rules.clear_matches(row, command.selector)]
    for row in matched:
        expire(batch, row, "cleared", "clear")
    return ClearReply(session_seq=0, removed_count=len(matched))


def checkpoint(batch: Batch, command: cmd.Checkpoint, config: CoreConfig) -> Reply:
    """The reminders queued for this seam go live, in queue order."""
    check_turn(batch.state, command.turn)
    drained: list[str] = []
    for row in rules.drained(batch.scratch.queued, command.seam):
        make_live(batch, row.reminder, audit_only=rules.drains_audit_only(row.mode))
        drained.append(row.reminder.id)
    skipped = rules.dispatch_skipped(command.seam, drained)
    return CheckpointReply(session_seq=0, drained=drained, dispatch_skipped=skipped)


def revoke(batch: Batch, command: cmd.Revoke, config: CoreConfig) -> Reply:
    """A queued reminder is withdrawn before it ever goes live."""
    target = command.reminder_id
    if target in queued_ids(batch.scratch):
        batch.emit(ev.Revoked(reminder_id=target))
        return RevokeReply(session_seq=0, status="revoked")
    if target not in live_ids(batch.scratch) and target in batch.scratch.revoked_ids:
        return RevokeReply(session_seq=0, status="already_revoked")
    if batch.scratch.has_seen(target):
        raise reject(
            ErrorCode.ALREADY_DELIVERED,
            "the reminder is no longer queued: it was drained or injected directly",
            reminder_id=target,
        )
    raise reject(
        ErrorCode.UNKNOWN_REMINDER_ID,
        "no reminder with this id was ever seen in the session",
        reminder_id=target,
    )

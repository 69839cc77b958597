"""Reminders crossing to a sub-agent: `handoff` in the parent, `inherit` in the child (SPEC
§4.9)."""

from __future__ import annotations

from pydantic import ValidationError

from contracts import commands as cmd
from contracts import events as ev
from contracts.errors import ErrorCode
from contracts.replies import AlreadyAppliedReply, HandoffReply, InheritReply, Reply
from core import rules
from core.batch import Batch
from core.config import CoreConfig
from core.deciders.common import budget_used, live_ids, make_live, queued_ids, reject, resolve
from core.size import spec_bytes


def handoff(batch: Batch, command: cmd.Handoff, config: CoreConfig) -> Reply:
    """One `handed_off` carrying the live reminders that propagate to the child."""
    if command.child_session_id == command.session_id:
        raise reject(
            ErrorCode.INVALID_REQUEST,
            "invalid child_session_id: a session cannot hand off to itself",
            field="child_session_id",
        )
    parent_agent = command.agent_id or command.session_id
    try:
        specs = rules.handed_off_specs(batch.scratch.pending, command.child_turn, parent_agent)
    except ValidationError:
        field = "agent_id" if command.agent_id else "session_id"
        raise reject(
            ErrorCode.INVALID_REQUEST,
            f"invalid {field}: it would be copied as originating_agent_id, which must not "
            "contain control characters nor start or end with whitespace",
            field=field,
        ) from None
    ids = [spec.id for spec in specs]
    batch.emit(
        ev.HandedOff(
            child_session_id=command.child_session_id,
            sub_agent_id=command.sub_agent_id or command.child_session_id,
            propagated_ids=ids,
            reminders=specs,
        )
    )
    return HandoffReply(session_seq=0, propagated_ids=ids)


def inherit(batch: Batch, command: cmd.Inherit, config: CoreConfig) -> Reply:
    """Each handed-off reminder goes live in the child (`deduped`? `injected`, `inherited`)
    unless it is already there or there is no room; once per `handed_off` event."""
    if command.handoff_event_id in batch.scratch.inherited_from:
        return AlreadyAppliedReply(session_seq=0)
    inherited: list[str] = []
    skipped: list[str] = []
    for spec in command.reminders:
        reminder_id = spec.id or ""
        taken = live_ids(batch.scratch) | queued_ids(batch.scratch) | set(inherited)
        full = len(batch.scratch.pending) + len(batch.scratch.queued) >= config.max_live
        replaces = bool(rules.dedupe_victims(batch.scratch.pending, spec.dedupe_key))
        if not reminder_id or reminder_id in taken or (full and not replaces):
            # Already live, or no room (§4.1): skipped and reported, never half-applied.
            skipped.append(reminder_id)
            continue
        # A handed-off spec carries its fired_at_turn; one that left it out fires at the
        # child's current turn, the §2.1 default (an event never records a null turn).
        try:
            child_spec = rules.inherited_spec(resolve(spec, batch), command.parent_agent_id)
        except ValidationError:
            raise reject(
                ErrorCode.INVALID_REQUEST,
                "invalid parent_agent_id: it would be copied as originating_agent_id, which "
                "must not contain control characters nor start or end with whitespace",
                field="parent_agent_id",
            ) from None
        used = budget_used(batch, child_spec, replacing=True)
        if used + spec_bytes(child_spec) > config.max_session_bytes:
            # No room in the session's byte budget (§4.1.1): skipped like a full session.
            skipped.append(reminder_id)
            continue
        make_live(batch, child_spec, audit_only=False)
        batch.emit(
            ev.Inherited(
                reminder_id=reminder_id,
                originating_agent_id=child_spec.originating_agent_id,
                sub_agent_id=command.sub_agent_id,
                parent_session_id=command.parent_session_id,
                propagate=spec.propagate,
            )
        )
        inherited.append(reminder_id)
    return InheritReply(session_seq=0, inherited_ids=inherited, skipped_ids=skipped)

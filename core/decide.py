"""`decide(state, command, context) -> Decision`: the rules of SPEC §4 as pure functions.

A decider emits draft events into a `Batch`, which folds each one into a scratch state so
later rules in the same command see earlier effects (a second drained reminder dedupes the
first). `Batch.finish` numbers the events, attaches the reply to the last one and links the
hash chain. Rejections raise `ReminderError` inside; `decide` turns them into error replies,
so a rejected command yields no events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from contracts import commands as cmd
from contracts import events as ev
from contracts.errors import ErrorCode, ReminderError, WarningBody
from contracts.replies import (
    AlreadyAppliedReply,
    CheckpointReply,
    ClearReply,
    CompactReply,
    EndTurnReply,
    Envelope,
    ErrorReply,
    EvaluateReply,
    HandoffReply,
    InheritReply,
    InjectedReply,
    InlinePlacement,
    QueuedReply,
    RenderReply,
    Reply,
    RevokeReply,
)
from contracts.spec import ReminderSpec, ResolvedSpec, parse_reminder
from contracts.state import PendingRow, SessionState
from core import render as rn
from core import rules
from core.canonical import derived_uuid7, linked, sha256_hex
from core.config import CommandContext, CoreConfig
from core.fold import Scratch, apply_event, trusted
from core.redact import redact
from core.size import json_bytes, replies_always_fit, spec_bytes, state_upper_bound


@dataclass(frozen=True)
class Decision:
    """What one command decided: events to append (maybe none) and the reply to send."""

    events: tuple[ev.Event, ...]
    reply: dict[str, Any]
    #: Each event's wire bytes (its canonical JSON, `chain` included), made with the chain.
    encoded: tuple[bytes, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the command was accepted."""
        return bool(self.reply.get("ok"))


@dataclass
class Batch:
    """Draft events of one command, folded as they are emitted."""

    state: SessionState
    command: cmd.Command
    context: CommandContext
    turn: int
    command_id: str
    scratch: Scratch = field(init=False)
    drafts: list[ev.Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scratch = Scratch.thaw(self.state)

    def emit(self, payload: ev.AnyPayload) -> None:
        """Record one decided fact and let the scratch state see it."""
        kind = ev.KIND_OF[type(payload)]
        session_seq = self.state.session_seq + len(self.drafts) + 1
        draft = trusted(
            ev.Event,
            dict(
                schema_=ev.SCHEMA_V1,
                event_id=derived_uuid7(
                    self.context.occurred_at,
                    self.command_id,
                    self.command.session_id,
                    str(session_seq),
                ),
                kind=kind,
                session_id=self.command.session_id,
                agent_id=self.command.agent_id or self.command.session_id,
                task_id=self.command.task_id,
                session_seq=session_seq,
                turn=self.turn,
                occurred_at=self.context.occurred_at,
                command_id=self.command_id,
                request_id=self.command.request_id,
                payload=payload,
                reply=None,
                chain="",
            ),
        )
        self.drafts.append(draft)
        apply_event(self.scratch, draft)

    def _state_surely_fits(self, config: CoreConfig, remembered_bytes: int) -> bool:
        """Whether a bound from list lengths alone shows the state after the command fits,
        so the exact measurement (a full serialisation) can be skipped. Within the delivered
        history a reminder appears once at most (never re-issued while it lives, and
        compaction clears the history), so its directive ids are bounded by `seen_ids`."""
        scratch = self.scratch
        if scratch.providers is not None:
            return False
        bound = state_upper_bound(
            config,
            rows=len(scratch.pending) + len(scratch.queued),
            delivered_rows=len(scratch.delivered),
            delivered_ids=len(scratch.seen_ids),
            replies=len(scratch.recent_replies),
            history_ids=len(scratch.seen_ids) + len(scratch.revoked_ids),
            inherited=len(scratch.inherited_from),
        )
        return bound + remembered_bytes + _STATE_SLACK <= config.max_payload_bytes

    def finish(
        self, reply: Reply, config: CoreConfig
    ) -> tuple[tuple[ev.Event, ...], dict[str, Any], tuple[bytes, ...]]:
        """Final events (reply on the last, chain linked), the reply's wire form and each
        event's wire bytes.

        Raises `too_large` when an event, the reply or the state after the command would
        not fit in `max_payload_bytes` (SPEC §4.1.1): nothing is emitted then."""
        last_seq = self.state.session_seq + len(self.drafts)
        wire = reply.model_copy(update={"session_seq": last_seq}).to_wire()
        limit = config.max_payload_bytes
        if not replies_always_fit(config):
            _fits("reply", json_bytes(wire), limit)
        if self.drafts:
            remembered_bytes = 0
            if self.command.request_id is not None:  # the reply the state will remember
                remembered = rules.remembered_reply(wire)
                remembered_bytes = json_bytes({"request_id": self.command.request_id, **remembered})
            if not self._state_surely_fits(config, remembered_bytes):
                # The state as the projector will store it, stream_seq at its longest.
                state = self.scratch.freeze()
                state_bytes = len(state.model_dump_json().encode()) + _STATE_SLACK
                _fits("state", state_bytes + remembered_bytes, limit)
        previous = self.state.chain_head
        final: list[ev.Event] = []
        encoded: list[bytes] = []
        for index, draft in enumerate(self.drafts):
            is_last = index == len(self.drafts) - 1
            body = draft.model_dump(mode="json", by_alias=True, exclude={"chain"})
            if is_last:
                body["reply"] = wire
            # One canonical form serves the size check, the chain link and the wire bytes.
            text, previous, data = linked(previous, body)
            _fits(f"{draft.kind} event", len(text) + _CHAIN_BYTES, limit)
            encoded.append(data)
            # The draft's parts were validated when built; only reply and chain are new.
            update = {"chain": previous, "reply": wire if is_last else None}
            final.append(draft.model_copy(update=update))
        return tuple(final), wire, tuple(encoded)


#: `,"chain":"<64 hex>"` added to an event body after it is measured.
_CHAIN_BYTES = 76
#: Room for the projector's `stream_seq` (up to 16 digits) and the KV record's framing.
_STATE_SLACK = 64


def _reject(code: ErrorCode, message: str, **details: Any) -> ReminderError:
    return ReminderError(code, message, details)


def _fits(what: str, size: int, limit: int) -> None:
    """The last line of the size invariant (SPEC §4.1.1): never emit what cannot be stored."""
    if size > limit:
        raise _reject(
            ErrorCode.TOO_LARGE,
            f"the {what} would be {size} bytes; the server's max_payload is {limit}",
            limit=limit,
            size=size,
        )


def _live_ids(scratch: Scratch) -> set[str]:
    return {row.spec.id for row in scratch.pending}


def _queued_ids(scratch: Scratch) -> set[str]:
    return {row.reminder.id for row in scratch.queued}


def _resolve(spec: ReminderSpec, batch: Batch) -> ResolvedSpec:
    """Fill `id` and `fired_at_turn` from the context and the session (SPEC §2.1)."""
    return ResolvedSpec.resolve(
        spec, id=batch.context.new_reminder_id, fired_at_turn=batch.scratch.turn
    )


def _make_live(batch: Batch, spec: ResolvedSpec, *, audit_only: bool, redactions: int = 0) -> int:
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


def _inject(batch: Batch, command: cmd.Inject, config: CoreConfig) -> Reply:
    spec = _resolve(command.reminder, batch)
    redactions = 0
    if config.redact:
        body, redactions = redact(spec.body)
        if redactions:
            spec = spec.model_copy(update={"body": body})
    reminder_id = spec.id
    if spec.source == "inherited":
        raise _reject(
            ErrorCode.INVALID_OPTION,
            "invalid source: inherited is set only by propagation",
            field="source",
        )
    if reminder_id in _live_ids(batch.scratch) or reminder_id in _queued_ids(batch.scratch):
        raise _reject(
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
        raise _reject(
            ErrorCode.TOO_MANY,
            f"the session holds {live} live or queued reminders; the bound is {config.max_live}",
            limit=config.max_live,
        )
    _check_budget(batch, spec, config, replacing=command.mode is None)
    if command.mode is not None:
        position = batch.scratch.counters.get("queued", 0) + 1
        batch.emit(
            ev.Queued(reminder=spec, mode=command.mode, position=position, redactions=redactions)
        )
        return QueuedReply(session_seq=0, reminder_id=reminder_id, position=position)
    deduped = _make_live(batch, spec, audit_only=False, redactions=redactions)
    return InjectedReply(session_seq=0, reminder_id=reminder_id, deduped_count=deduped)


def _budget_used(batch: Batch, spec: ResolvedSpec, *, replacing: bool) -> int:
    """Stored bytes the session's reminders take before `spec` comes in, without those it
    replaces by dedupe."""
    used = rules.session_bytes(batch.scratch.pending, batch.scratch.queued)
    if replacing:
        victims = rules.dedupe_victims(batch.scratch.pending, spec.dedupe_key)
        used -= sum(spec_bytes(row.spec) for row in victims)
    return used


def _check_budget(batch: Batch, spec: ResolvedSpec, config: CoreConfig, *, replacing: bool) -> None:
    """Live plus queued reminder bytes stay within the session budget (SPEC §4.1.1)."""
    used = _budget_used(batch, spec, replacing=replacing)
    size = spec_bytes(spec)
    if used + size > config.max_session_bytes:
        raise _reject(
            ErrorCode.TOO_LARGE,
            f"the reminder takes {size} bytes and the session's reminders already take "
            f"{used}; the budget is {config.max_session_bytes}",
            budget_bytes=config.max_session_bytes,
            used_bytes=used,
        )


def _clear(batch: Batch, command: cmd.Clear, config: CoreConfig) -> Reply:
    matched = [row for row in batch.scratch.pending if rules.clear_matches(row, command.selector)]
    for row in matched:
        batch.emit(
            ev.Expired(
                reminder_id=row.spec.id,
                reason="cleared",
                ttl_turns_before=row.ttl_remaining,
                expired_at_turn=batch.turn,
                expired_at_boundary="clear",
            )
        )
    return ClearReply(session_seq=0, removed_count=len(matched))


def _check_turn(state: SessionState, turn: int) -> None:
    if turn < state.turn:
        raise _reject(
            ErrorCode.STALE_TURN,
            f"turn {turn} is lower than the highest turn seen ({state.turn})",
            turn=turn,
            highest_turn=state.turn,
        )


def _checkpoint(batch: Batch, command: cmd.Checkpoint, config: CoreConfig) -> Reply:
    _check_turn(batch.state, command.turn)
    drained: list[str] = []
    for row in rules.drained(batch.scratch.queued, command.seam):
        _make_live(batch, row.reminder, audit_only=rules.drains_audit_only(row.mode))
        drained.append(row.reminder.id)
    skipped = rules.dispatch_skipped(command.seam, drained)
    return CheckpointReply(session_seq=0, drained=drained, dispatch_skipped=skipped)


def _revoke(batch: Batch, command: cmd.Revoke, config: CoreConfig) -> Reply:
    target = command.reminder_id
    if target in _queued_ids(batch.scratch):
        batch.emit(ev.Revoked(reminder_id=target))
        return RevokeReply(session_seq=0, status="revoked")
    if target not in _live_ids(batch.scratch) and target in batch.scratch.revoked_ids:
        return RevokeReply(session_seq=0, status="already_revoked")
    if target in batch.scratch.seen_ids:
        raise _reject(
            ErrorCode.ALREADY_DELIVERED,
            "the reminder is no longer queued: it was drained or injected directly",
            reminder_id=target,
        )
    raise _reject(
        ErrorCode.UNKNOWN_REMINDER_ID,
        "no reminder with this id was ever seen in the session",
        reminder_id=target,
    )


def _fitting_prefix(
    rows: list[PendingRow], text_of: Callable[[list[PendingRow]], str], cap: int
) -> list[PendingRow]:
    """The longest prefix of `rows` whose envelope stays within `cap` UTF-8 bytes.

    A directive too large for any envelope on its own is passed over (it stays pending,
    unrendered) rather than blocking every directive behind it forever.
    """
    chosen: list[PendingRow] = []
    for row in rows:
        if len(text_of([*chosen, row]).encode("utf-8")) <= cap:
            chosen.append(row)
        elif chosen or len(text_of([row]).encode("utf-8")) <= cap:
            break
    return chosen


def _render(batch: Batch, command: cmd.Render, config: CoreConfig) -> Reply:
    _check_turn(batch.state, command.turn)
    if command.user_text is not None:
        size = len(command.user_text.encode("utf-8"))
        if size > config.max_user_text_bytes:
            raise _reject(
                ErrorCode.TOO_LARGE,
                f"user_text is {size} bytes; the bound is {config.max_user_text_bytes}",
                field="user_text",
                limit=config.max_user_text_bytes,
            )
    fmt = command.format or config.default_format
    candidates = rn.render_candidates(batch.scratch.pending, command.turn)
    nonce: str | None = None
    instructions = ""
    if fmt == "system-reminder":
        for row in [row for row in candidates if rn.is_spoofing(row.spec.body)]:
            batch.emit(
                ev.Dropped(
                    reminder_id=row.spec.id,
                    reason="invalid",
                    code="spoofed_tag",
                    error="body contains a <system-reminder> tag and cannot be rendered safely",
                )
            )
        candidates = [row for row in candidates if not rn.is_spoofing(row.spec.body)]
    else:
        instructions = config.instructions
        if config.nonce_enabled:
            nonce = (
                batch.scratch.nonce
                or batch.context.nonce
                or sha256_hex("nonce\n" + batch.command_id)[:16]
            )

    def text_of(rows: list[PendingRow]) -> str:
        return rn.envelope_text(rows, fmt, instructions, nonce)

    chosen = _fitting_prefix(candidates, text_of, config.max_envelope_bytes)
    if not chosen:
        return RenderReply(session_seq=0, envelope=None)
    text = text_of(chosen)
    speaker = rn.speaker_for(chosen)
    for row in chosen:
        spec = row.spec
        batch.emit(
            ev.Fired(
                reminder_id=spec.id,
                turn_number=command.turn,
                tags=spec.tags,
                dedupe_key=spec.dedupe_key,
                source=spec.source,
                role_hint=spec.role_hint,
                authority=spec.authority,
                rendered_role="user",
                ttl_turns=row.ttl_remaining,
                propagate=spec.propagate,
                originating_agent_id=spec.originating_agent_id,
                body=spec.body,
            )
        )
    directive_ids = [row.spec.id for row in chosen]
    batch.emit(
        ev.Delivered(
            turn_number=command.turn,
            format=fmt,
            speaker=speaker,
            nonce=nonce,
            instructions=instructions,
            directive_ids=directive_ids,
            text=text,
            text_sha256=sha256_hex(text),
        )
    )
    envelope = Envelope(
        text=text,
        speaker=speaker,
        directive_ids=directive_ids,
        turn_number=command.turn,
        format=fmt,
    )
    return RenderReply(session_seq=0, envelope=envelope)


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


def _end_turn(batch: Batch, command: cmd.EndTurn, config: CoreConfig) -> Reply:
    if not rules.ttl_pass_due(batch.scratch.last_ended_turn, command.turn):
        return AlreadyAppliedReply(session_seq=0)
    ttl = rules.ttl_pass(batch.scratch.pending, command.turn)
    _emit_ttl_pass(batch, ttl, command.turn, "post_turn")
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


def _compact(batch: Batch, command: cmd.Compact, config: CoreConfig) -> Reply:
    plan = rules.compaction(batch.scratch.pending, command.turn, batch.scratch.last_ended_turn)
    _emit_ttl_pass(batch, plan.ttl, command.turn, "pre_compact")
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


def _handoff(batch: Batch, command: cmd.Handoff, config: CoreConfig) -> Reply:
    if command.child_session_id == command.session_id:
        raise _reject(
            ErrorCode.INVALID_REQUEST,
            "invalid child_session_id: a session cannot hand off to itself",
            field="child_session_id",
        )
    parent_agent = command.agent_id or command.session_id
    try:
        specs = rules.handed_off_specs(batch.scratch.pending, command.child_turn, parent_agent)
    except ValidationError:
        field = "agent_id" if command.agent_id else "session_id"
        raise _reject(
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


def _inherit(batch: Batch, command: cmd.Inherit, config: CoreConfig) -> Reply:
    if command.handoff_event_id in batch.scratch.inherited_from:
        return AlreadyAppliedReply(session_seq=0)
    inherited: list[str] = []
    skipped: list[str] = []
    for spec in command.reminders:
        reminder_id = spec.id or ""
        taken = _live_ids(batch.scratch) | _queued_ids(batch.scratch) | set(inherited)
        full = len(batch.scratch.pending) + len(batch.scratch.queued) >= config.max_live
        replaces = bool(rules.dedupe_victims(batch.scratch.pending, spec.dedupe_key))
        if not reminder_id or reminder_id in taken or (full and not replaces):
            # Already live, or no room (§4.1): skipped and reported, never half-applied.
            skipped.append(reminder_id)
            continue
        # A handed-off spec carries its fired_at_turn; one that left it out fires at the
        # child's current turn, the §2.1 default (an event never records a null turn).
        try:
            child_spec = rules.inherited_spec(_resolve(spec, batch), command.parent_agent_id)
        except ValidationError:
            raise _reject(
                ErrorCode.INVALID_REQUEST,
                "invalid parent_agent_id: it would be copied as originating_agent_id, which "
                "must not contain control characters nor start or end with whitespace",
                field="parent_agent_id",
            ) from None
        used = _budget_used(batch, child_spec, replacing=True)
        if used + spec_bytes(child_spec) > config.max_session_bytes:
            # No room in the session's byte budget (§4.1.1): skipped like a full session.
            skipped.append(reminder_id)
            continue
        _make_live(batch, child_spec, audit_only=False)
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


def _evaluation_fires(
    batch: Batch, command: cmd.Evaluate, index: int, evaluation: cmd.Evaluation, config: CoreConfig
) -> tuple[ev.EvaluationReason, str | None, str | None]:
    """Inject one fired evaluation's reminder; `(reason, reminder_id, error)`.

    The gateway re-checks the latches against the session as it is now (SPEC §9.2), so two
    replicas of the providers service, or a view that lagged, cannot double-fire; then the
    reminder goes through the very rules and bounds of a direct inject (§4.2), and one they
    reject makes the evaluation `malformed_spec` with the rule's code.
    """
    mark = rules.provider_mark(batch.scratch.providers, evaluation.provider_id)
    if evaluation.once and mark.fired_count > 0:
        return "once_latched", None, None
    if rules.threshold_reported(mark.level, evaluation.level):
        return "threshold_already_reported", None, None
    if evaluation.reminder is None:
        return "malformed_spec", None, "HARN-RMD-006 a fired evaluation carries no reminder"
    try:
        spec, _ = parse_reminder(evaluation.reminder, max_body_bytes=config.max_body_bytes)
        if spec.id is None:
            fresh = derived_uuid7(
                batch.context.occurred_at,
                "provider",
                command.runtime_event_id,
                evaluation.provider_id,
                str(index),
            )
            spec = spec.model_copy(update={"id": fresh})
        inject = cmd.Inject.model_construct(
            session_id=command.session_id,
            agent_id=command.agent_id,
            task_id=command.task_id,
            request_id=command.request_id,
            mode=None,
            reminder=spec,
        )
        reply = _inject(batch, inject, config)
    except ReminderError as exc:
        return "malformed_spec", None, f"{exc.code.value} {exc.message}"[:1024]
    assert isinstance(reply, InjectedReply)
    return "fired", reply.reminder_id, None


def _evaluate(batch: Batch, command: cmd.Evaluate, config: CoreConfig) -> Reply:
    """Per evaluation in order: `deduped`? + `injected` when it fired, then one
    `provider_evaluated` (SPEC §4.10.1)."""
    injected: list[str] = []
    for index, evaluation in enumerate(command.evaluations):
        reason: ev.EvaluationReason = evaluation.reason
        reminder_id: str | None = None
        error = evaluation.error
        level = evaluation.level
        if evaluation.fired:
            reason, reminder_id, refused = _evaluation_fires(
                batch, command, index, evaluation, config
            )
            error = refused or error
            if reminder_id is None:
                # Nothing went live: the latch does not advance.
                level = rules.provider_mark(batch.scratch.providers, evaluation.provider_id).level
            else:
                injected.append(reminder_id)
        elif reason == "fired":
            reason, error = "provider_error", error or "an evaluation that did not fire"
        batch.emit(
            ev.ProviderEvaluated(
                provider_id=evaluation.provider_id,
                event=evaluation.event,
                runtime_event_id=command.runtime_event_id,
                fired=reminder_id is not None,
                reason=reason,
                reminder_id=reminder_id,
                error=error,
                level=level,
                view_seq=command.view_seq,
            )
        )
    return EvaluateReply(
        session_seq=0, injected_ids=injected, evaluated_count=len(command.evaluations)
    )


Decider = Callable[[Batch, Any, CoreConfig], Reply]

#: One decider per command the core decides; a unit test checks none is missing.
DECIDERS: dict[type[cmd.Command], Decider] = {
    cmd.Inject: _inject,
    cmd.Clear: _clear,
    cmd.Checkpoint: _checkpoint,
    cmd.Revoke: _revoke,
    cmd.Render: _render,
    cmd.EndTurn: _end_turn,
    cmd.Compact: _compact,
    cmd.Handoff: _handoff,
    cmd.Inherit: _inherit,
    cmd.Evaluate: _evaluate,
}


def with_inline(command: cmd.Command, reply: dict[str, Any]) -> dict[str, Any]:
    """Add the inline placement (§5.5) to a render's reply; the log never stores it, so a
    reply answered from the log gets it again here."""
    user_text = command.user_text if isinstance(command, cmd.Render) else None
    envelope = reply.get("envelope")
    if user_text is None or not isinstance(envelope, dict):
        return reply
    text, span = rn.inline_placement(user_text, str(envelope["text"]))
    return {**reply, "inline": InlinePlacement(text=text, range=span).model_dump()}


def _remembered(state: SessionState, command: cmd.Command, reply: dict[str, Any]) -> Decision:
    """The first reply to a repeated `request_id` (SPEC §4.1): only for the same op, and a
    render's envelope text taken back from its `delivered` row."""
    op = rules.reply_op(reply)
    if op is not None and op != command.op:
        return _error(
            _reject(
                ErrorCode.INVALID_REQUEST,
                f"request_id was already used by a {op} command in this session",
                field="request_id",
                op=op,
            )
        )
    rebuilt = rules.rebuilt_reply(reply, state.delivered)
    if rebuilt is None:
        return _error(
            _reject(
                ErrorCode.INVALID_REQUEST,
                "request_id was already used, and the envelope of its reply is no longer "
                "held in full (digested or compacted): use a new request_id",
                field="request_id",
            )
        )
    return Decision(events=(), reply=with_inline(command, dict(rebuilt)))


def _error(exc: ReminderError) -> Decision:
    return Decision(events=(), reply=ErrorReply(error=exc.to_body()).to_wire())


def decide(
    state: SessionState,
    command: cmd.Command,
    context: CommandContext,
    config: CoreConfig | None = None,
    warnings: list[WarningBody] | None = None,
) -> Decision:
    """Decide one parsed command against a session's state. Never raises on a rule."""
    config = config or CoreConfig()
    if command.request_id is not None:
        for remembered in state.recent_replies:
            if remembered.request_id == command.request_id:
                return _remembered(state, command, remembered.reply)
    decider = DECIDERS.get(type(command))
    if decider is None:
        return _error(
            _reject(ErrorCode.INVALID_REQUEST, f"{command.op} is not decided by the core")
        )
    turn = getattr(command, "turn", None)
    # The propagator decides with the handed_off event's id, which makes inheritance idempotent.
    command_id = (
        command.handoff_event_id if isinstance(command, cmd.Inherit) else context.command_id
    )
    batch = Batch(
        state=state,
        command=command,
        context=context,
        turn=turn if isinstance(turn, int) else state.turn,
        command_id=command_id,
    )
    try:
        reply = decider(batch, command, config)
    except ReminderError as exc:
        return _error(exc)
    if warnings:
        reply = reply.model_copy(update={"warnings": list(warnings)})
    try:
        events, wire, encoded = batch.finish(reply, config)
        answer = with_inline(command, wire)
        if not replies_always_fit(config):
            _fits("reply", json_bytes(answer), config.max_payload_bytes)
    except ReminderError as exc:
        return _error(exc)
    return Decision(events=events, reply=answer, encoded=encoded)


def handle(
    state: SessionState,
    op: str,
    raw: object,
    context: CommandContext,
    config: CoreConfig | None = None,
) -> Decision:
    """Parse a raw JSON value as command `op` and decide it; any bad input is a coded reply."""
    config = config or CoreConfig()
    try:
        command, warnings = cmd.parse_command(
            op,
            raw,
            max_body_bytes=config.max_body_bytes,
            max_user_text_bytes=config.max_user_text_bytes,
        )
    except ReminderError as exc:
        return _error(exc)
    if command.session_id != state.session_id and state.session_seq > 0:
        return _error(_reject(ErrorCode.INVALID_REQUEST, "the state belongs to another session"))
    return decide(state, command, context, config, warnings)

"""`decide(state, command, context) -> Decision`: the rules of SPEC §4 as pure functions.

`DECIDERS` maps each command the core decides to its decider in `core.deciders`. A decider
emits draft events into a `Batch` (`core.batch`), which folds them as they come and, in
`Batch.finish`, numbers them, checks their sizes and links the hash chain. Rejections raise
`ReminderError` inside; `decide` turns them into error replies, so a rejected command yields
no events. A repeated `request_id` is answered here from the replies the session remembers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from contracts import commands as cmd
from contracts.errors import ErrorCode, ReminderError, WarningBody
from contracts.replies import ErrorReply, InlinePlacement, Reply
from contracts.state import SessionState
from core import render as rn
from core import rules
from core.batch import Batch, Decision
from core.config import CommandContext, CoreConfig
from core.deciders import control, effect, envelope, evaluate, handoff, reminders, turns
from core.deciders.common import reject
from core.fold import remembered_row
from core.sanitize import neutralize
from core.size import fits, json_bytes, replies_always_fit

Decider = Callable[[Batch, Any, CoreConfig], Reply]

#: One decider per command the core decides; a unit test checks none is missing.
DECIDERS: dict[type[cmd.Command], Decider] = {
    cmd.Inject: reminders.inject,
    cmd.Clear: reminders.clear,
    cmd.Checkpoint: reminders.checkpoint,
    cmd.Revoke: reminders.revoke,
    cmd.Render: envelope.render,
    cmd.EndTurn: turns.end_turn,
    cmd.Compact: turns.compact,
    cmd.Handoff: handoff.handoff,
    cmd.Inherit: handoff.inherit,
    cmd.Evaluate: evaluate.evaluate,
    cmd.Mute: control.mute,
    cmd.Unmute: control.unmute,
    cmd.Sanitize: control.sanitize,
    cmd.Acknowledge: effect.acknowledge,
}


def with_unstored(command: cmd.Command, reply: dict[str, Any]) -> dict[str, Any]:
    """Add to a reply what the log never stores, so a reply answered from the log gets it
    again here: a render's inline placement (§5.5), a sanitize's text (§12.5)."""
    if isinstance(command, cmd.Sanitize):
        return {**reply, "text": neutralize(command.text)[0]} if reply.get("ok") else reply
    user_text = command.user_text if isinstance(command, cmd.Render) else None
    envelope = reply.get("envelope")
    if user_text is None or not isinstance(envelope, dict):
        return reply
    text, span = rn.inline_placement(user_text, str(envelope["text"]))
    return {**reply, "inline": InlinePlacement(text=text, range=span).model_dump()}


def _remembered(state: SessionState, command: cmd.Command, reply: dict[str, Any]) -> Decision:
    """The first reply to a repeated `request_id` (SPEC §4.1): only for the same op, and a
    render's envelope text taken back from its `delivered` row, or, once that row is
    digested or compacted, from the log (`Decision.reply_in_log`)."""
    op = rules.reply_op(reply)
    if op is not None and op != command.op:
        return _error(
            reject(
                ErrorCode.INVALID_REQUEST,
                f"request_id was already used by a {op} command in this session",
                field="request_id",
                op=op,
            )
        )
    rebuilt = rules.rebuilt_reply(reply, state.delivered)
    if rebuilt is None:
        # The log still has it, on the command's last event: the caller reads it there.
        unreadable = _error(
            reject(
                ErrorCode.INVALID_REQUEST,
                "request_id was already used, and the envelope of its reply is no longer "
                "held in full (digested or compacted): use a new request_id",
                field="request_id",
            )
        )
        return replace(unreadable, reply_in_log=int(reply["session_seq"]))
    return Decision(events=(), reply=with_unstored(command, dict(rebuilt)))


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
        remembered = remembered_row(state, command.request_id)
        if remembered is not None:
            return _remembered(state, command, remembered.reply)
    decider = DECIDERS.get(type(command))
    if decider is None:
        return _error(reject(ErrorCode.INVALID_REQUEST, f"{command.op} is not decided by the core"))
    # A field, if the command has one (a missing attribute takes pydantic's slow path).
    turn = command.__dict__.get("turn")
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
    decision = _decided(batch, decider, config, warnings)
    if decision.folded is None:
        # Nothing to store: the state keeps the id sets its scratch took (`core.fold`).
        batch.scratch.give_back(state)
    return decision


def _decided(
    batch: Batch, decider: Decider, config: CoreConfig, warnings: list[WarningBody] | None
) -> Decision:
    """The batch's command decided: its events with the scratch they were folded into, or
    a coded error reply and no events."""
    command = batch.command
    try:
        # Every command first expires what is past its deadline, in its own batch (§12.4).
        effect.expire_past_deadline(batch)
        reply = decider(batch, command, config)
    except ReminderError as exc:
        return _error(exc)
    if warnings:
        reply = reply.model_copy(update={"warnings": list(warnings)})
    try:
        events, wire, encoded = batch.finish(reply, config)
        answer = with_unstored(command, wire)
        if not replies_always_fit(config):
            fits("reply", json_bytes(answer), config.max_payload_bytes)
    except ReminderError as exc:
        return _error(exc)
    folded = batch.scratch if events else None
    return Decision(events=events, reply=answer, encoded=encoded, folded=folded)


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
        return _error(reject(ErrorCode.INVALID_REQUEST, "the state belongs to another session"))
    return decide(state, command, context, config, warnings)

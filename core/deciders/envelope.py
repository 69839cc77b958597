"""`render`: the envelope of a turn (SPEC §4.6, §5)."""

from __future__ import annotations

from collections.abc import Callable

from contracts import commands as cmd
from contracts import events as ev
from contracts.errors import ErrorCode
from contracts.replies import Envelope, RenderReply, Reply
from contracts.state import PendingRow
from core import render as rn
from core.batch import Batch
from core.canonical import sha256_hex
from core.config import CoreConfig
from core.deciders.common import check_turn, reject


def fitting_prefix(
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


def _check_user_text(command: cmd.Render, config: CoreConfig) -> None:
    if command.user_text is not None:
        size = len(command.user_text.encode("utf-8"))
        if size > config.max_user_text_bytes:
            raise reject(
                ErrorCode.TOO_LARGE,
                f"user_text is {size} bytes; the bound is {config.max_user_text_bytes}",
                field="user_text",
                limit=config.max_user_text_bytes,
            )


def _drop_spoofing(batch: Batch, candidates: list[PendingRow]) -> list[PendingRow]:
    """A body holding a `<system-reminder>` tag cannot be rendered safely in that format:
    it is dropped (`dropped{code: spoofed_tag}`) and the rest stay candidates."""
    for row in [row for row in candidates if rn.is_spoofing(row.spec.body)]:
        batch.emit(
            ev.Dropped(
                reminder_id=row.spec.id,
                reason="invalid",
                code="spoofed_tag",
                error="body contains a <system-reminder> tag and cannot be rendered safely",
            )
        )
    return [row for row in candidates if not rn.is_spoofing(row.spec.body)]


def _session_nonce(batch: Batch) -> str:
    """The session's nonce, else the context's, else one derived from the command id."""
    return (
        batch.scratch.nonce or batch.context.nonce or sha256_hex("nonce\n" + batch.command_id)[:16]
    )


def _emit_fired(batch: Batch, chosen: list[PendingRow], turn: int) -> None:
    for row in chosen:
        spec = row.spec
        batch.emit(
            ev.Fired(
                reminder_id=spec.id,
                turn_number=turn,
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


def render(batch: Batch, command: cmd.Render, config: CoreConfig) -> Reply:
    """The directives due this turn, within the envelope cap: `fired` for each, then one
    `delivered` holding the envelope; no envelope when none is due."""
    check_turn(batch.state, command.turn)
    _check_user_text(command, config)
    fmt = command.format or config.default_format
    candidates = rn.render_candidates(batch.scratch.pending, command.turn)
    nonce: str | None = None
    instructions = ""
    if fmt == "system-reminder":
        candidates = _drop_spoofing(batch, candidates)
    else:
        instructions = config.instructions
        if config.nonce_enabled:
            nonce = _session_nonce(batch)

    def text_of(rows: list[PendingRow]) -> str:
        return rn.envelope_text(rows, fmt, instructions, nonce)

    chosen = fitting_prefix(candidates, text_of, config.max_envelope_bytes)
    if not chosen:
        return RenderReply(session_seq=0, envelope=None)
    text = text_of(chosen)
    speaker = rn.speaker_for(chosen)
    _emit_fired(batch, chosen, command.turn)
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

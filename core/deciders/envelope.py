"""`render`: the envelope of a turn (SPEC §4.6, §5)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contracts import commands as cmd
from contracts import events as ev
from contracts.errors import ErrorCode
from contracts.events import RenderSummary
from contracts.replies import DroppedDirective, Envelope, RenderReply, Reply
from contracts.state import PendingRow, SessionState
from core import cost
from core import render as rn
from core.batch import Batch
from core.canonical import sha256_hex
from core.config import CoreConfig
from core.deciders.common import check_turn, reject
from core.fold import Scratch


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


def spoofing_split(candidates: list[PendingRow]) -> tuple[list[PendingRow], list[PendingRow]]:
    """(kept, dropped): a body holding a `<system-reminder>` tag cannot be rendered safely
    in that format (SPEC §5.4)."""
    kept = [row for row in candidates if not rn.is_spoofing(row.spec.body)]
    return kept, [row for row in candidates if rn.is_spoofing(row.spec.body)]


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


@dataclass(frozen=True)
class RenderPlan:
    """What a render issues and holds back: a pure function of the state before it, so the
    decider and `replay --verify` compute the same plan."""

    chosen: list[PendingRow]
    text: str
    dropped: list[PendingRow]
    summary: RenderSummary
    instructions: str
    nonce: str | None


def plan_render(
    state: SessionState | Scratch,
    turn: int,
    fmt: rn.Format,
    *,
    instructions: str,
    nonce: str | None,
    cap: int,
    budget: int | None,
    now: str,
    estimator: str = cost.DEFAULT_ESTIMATOR,
) -> RenderPlan:
    """Select (§5.2, mutes §12.2, `not_before` at the render's time `now` §12.4), drop
    (§5.4), cap (§4.6) and shed to the budget (§12.1)."""
    held = cost.eligible(state.pending, turn, state.mutes, cost.not_yet_at(state.pending, now))
    candidates, dropped = held.candidates, list[PendingRow]()
    if fmt == "system-reminder":
        candidates, dropped = spoofing_split(candidates)

    def text_of(rows: list[PendingRow]) -> str:
        return rn.envelope_text(rows, fmt, instructions, nonce)

    capped = fitting_prefix(candidates, text_of, cap)
    chosen, shed_ids, over_budget = cost.shed_to_budget(capped, text_of, budget, estimator)
    text = text_of(chosen) if chosen else ""
    summary = cost.summary_of(
        chosen,
        text,
        estimator=estimator,
        budget=budget,
        shed_ids=shed_ids,
        held=held,
        dropped_ids=[row.spec.id for row in dropped],
        over_budget=over_budget,
    )
    return RenderPlan(chosen, text, dropped, summary, instructions, nonce)


def render(batch: Batch, command: cmd.Render, config: CoreConfig) -> Reply:
    """The directives due this turn, within the envelope cap and the token budget: `fired`
    for each, then one `delivered` holding the envelope and its summary; `withheld` instead
    when nothing is delivered while something eligible was held back (SPEC §4.6, §12.1)."""
    check_turn(batch.state, command.turn)
    _check_user_text(command, config)
    fmt = command.format or config.default_format
    context_directives = fmt == "context-directives"
    plan = plan_render(
        batch.scratch,
        command.turn,
        fmt,
        instructions=config.instructions if context_directives else "",
        nonce=_session_nonce(batch) if context_directives and config.nonce_enabled else None,
        cap=config.max_envelope_bytes,
        budget=command.max_tokens if command.max_tokens is not None else config.render_max_tokens,
        now=batch.context.occurred_at,
    )
    for row in plan.dropped:
        batch.emit(
            ev.Dropped(
                reminder_id=row.spec.id,
                reason="invalid",
                code="spoofed_tag",
                error="body contains a <system-reminder> tag and cannot be rendered safely",
            )
        )
    dropped = [
        DroppedDirective(reminder_id=row.spec.id, code="spoofed_tag") for row in plan.dropped
    ]
    if not plan.chosen:
        if cost.withholds(plan.summary):
            batch.emit(ev.Withheld(turn_number=command.turn, summary=plan.summary))
        return RenderReply(
            session_seq=0, envelope=None, summary=plan.summary, dropped=dropped or None
        )
    return _deliver(batch, command, plan, fmt, dropped)


def _deliver(
    batch: Batch,
    command: cmd.Render,
    plan: RenderPlan,
    fmt: rn.Format,
    dropped: list[DroppedDirective],
) -> Reply:
    """`fired` per directive, then the `delivered` envelope with its summary."""
    speaker = rn.speaker_for(plan.chosen)
    _emit_fired(batch, plan.chosen, command.turn)
    directive_ids = [row.spec.id for row in plan.chosen]
    batch.emit(
        ev.Delivered(
            turn_number=command.turn,
            format=fmt,
            speaker=speaker,
            nonce=plan.nonce,
            instructions=plan.instructions,
            directive_ids=directive_ids,
            text=plan.text,
            text_sha256=sha256_hex(plan.text),
            summary=plan.summary,
        )
    )
    envelope = Envelope(
        text=plan.text,
        speaker=speaker,
        directive_ids=directive_ids,
        turn_number=command.turn,
        format=fmt,
    )
    return RenderReply(
        session_seq=0, envelope=envelope, summary=plan.summary, dropped=dropped or None
    )

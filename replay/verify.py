"""`--verify`: check the hash chain and `session_seq`, then re-derive every recorded decision
with the current rules (SPEC §7.2) and name the first event that disagrees.

Decisions are re-derived per command (consecutive events sharing a `command_id`) from the
state before that command: dedupe replaced exactly the live reminders with the key and left
none behind; a drain injected exactly what was queued, in the order some seam drains; each
TTL pass expired and decremented exactly the right reminders; compaction expired and
preserved exactly the right ones; a handoff handed exactly the propagating ones, as the
child is to receive them; every `delivered` text is rendered again from its directives with
the `instructions` it recorded.

Every rule comes from `core.rules` (and `core.render`), the functions `decide` itself
applies: this module only compares what they give with what the log says, so a rule
changed in the core is never flagged as a divergence of the logs it writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby

from pydantic import ValidationError

from contracts import events as ev
from contracts.agent_events import RuntimeEvent
from contracts.commands import Evaluate
from contracts.state import PendingRow, SessionState
from contracts.stored import StoredEvent
from core import CommandContext, decide, fold_all, rules
from core.canonical import links, sha256_hex
from core.cost import ESTIMATORS, eligible, not_yet_at, shed_to_budget, summary_of, withholds
from core.deciders.envelope import spoofing_split
from core.fold import Scratch, apply_event
from core.providers import ProvidersConfig, default_config, evaluate_event
from core.redact import markers, redact
from core.render import Format, envelope_text, is_spoofing, render_candidates, speaker_for
from replay.engine import decode_rows
from replay.verify_effect import (
    check_acknowledged,
    check_clock,
    check_deadlines,
    check_dismissed,
    deadline_prefix,
)


def _name(row: StoredEvent) -> str:
    envelope = row.envelope
    return (
        f"event session_seq {envelope.get('session_seq')} "
        f"({envelope.get('kind')}, stream_seq {row.stream_seq}, id {envelope.get('event_id')})"
    )


def check_chain(rows: Sequence[StoredEvent]) -> str | None:
    """The first break of `session_seq` contiguity or of the hash chain, if any."""
    previous = ""
    for expected, row in enumerate(rows, start=1):
        seq = row.envelope.get("session_seq")
        if seq != expected or isinstance(seq, bool):
            return f"{_name(row)}: session_seq is {seq}, expected {expected}"
        if not links(previous, row.envelope):
            return f"{_name(row)}: hash chain broken (chain does not follow the previous event)"
        previous = str(row.envelope["chain"])
    return None


def _live(scratch: Scratch, reminder_id: str) -> PendingRow | None:
    return next((row for row in scratch.pending if row.spec.id == reminder_id), None)


def _ids(rows: Sequence[PendingRow]) -> list[str]:
    return [row.spec.id for row in rows]


def _expired(group: list[ev.Event], reason: str) -> list[ev.Expired]:
    return [
        e.payload for e in group if isinstance(e.payload, ev.Expired) and e.payload.reason == reason
    ]


def _check_ttl_pass(group: list[ev.Event], ttl: rules.TtlPass, decremented: list[str]) -> bool:
    """Whether the group expired and decremented exactly what the pass gives."""
    expired = [p.reminder_id for p in _expired(group, "ttl")]
    return expired == ttl.expired_ids and decremented == ttl.decremented_ids


def _check_drain(before: SessionState, group: list[ev.Event]) -> str | None:
    """The queued reminders a command made live must be what some seam drains, in order."""
    queued = {row.reminder.id for row in before.queued}
    drained = [
        e.payload.reminder_id
        for e in group
        if isinstance(e.payload, ev.Injected) and e.payload.reminder_id in queued
    ]
    if not any(
        drained == [row.reminder.id for row in rules.drained(before.queued, seam)]
        for seam in rules.SEAM_DRAINS
    ):
        return "the drain took other queued reminders than any seam drains"
    return None


def _check_redactions(body: str, redactions: int) -> str | None:
    """A body recorded as redacted holds no secret the rule still finds, and its markers
    (SPEC §10); the secret itself is not in the log, so this is all replay can re-derive."""
    if redactions and (redact(body)[1] or markers(body) < redactions):
        return "the redaction recorded does not match the body"
    return None


def _check_plan(
    before: SessionState,
    now: str,
    turn: int,
    fmt: Format,
    summary: ev.RenderSummary,
    directive_ids: list[str],
    text_of: Callable[[list[PendingRow]], str],
) -> str | None:
    """Re-derive a render's selection, mutes, drops, budget shedding and summary (SPEC §5.2,
    §5.4, §12.1, §12.2) from the state before it. The envelope cap is configuration, not
    recorded: the render issued a prefix of the candidates, so the prefix of the length it
    kept plus shed is the capped list the budget was applied to."""
    if summary.estimator not in ESTIMATORS:
        return f"unknown token estimator {summary.estimator!r}"
    held = eligible(before.pending, turn, before.mutes, not_yet_at(before.pending, now))
    if (held.muted_ids, held.not_yet_ids) != (summary.muted_ids, summary.not_yet_ids):
        return "the mutes held back other reminders than the current rules do"
    candidates, dropped = held.candidates, list[PendingRow]()
    if fmt == "system-reminder":
        candidates, dropped = spoofing_split(candidates)
    if [row.spec.id for row in dropped] != summary.dropped_ids:
        return "the render dropped other reminders than the current rules do"
    capped = candidates[: len(directive_ids) + len(summary.shed_ids)]
    kept, shed, over = shed_to_budget(capped, text_of, summary.budget_tokens, summary.estimator)
    if ([row.spec.id for row in kept], shed, over) != (
        directive_ids,
        summary.shed_ids,
        summary.over_budget,
    ):
        return "the budget shed other directives than the current rules do"
    text = text_of(kept) if kept else ""
    expected = summary_of(
        kept,
        text,
        estimator=summary.estimator,
        budget=summary.budget_tokens,
        shed_ids=shed,
        held=held,
        dropped_ids=summary.dropped_ids,
        over_budget=over,
    )
    if expected != summary:
        return "the render summary differs from what the current rules count"
    return None


def _check_delivered(
    before: SessionState, scratch: Scratch, group: list[ev.Event], event: ev.Event
) -> str | None:
    payload = event.payload
    assert isinstance(payload, ev.Delivered)
    fired = [e.payload.reminder_id for e in group if isinstance(e.payload, ev.Fired)]
    if payload.directive_ids != fired:
        return "directive_ids differ from the fired events"
    rows = [_live(scratch, rid) for rid in payload.directive_ids]
    if any(row is None for row in rows):
        return "a directive is not a live reminder"
    live_rows = [row for row in rows if row is not None]

    def text_of(chosen: list[PendingRow]) -> str:
        return envelope_text(chosen, payload.format, payload.instructions, payload.nonce)

    if payload.summary is not None:
        problem = _check_plan(
            before,
            event.occurred_at,
            payload.turn_number,
            payload.format,
            payload.summary,
            fired,
            text_of,
        )
        if problem is not None:
            return problem
    else:  # a log written before the summary: no mutes, no budget
        dropped = {e.payload.reminder_id for e in group if isinstance(e.payload, ev.Dropped)}
        winners = [
            row.spec.id
            for row in render_candidates(before.pending, payload.turn_number)
            if row.spec.id not in dropped
        ]
        if winners[: len(fired)] != fired:
            return "the current rules select other directives"
    speaker = speaker_for(live_rows)
    if text_of(live_rows) != payload.text:
        return "delivered.text differs from the envelope the current rules render"
    if sha256_hex(payload.text) != payload.text_sha256 or speaker != payload.speaker:
        return "text_sha256 or speaker does not match the text"
    return None


def _check_withheld(
    before: SessionState, group: list[ev.Event], event: ev.Event, payload: ev.Withheld
) -> str | None:
    """A render that delivered nothing: what it held back, re-derived. Its envelope text is
    not recorded (nothing was rendered), so a budget that shed everything is checked by
    order: every candidate shed, none a contract, the latest first (SPEC §12.1)."""
    if any(isinstance(e.payload, ev.Delivered) for e in group):
        return "withheld beside a delivered envelope"
    summary = payload.summary
    if not withholds(summary) or summary.directives or summary.over_budget:
        return "withheld although nothing eligible was held back"
    held = eligible(
        before.pending,
        payload.turn_number,
        before.mutes,
        not_yet_at(before.pending, event.occurred_at),
    )
    if (held.muted_ids, held.not_yet_ids) != (summary.muted_ids, summary.not_yet_ids):
        return "the mutes held back other reminders than the current rules do"
    candidates, dropped = spoofing_split(held.candidates)
    if summary.dropped_ids != [row.spec.id for row in dropped]:
        candidates = held.candidates  # context-directives: nothing is dropped
    shed = candidates[: len(summary.shed_ids)]
    if summary.shed_ids and (
        summary.budget_tokens is None
        or any(row.spec.authority == "contract" for row in shed)
        or [row.spec.id for row in reversed(shed)] != summary.shed_ids
    ):
        return "the budget shed other directives than the current rules do"
    return None


def _check_event(
    before: SessionState, scratch: Scratch, group: list[ev.Event], event: ev.Event
) -> str | None:
    """Why this event is not what the current rules decide here (None when it is)."""
    payload = event.payload
    if isinstance(payload, ev.Deduped):
        if payload.dropped_reminder_ids != payload.replaced_ids:
            return "dropped_reminder_ids differs from replaced_ids"
        if payload.boundary == "compact":
            if not any(isinstance(e.payload, ev.Compacted) for e in group):
                return "a compaction dedupe without its compacted event"
            return None  # checked with its compacted event
        expected = _ids(rules.dedupe_victims(scratch.pending, payload.dedupe_key))
        if payload.replaced_ids != expected or payload.dropped_count != len(expected):
            return "dedupe replaced other reminders than the live ones with its key"
    elif isinstance(payload, ev.Injected):
        queued = next((q for q in scratch.queued if q.reminder.id == payload.reminder_id), None)
        if queued is not None and (
            queued.reminder != payload.reminder
            or payload.audit_only != rules.drains_audit_only(queued.mode)
        ):
            return "the drained reminder differs from what was queued"
        if queued is not None and (problem := _check_drain(before, group)) is not None:
            return problem
        if payload.reminder.id != payload.reminder_id or payload.reminder.body.strip() == "":
            return "injected payload disagrees with its spec"
        if (problem := _check_redactions(payload.reminder.body, payload.redactions)) is not None:
            return problem
        if rules.dedupe_victims(
            scratch.pending, payload.reminder.dedupe_key, newcomer_audit_only=payload.audit_only
        ):
            return "a live reminder with the same dedupe_key was not deduped"
    elif isinstance(payload, ev.Queued):
        if (problem := _check_redactions(payload.reminder.body, payload.redactions)) is not None:
            return problem
        if payload.position != scratch.counters.get("queued", 0) + 1:
            return f"queued position {payload.position} was not the next one"
    elif isinstance(payload, ev.Fired):
        row = _live(scratch, payload.reminder_id)
        if row is None or row.spec.body != payload.body or row.ttl_remaining != payload.ttl_turns:
            return "fired does not match the live reminder"
    elif isinstance(payload, ev.Delivered):
        return _check_delivered(before, scratch, group, event)
    elif isinstance(payload, ev.Withheld):
        return _check_withheld(before, group, event, payload)
    elif isinstance(payload, ev.Muted | ev.Unmuted):
        return _check_mute(before, scratch, group, event)
    elif isinstance(payload, ev.Acknowledged):
        return check_acknowledged(before, group, payload)
    elif isinstance(payload, ev.Expired) and payload.reason == "dismissed":
        return check_dismissed(group, payload)
    elif isinstance(payload, ev.ForgedDirectiveNeutralized):
        return _check_neutralized(group, event, payload)
    elif isinstance(payload, ev.Dropped):
        row = _live(scratch, payload.reminder_id)
        if payload.code == "spoofed_tag" and (row is None or not is_spoofing(row.spec.body)):
            return "dropped as spoofed_tag, but the body holds no system-reminder tag"
    elif isinstance(payload, ev.PostTurn):
        if not rules.ttl_pass_due(before.last_ended_turn, payload.turn_number):
            return "a TTL pass for a turn that had already ended"
        ttl = rules.ttl_pass(before.pending, payload.turn_number)
        if not _check_ttl_pass(group, ttl, payload.decremented_ids):
            return "the TTL pass expired or decremented other reminders"
    elif isinstance(payload, ev.Compacted):
        return _check_compacted(before, group, payload)
    elif isinstance(payload, ev.HandedOff):
        return _check_handed_off(before, event, payload)
    return None


def _check_mute(
    before: SessionState, scratch: Scratch, group: list[ev.Event], event: ev.Event
) -> str | None:
    """A mute begins from a `mute` (at most `max_mutes`... counted by the reply) and ends by
    `unmute` or at the TTL pass of its last turn (SPEC §12.2)."""
    payload = event.payload
    active = {mute.mute_id: mute for mute in scratch.mutes}
    if isinstance(payload, ev.Muted):
        if payload.mute_id in active:
            return "a mute began twice"
        return None
    assert isinstance(payload, ev.Unmuted)
    mute = active.get(payload.mute_id)
    if mute is None:
        return "unmuted a mute that is not active"
    boundary = next(
        (e.payload for e in group if isinstance(e.payload, ev.PostTurn | ev.Compacted)), None
    )
    if boundary is not None and (mute.until_turn is None or mute.until_turn > boundary.turn_number):
        return "a mute ended at a turn boundary before its until_turn"
    if boundary is None and len(group) != 1:
        return "an unmute decided more than its unmuted event"
    return None


def _check_neutralized(
    group: list[ev.Event], event: ev.Event, payload: ev.ForgedDirectiveNeutralized
) -> str | None:
    """The text is never stored, so the count cannot be recomputed: it must be positive and
    be what the reply said (SPEC §12.5)."""
    reply = event.reply or {}
    if payload.count < 1 or reply.get("neutralized") != payload.count or len(group) != 1:
        return "forged_directive_neutralized does not match its sanitize reply"
    return None


def _check_handed_off(before: SessionState, event: ev.Event, payload: ev.HandedOff) -> str | None:
    # The child's turn is recorded only inside the specs (every one carries the same).
    child_turn = payload.reminders[0].fired_at_turn if payload.reminders else 0
    try:
        expected = rules.handed_off_specs(before.pending, child_turn, event.agent_id)
    except ValidationError:
        return "handoff copied an agent id the spec model refuses as originating_agent_id"
    if payload.propagated_ids != [spec.id for spec in expected]:
        return "handoff propagated other reminders than the rules allow"
    if payload.reminders != expected:
        return "handoff gave the child other specs than the rules make"
    return None


def _compact_dedupes_differ(plan: rules.Compaction, group: list[ev.Event]) -> bool:
    """Whether the command's `deduped{boundary: compact}` events are not exactly the groups
    step 2b gives (SPEC §4.8), in order."""
    expected = [
        (g.survivor.spec.id, g.dropped_ids, g.survivor.spec.dedupe_key, len(g.dropped))
        for g in plan.deduped
    ]
    recorded = [
        (p.reminder_id, p.replaced_ids, p.dedupe_key, p.dropped_count)
        for p in (e.payload for e in group)
        if isinstance(p, ev.Deduped) and p.boundary == "compact"
    ]
    return recorded != expected


def _check_compacted(
    before: SessionState, group: list[ev.Event], payload: ev.Compacted
) -> str | None:
    plan = rules.compaction(before.pending, payload.turn_number, before.last_ended_turn)
    if not _check_ttl_pass(group, plan.ttl, payload.decremented_ids):
        return "the pre-compact TTL pass expired or decremented other reminders"
    compacted = [(p.reminder_id, p.ttl_turns_before) for p in _expired(group, "compaction")]
    if compacted != [(row.spec.id, plan.ttl_before(row)) for row in plan.compacted]:
        return "compaction expired other reminders than the survivors not preserved"
    if _compact_dedupes_differ(plan, group):
        return "compaction deduped other preserved survivors than the older ones of each key"
    if payload.preserved_ids != plan.preserved_ids:
        return "compaction preserved other reminders than those marked preserve_on_compact"
    if payload.directives_cleared != rules.directives_cleared(before.delivered):
        return "directives_cleared does not count the cleared history"
    return None


def verify(rows: Sequence[StoredEvent]) -> str | None:
    """The first divergence or break in a session's rows, named; None when all holds."""
    broken = check_chain(rows)
    if broken is not None:
        return broken
    events = decode_rows(rows)
    backwards = check_clock(events)
    if backwards is not None:
        return f"{_name(rows[backwards[0]])}: {backwards[1]}"
    state = SessionState()
    position = 0
    for _, grouped in groupby(events, key=lambda event: event.command_id):
        group = list(grouped)
        late = check_deadlines(state, group)
        if late is not None:
            index = min(position + late[0], len(rows) - 1)
            return f"{_name(rows[index])}: {late[1]}"
        # The command's own rule ran on the state after its deadline pass (SPEC §12.4).
        passed = deadline_prefix(group)
        if passed:
            state = fold_all(state, group[:passed])
            position += passed
            group = group[passed:]
        scratch = Scratch.thaw(state)
        for event in group:
            problem = _check_event(state, scratch, group, event)
            if problem is not None:
                index = position + group.index(event)
                return f"{_name(rows[index])}: {problem}"
            apply_event(scratch, event)
        state = fold_all(state, group)
        position += len(group)
    return None


# --- providers (SPEC §9): re-derive every recorded evaluation -----------------------------


@dataclass
class ProvidersVerdict:
    """What re-deriving the provider evaluations found."""

    problem: str | None = None
    verified: int = 0
    unverifiable: list[str] = field(default_factory=list)


def _evaluate_groups(events: Sequence[ev.Event]) -> list[tuple[int, list[ev.Event]]]:
    """(index of the first event, events) of every `evaluate` command in the log."""
    found: list[tuple[int, list[ev.Event]]] = []
    position = 0
    for _, grouped in groupby(events, key=lambda event: event.command_id):
        group = list(grouped)
        if any(isinstance(e.payload, ev.ProviderEvaluated) for e in group):
            found.append((position, group))
        position += len(group)
    return found


def verify_providers(
    rows: Sequence[StoredEvent],
    config: ProvidersConfig | None = None,
    runtime_events: Mapping[str, RuntimeEvent] | None = None,
) -> ProvidersVerdict:
    """Re-derive every `evaluate` command of the log with the current provider code and
    `config` (the default configuration when None): the providers are evaluated again on the
    session view they saw (`view_seq`) and the runtime event (from `runtime_events`, by id),
    the `evaluate` decider runs again on the state before the command, and its events must be
    the recorded ones. A runtime event that is not available (AGENT_EVENTS keeps them 7
    days) cannot be re-derived: it is listed, not counted as a divergence."""
    config = config or default_config()
    runtime_events = runtime_events or {}
    events = decode_rows(rows)
    verdict = ProvidersVerdict()
    for start, group in _evaluate_groups(events):
        first = next(e.payload for e in group if isinstance(e.payload, ev.ProviderEvaluated))
        assert isinstance(first, ev.ProviderEvaluated)
        runtime_event = runtime_events.get(first.runtime_event_id)
        if runtime_event is None:
            verdict.unverifiable.append(first.runtime_event_id)
            continue
        view = fold_all(SessionState(), events[: first.view_seq or 0])
        before = fold_all(SessionState(), events[:start])
        evaluations = evaluate_event(view, runtime_event, config)
        command = Evaluate(
            session_id=group[0].session_id,
            agent_id=runtime_event.agent_id,
            request_id=group[0].request_id,
            turn=runtime_event.turn,
            runtime_event_id=runtime_event.event_id,
            view_seq=first.view_seq,
            evaluations=evaluations,
        )
        context = CommandContext(
            command_id=group[0].command_id,
            occurred_at=group[0].occurred_at,
            new_reminder_id=group[0].command_id,
        )
        expected = decide(before, command, context).events
        for offset, recorded in enumerate(group):
            again = expected[offset] if offset < len(expected) else None
            if again is None or (again.kind, again.payload) != (recorded.kind, recorded.payload):
                what = (
                    "no such event"
                    if again is None
                    else f"{again.kind} {again.payload.model_dump(mode='json')}"
                )
                verdict.problem = (
                    f"{_name(rows[start + offset])}: runtime event {first.runtime_event_id} "
                    f"re-evaluated with the current providers gives {what}"
                )
                return verdict
        if len(expected) != len(group):
            verdict.problem = (
                f"{_name(rows[start])}: runtime event {first.runtime_event_id} re-evaluated "
                f"gives {len(expected)} events, the log has {len(group)}"
            )
            return verdict
        verdict.verified += 1
    return verdict

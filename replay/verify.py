"""`--verify`: check the hash chain and `session_seq`, then re-derive every recorded decision
with the current rules (SPEC §7.2) and name the first event that disagrees.

Decisions are re-derived per command (consecutive events sharing a `command_id`) from the
state before that command: dedupe replaced exactly the live reminders with the key; a drain
injected exactly what was queued; each TTL pass expired and decremented exactly the right
reminders; compaction preserved exactly the preserved ones; every `delivered` text is
rendered again from its directives with the `instructions` it recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

from contracts import events as ev
from contracts.state import PendingRow, SessionState
from core import fold_all
from core.canonical import links, sha256_hex
from core.decide import propagates
from core.fold import Scratch, apply_event
from core.render import (
    context_directives_text,
    fired_at,
    is_spoofing,
    select_winners,
    speaker_for,
    system_reminder_text,
)
from replay.engine import decode_rows
from replay.source import Row


def _name(row: Row) -> str:
    envelope = row.envelope
    return (
        f"event session_seq {envelope.get('session_seq')} "
        f"({envelope.get('kind')}, stream_seq {row.stream_seq}, id {envelope.get('event_id')})"
    )


def check_chain(rows: Sequence[Row]) -> str | None:
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


def _ttl_pass(state: SessionState, turn: int) -> tuple[list[str], list[str]]:
    expired: list[str] = []
    decremented: list[str] = []
    for row in state.pending:
        if row.ttl_remaining is None or fired_at(row.spec) > turn:
            continue
        (expired if row.ttl_remaining <= 1 else decremented).append(row.spec.id or "")
    return expired, decremented


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
    dropped = {e.payload.reminder_id for e in group if isinstance(e.payload, ev.Dropped)}
    winners = [
        row.spec.id
        for row in select_winners(before.pending, payload.turn_number)
        if not row.delivered and row.spec.id not in dropped
    ]
    if winners[: len(fired)] != fired:
        return "the current rules select other directives"
    speaker = speaker_for(live_rows)
    if payload.format == "system-reminder":
        text = system_reminder_text(live_rows)
    else:
        text = context_directives_text(live_rows, speaker, payload.instructions, payload.nonce)
    if text != payload.text:
        return "delivered.text differs from the envelope the current rules render"
    if sha256_hex(payload.text) != payload.text_sha256 or speaker != payload.speaker:
        return "text_sha256 or speaker does not match the text"
    return None


def _check_event(
    before: SessionState, scratch: Scratch, group: list[ev.Event], event: ev.Event
) -> str | None:
    """Why this event is not what the current rules decide here (None when it is)."""
    payload = event.payload
    if isinstance(payload, ev.Deduped):
        expected = [
            row.spec.id
            for row in scratch.pending
            if not row.audit_only and row.spec.dedupe_key == payload.dedupe_key
        ]
        if payload.replaced_ids != expected or payload.dropped_count != len(expected):
            return "dedupe replaced other reminders than the live ones with its key"
    elif isinstance(payload, ev.Injected):
        queued = next((q for q in scratch.queued if q.reminder.id == payload.reminder_id), None)
        if queued is not None and (
            queued.reminder != payload.reminder
            or payload.audit_only != (queued.mode == "audit_only")
        ):
            return "the drained reminder differs from what was queued"
        if payload.reminder.id != payload.reminder_id or payload.reminder.body.strip() == "":
            return "injected payload disagrees with its spec"
    elif isinstance(payload, ev.Queued):
        if payload.position != scratch.counters.get("queued", 0) + 1:
            return f"queued position {payload.position} was not the next one"
    elif isinstance(payload, ev.Fired):
        row = _live(scratch, payload.reminder_id)
        if row is None or row.spec.body != payload.body or row.ttl_remaining != payload.ttl_turns:
            return "fired does not match the live reminder"
    elif isinstance(payload, ev.Delivered):
        return _check_delivered(before, scratch, group, event)
    elif isinstance(payload, ev.Dropped):
        row = _live(scratch, payload.reminder_id)
        if payload.code == "spoofed_tag" and (row is None or not is_spoofing(row.spec.body)):
            return "dropped as spoofed_tag, but the body holds no system-reminder tag"
    elif isinstance(payload, ev.PostTurn):
        expected_expired, expected_decremented = _ttl_pass(before, payload.turn_number)
        expired = [
            e.payload.reminder_id
            for e in group
            if isinstance(e.payload, ev.Expired) and e.payload.reason == "ttl"
        ]
        if expired != expected_expired or payload.decremented_ids != expected_decremented:
            return "the TTL pass expired or decremented other reminders"
    elif isinstance(payload, ev.Compacted):
        return _check_compacted(before, group, payload)
    elif isinstance(payload, ev.HandedOff):
        expected = [row.spec.id for row in before.pending if propagates(row)]
        if payload.propagated_ids != expected:
            return "handoff propagated other reminders than the rules allow"
    return None


def _check_compacted(
    before: SessionState, group: list[ev.Event], payload: ev.Compacted
) -> str | None:
    passed = before.last_ended_turn is None or payload.turn_number > before.last_ended_turn
    expected_expired, expected_decremented = (
        _ttl_pass(before, payload.turn_number) if passed else ([], [])
    )
    expired = [
        e.payload.reminder_id
        for e in group
        if isinstance(e.payload, ev.Expired) and e.payload.reason == "ttl"
    ]
    if expired != expected_expired or payload.decremented_ids != expected_decremented:
        return "the pre-compact TTL pass expired or decremented other reminders"
    survivors = [row for row in before.pending if row.spec.id not in set(expected_expired)]
    preserved = [row.spec.id for row in survivors if row.spec.preserve_on_compact]
    if payload.preserved_ids != preserved:
        return "compaction preserved other reminders than those marked preserve_on_compact"
    cleared = sum(len(envelope.directive_ids) for envelope in before.delivered)
    if payload.directives_cleared != cleared:
        return "directives_cleared does not count the cleared history"
    return None


def verify(rows: Sequence[Row]) -> str | None:
    """The first divergence or break in a session's rows, named; None when all holds."""
    broken = check_chain(rows)
    if broken is not None:
        return broken
    events = decode_rows(rows)
    state = SessionState()
    position = 0
    for _, grouped in groupby(events, key=lambda event: event.command_id):
        group = list(grouped)
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

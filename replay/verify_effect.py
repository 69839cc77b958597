"""`--verify` for the wall clock and acknowledgements (SPEC §12.3, §12.4): a session's
recorded time never goes backwards, every command's deadline pass expired exactly the live
reminders past their `expires_at`, and every acknowledgement was one the rules accept.

Each check compares what a `core` rule gives with what the log says, like `replay.verify`.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts import events as ev
from contracts.state import SessionState
from core.clock import first_backwards, past_deadline
from core.redact import markers, redact


def check_clock(events: Sequence[ev.Event]) -> tuple[int, str] | None:
    """(index, problem) of the first event recorded earlier than the one before it."""
    index = first_backwards([event.occurred_at for event in events])
    if index is None:
        return None
    return index, (
        f"occurred_at {events[index].occurred_at} is earlier than the previous event's "
        f"{events[index - 1].occurred_at}: a session's recorded time never goes backwards"
    )


def deadline_prefix(group: Sequence[ev.Event]) -> int:
    """How many events open the command's batch as its deadline pass."""
    count = 0
    for event in group:
        payload = event.payload
        if not (isinstance(payload, ev.Expired) and payload.reason == "deadline"):
            break
        count += 1
    return count


def check_deadlines(before: SessionState, group: Sequence[ev.Event]) -> tuple[int, str] | None:
    """(index in the group, problem): the deadline pass opens the batch and expires exactly
    the live reminders whose `expires_at` is at or before the command's time, in order."""
    count = deadline_prefix(group)
    stray = next(
        (
            i
            for i, event in enumerate(group)
            if isinstance(event.payload, ev.Expired)
            and ("deadline" in (event.payload.reason, event.payload.expired_at_boundary))
            and (i >= count or event.payload.expired_at_boundary != "deadline")
        ),
        None,
    )
    if stray is not None:
        return stray, "a deadline expiry outside the deadline pass that opens the batch"
    expected = past_deadline(before.pending, group[0].occurred_at)
    recorded = [event.payload for event in group[:count]]
    for index, row in enumerate(expected):
        if index >= len(recorded):
            return len(recorded), (
                f"reminder {row.spec.id} was past its expires_at {row.spec.expires_at} and "
                "not expired by the deadline pass"
            )
        payload = recorded[index]
        assert isinstance(payload, ev.Expired)
        if (payload.reminder_id, payload.ttl_turns_before) != (row.spec.id, row.ttl_remaining):
            return index, "the deadline pass expired other reminders than the current rules do"
    if len(recorded) > len(expected):
        return len(expected), "the deadline pass expired a reminder not past its expires_at"
    return None


def check_acknowledged(
    before: SessionState, group: Sequence[ev.Event], payload: ev.Acknowledged
) -> str | None:
    """An acknowledgement of a reminder the session had, with an outcome not recorded
    before; `acted`/`ignored` of one delivered at least once; `dismissed` of a live one,
    removed in the same batch; a redacted note holds no secret the rule still finds."""
    target = payload.reminder_id
    if target not in before.seen_ids:
        return "acknowledged a reminder the session never had"
    if payload.outcome in before.acknowledged.get(target, []):
        return "acknowledged the same outcome twice (a repeat appends nothing)"
    if payload.outcome != "dismissed" and target not in before.fired_ids:
        return f"acknowledged as {payload.outcome} a reminder never delivered"
    if payload.outcome == "dismissed":
        live = any(row.spec.id == target for row in before.pending)
        removed = any(
            isinstance(e.payload, ev.Expired)
            and e.payload.reason == "dismissed"
            and e.payload.reminder_id == target
            for e in group
        )
        if not (live and removed):
            return "dismissed a reminder that was not live, or did not remove it"
    note = payload.note or ""
    if payload.redactions and (redact(note)[1] or markers(note) < payload.redactions):
        return "the redaction recorded does not match the note"
    return None


def check_dismissed(group: Sequence[ev.Event], payload: ev.Expired) -> str | None:
    """A `dismissed` expiry comes with the acknowledgement that asked for it."""
    if payload.expired_at_boundary != "acknowledge" or not any(
        isinstance(e.payload, ev.Acknowledged)
        and e.payload.outcome == "dismissed"
        and e.payload.reminder_id == payload.reminder_id
        for e in group
    ):
        return "a dismissed expiry without the acknowledgement that dismissed it"
    return None

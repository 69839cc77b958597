"""The effect report of SPEC §12.6: per source, provider and tag, what reminders cost and
what became of them — all counted from the events, so every number is re-derivable.

It reads events exactly as replay does (`replay.source` rows, `replay.engine.decode_rows`)
and needs no fold: each count is a fact an event records. Choices where the SPEC is silent:

- `injected` counts `injected` events (a drained queued reminder once, an inherited one in
  the child); `rendered` counts `fired` events (deliveries); `est_tokens` adds the reminder's
  tokens per delivery (`core.cost.directive_tokens` of the body as fired);
- `withheld` counts, per reason (`shed`, `muted`, `not_yet`, always all three keys), every
  render summary (of `delivered` or `withheld`) that held the reminder back;
- `expired_unacknowledged` counts reminders that left by an `expired` event (TTL, compaction,
  clear, deadline) before any acknowledgement; a dismissed one is acknowledged;
- `median_turns_to_ack` is the median, over reminders delivered before their first
  acknowledgement, of that acknowledgement's turn minus the first delivery's turn (null when
  there is none);
- `--since` counts only events recorded at or after that time; what a reminder is (its
  source, provider, tags) is still read from its earlier `injected` event.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts import events as ev
from contracts.spec import utc_millis
from contracts.stored import StoredEvent
from core.cost import directive_tokens
from replay.engine import decode_rows

WITHHELD_REASONS = ("shed", "muted", "not_yet")
OUTCOMES = ("acted", "ignored", "dismissed")
Key = tuple[str, str | None, str | None]


@dataclass
class Counts:
    """The §12.6 counts of one row (or of the totals)."""

    injected: int = 0
    rendered: int = 0
    est_tokens: int = 0
    withheld: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WITHHELD_REASONS, 0))
    acknowledged: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    expired_unacknowledged: int = 0
    turns_to_ack: list[int] = field(default_factory=list)

    def add(self, other: Counts) -> None:
        """Add another's counts to these."""
        self.injected += other.injected
        self.rendered += other.rendered
        self.est_tokens += other.est_tokens
        for reason, n in other.withheld.items():
            self.withheld[reason] += n
        for outcome, n in other.acknowledged.items():
            self.acknowledged[outcome] += n
        self.expired_unacknowledged += other.expired_unacknowledged
        self.turns_to_ack.extend(other.turns_to_ack)

    def to_json(self) -> dict[str, Any]:
        """The counts as the JSON report writes them."""
        median = statistics.median(self.turns_to_ack) if self.turns_to_ack else None
        if isinstance(median, float) and median.is_integer():
            median = int(median)
        return {
            "injected": self.injected,
            "rendered": self.rendered,
            "est_tokens": self.est_tokens,
            "withheld": dict(self.withheld),
            "acknowledged": dict(self.acknowledged),
            "expired_unacknowledged": self.expired_unacknowledged,
            "median_turns_to_ack": median,
        }


@dataclass
class _Reminder:
    """One reminder's life in a session, as the events tell it."""

    source: str
    tags: list[str]
    provider_id: str | None = None
    counts: Counts = field(default_factory=Counts)
    first_delivery_turn: int | None = None
    acknowledged: bool = False

    def row_keys(self) -> list[Key]:
        """Its rows: one per tag (a reminder without tags counts under tag null)."""
        tags: list[str | None] = list(self.tags) or [None]
        return [(self.source, self.provider_id, tag) for tag in tags]


@dataclass
class EffectReport:
    """The report over many sessions: rows per (source, provider, tag) and the totals."""

    sessions: int = 0
    rows: dict[Key, Counts] = field(default_factory=dict)
    totals: Counts = field(default_factory=Counts)

    def add_reminder(self, reminder: _Reminder) -> None:
        for key in reminder.row_keys():
            counts = self.rows.get(key)
            if counts is None:
                counts = self.rows[key] = Counts()
            counts.add(reminder.counts)
        self.totals.add(reminder.counts)

    def to_json(self) -> dict[str, Any]:
        """`{sessions, rows: [...], totals: {...}}` exactly as SPEC §12.6 shapes it."""
        ordered = sorted(self.rows.items(), key=lambda item: tuple(part or "" for part in item[0]))
        return {
            "sessions": self.sessions,
            "rows": [
                {"source": source, "provider_id": provider, "tag": tag, **counts.to_json()}
                for (source, provider, tag), counts in ordered
            ],
            "totals": self.totals.to_json(),
        }


class _Session:
    """The reminders of one session, counted event by event. A reminder stays known by its
    id after it leaves (an acknowledgement may come later) until the id is injected again."""

    def __init__(self, since: str | None) -> None:
        self.since = since
        self.live: dict[str, _Reminder] = {}
        self.done: list[_Reminder] = []
        self.counted = False

    def _get(self, reminder_id: str) -> _Reminder | None:
        return self.live.get(reminder_id)

    def _summary(self, summary: ev.RenderSummary) -> None:
        for reason, ids in (
            ("shed", summary.shed_ids),
            ("muted", summary.muted_ids),
            ("not_yet", summary.not_yet_ids),
        ):
            for reminder_id in ids:
                if (reminder := self._get(reminder_id)) is not None:
                    reminder.counts.withheld[reason] += 1

    def _expired(self, reminder_id: str) -> None:
        reminder = self.live.get(reminder_id)
        if reminder is not None and not reminder.acknowledged:
            reminder.counts.expired_unacknowledged += 1

    def apply(self, event: ev.Event) -> None:
        """Count one event (facts about what a reminder is are kept whatever its time)."""
        payload = event.payload
        counting = self.since is None or event.occurred_at >= self.since
        self.counted = self.counted or counting
        if isinstance(payload, ev.Injected):
            previous = self.live.pop(payload.reminder_id, None)
            if previous is not None:
                self.done.append(previous)
            reminder = _Reminder(source=payload.source, tags=list(payload.tags))
            reminder.counts.injected = 1 if counting else 0
            self.live[payload.reminder_id] = reminder
        elif isinstance(payload, ev.ProviderEvaluated):
            if payload.reminder_id is not None and (found := self._get(payload.reminder_id)):
                found.provider_id = payload.provider_id
        elif not counting:
            return
        elif isinstance(payload, ev.Fired):
            if (delivered := self._get(payload.reminder_id)) is not None:
                delivered.counts.rendered += 1
                delivered.counts.est_tokens += directive_tokens(payload.body)
                if delivered.first_delivery_turn is None:
                    delivered.first_delivery_turn = payload.turn_number
        elif isinstance(payload, ev.Delivered | ev.Withheld):
            if payload.summary is not None:
                self._summary(payload.summary)
        elif isinstance(payload, ev.Acknowledged):
            self._acknowledged(payload)
        elif isinstance(payload, ev.Expired):
            self._expired(payload.reminder_id)

    def _acknowledged(self, payload: ev.Acknowledged) -> None:
        reminder = self._get(payload.reminder_id)
        if reminder is None:
            return
        reminder.counts.acknowledged[payload.outcome] += 1
        if not reminder.acknowledged and reminder.first_delivery_turn is not None:
            reminder.counts.turns_to_ack.append(
                max(0, payload.turn_number - reminder.first_delivery_turn)
            )
        reminder.acknowledged = True

    def reminders(self) -> list[_Reminder]:
        return [*self.done, *self.live.values()]


def add_session(report: EffectReport, events: Iterable[ev.Event], since: str | None = None) -> None:
    """Count one session's events (in order) into `report`."""
    session = _Session(since)
    for event in events:
        session.apply(event)
    if session.counted:
        report.sessions += 1
    for reminder in session.reminders():
        report.add_reminder(reminder)


def sessions_of(rows: Iterable[StoredEvent]) -> dict[str, list[StoredEvent]]:
    """Rows grouped by session, each session's in stream order."""
    grouped: dict[str, list[StoredEvent]] = {}
    for row in rows:
        grouped.setdefault(str(row.envelope.get("session_id")), []).append(row)
    return grouped


def effect_report(
    sessions: Sequence[Sequence[StoredEvent]], since: str | None = None, progress: Any = None
) -> EffectReport:
    """The §12.6 report over sessions' rows, decoded as replay decodes them; `since` is an
    RFC 3339 time (any offset; ValueError when it is not one); `progress(done, total)` after
    each session."""
    since = None if since is None else utc_millis(since)
    report = EffectReport()
    for done, rows in enumerate(sessions, start=1):
        add_session(report, decode_rows(rows), since)
        if progress is not None:
            progress(done, len(sessions))
    return report

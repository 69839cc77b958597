"""The audit chart as data: one row per reminder, one column per turn, markers in cells.

`chart(events)` is a pure function of the replayed events — no layout, no SVG — so what the
chart claims (where each bar starts and ends, which marker sits in which cell) is tested
against the golden logs on its own; `replay.svg` only draws it.

Columns are every turn from the first event's to the last's, gaps included, so a turn in
which nothing happened still takes its place on the time axis. A bar is one life of a
reminder: it starts in the column of its `injected` event (or of its `queued` event when it
never went live) and ends in the column of the event that removed it (`expired`, `deduped`,
`dropped`, `revoked`), or in the last column when it is still live at the end of the log.

An event's column is its `turn`, except that the chart's clock never runs backwards: a
command may carry a turn lower than one the session has already seen (a late `compact`
labelled with an earlier turn, say), and its events then sit in the column of the highest
turn seen so far — where they happened in the log — with the recorded turn in their titles.

Each row is labelled by what the reminder says, not by its id: its tags (else its dedupe
key), then the first words of its body (`row_label`). The audit page is the auditor's view of
exactly what the model was told, so a body's first words belong there — never in a log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from contracts import events as ev
from contracts.spec import Authority

MarkerKind = Literal[
    "queued",
    "fired",
    "delivered",
    "deduped",
    "compacted",
    "revoked",
    "inherited",
    "dropped",
    "handed_off",
    "provider_evaluated",
    "envelope",
    "withheld",
    "deadline",
    "acknowledged",
]

#: Marker kinds in legend order.
MARKER_KINDS: Final[tuple[MarkerKind, ...]] = (
    "queued",
    "fired",
    "delivered",
    "deduped",
    "compacted",
    "revoked",
    "dropped",
    "inherited",
    "handed_off",
    "provider_evaluated",
    "envelope",
    "withheld",
    "deadline",
    "acknowledged",
)

AUTHORITIES: Final[tuple[Authority, ...]] = ("contract", "corrective", "advisory")
#: How many words of a body a row label shows.
LABEL_WORDS: Final = 8


def row_label(tags: Iterable[str], dedupe_key: str | None, body: str) -> str:
    """`tags · first words of the body…` (the dedupe key when there is no tag)."""
    words = body.split()
    text = " ".join(words[:LABEL_WORDS]) + ("…" if len(words) > LABEL_WORDS else "")
    key = ", ".join(tags) or (dedupe_key or "")
    return f"{key} · {text}" if key else text


@dataclass(frozen=True)
class Marker:
    """One event in one cell. `title` names the reminder (or provider) and the event kind."""

    kind: MarkerKind
    turn: int
    session_seq: int
    title: str
    reminder_id: str | None = None
    fired: bool | None = None
    """For `provider_evaluated`: whether the provider produced a reminder."""


@dataclass(frozen=True)
class Bar:
    """One life of a reminder, from its first column to its last (both inclusive)."""

    reminder_id: str
    authority: Authority
    first_turn: int
    last_turn: int
    queued_turn: int | None
    """The turn it was queued in, when it waited in a queue first."""
    injected: bool
    """False for a reminder that was queued and never went live (revoked in the queue)."""
    ended_by: str | None
    """`expired (ttl)`, `deduped`, `dropped`, `revoked`…; None while still live at the end."""
    audit_only: bool
    title: str


@dataclass(frozen=True)
class ReminderTimeline:
    """Everything that happened to one reminder id, in order of first appearance."""

    reminder_id: str
    bars: tuple[Bar, ...]
    markers: tuple[Marker, ...]
    label: str = ""
    """What the row is called: `row_label` of the reminder's first `queued` or `injected`
    event (its id when the log holds neither)."""


@dataclass(frozen=True)
class Envelope:
    """One `delivered` event: the envelope exactly as the model received it."""

    turn: int
    session_seq: int
    speaker: str
    format: str
    directive_ids: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Chart:
    """The whole chart, ready to draw."""

    turns: tuple[int, ...]
    rows: tuple[ReminderTimeline, ...]
    envelopes: tuple[Envelope, ...]
    session_markers: tuple[Marker, ...]
    """Session-wide events: one `envelope` per delivery and one `compacted` per compaction."""
    providers: tuple[Marker, ...]
    """One `provider_evaluated` marker per evaluation, in its turn's column."""

    @property
    def bars(self) -> tuple[Bar, ...]:
        """Every bar, row by row."""
        return tuple(bar for row in self.rows for bar in row.bars)


@dataclass
class _Open:
    authority: Authority
    first_turn: int
    queued_turn: int | None
    injected: bool
    audit_only: bool


@dataclass
class _RowBuilder:
    reminder_id: str
    bars: list[Bar] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    open: _Open | None = None
    label: str | None = None

    def name(self, tags: Iterable[str], dedupe_key: str | None, body: str) -> None:
        """Label the row once, from the first event that carries the reminder's text."""
        if self.label is None:
            self.label = row_label(tags, dedupe_key, body)

    def mark(self, kind: MarkerKind, event: ev.Event, column: int, what: str = "") -> None:
        title = f"{self.reminder_id}: {kind}{what} {_at(event, column)}"
        self.markers.append(
            Marker(kind, column, event.session_seq, title, reminder_id=self.reminder_id)
        )

    def close(self, event: ev.Event, ended_by: str | None, last_turn: int) -> None:
        life, self.open = self.open, None
        if life is None:
            return
        start = "injected" if life.injected else "queued"
        until = (
            f"{ended_by} {_at(event, last_turn)}"
            if ended_by
            else f"still live at the end of the log (turn {last_turn})"
        )
        audit = ", audit only" if life.audit_only else ""
        title = (
            f"{self.reminder_id}: {life.authority}{audit}, {start} at turn {life.first_turn}, "
            f"{until}"
        )
        self.bars.append(
            Bar(
                reminder_id=self.reminder_id,
                authority=life.authority,
                first_turn=life.first_turn,
                last_turn=last_turn,
                queued_turn=life.queued_turn,
                injected=life.injected,
                ended_by=ended_by,
                audit_only=life.audit_only,
                title=title,
            )
        )


def _at(event: ev.Event, column: int) -> str:
    recorded = "" if event.turn == column else f", recorded as turn {event.turn}"
    return f"at turn {column} (#{event.session_seq}{recorded})"


@dataclass
class _Lanes:
    """The session-wide lanes: envelopes, compactions and provider evaluations."""

    envelopes: list[Envelope] = field(default_factory=list)
    session: list[Marker] = field(default_factory=list)
    providers: list[Marker] = field(default_factory=list)

    def add(self, event: ev.Event, turn: int) -> None:
        p, seq = event.payload, event.session_seq
        if isinstance(p, ev.Delivered):
            self.envelopes.append(
                Envelope(turn, seq, p.speaker, p.format, tuple(p.directive_ids), p.text)
            )
            what = f"envelope delivered {_at(event, turn)}: {len(p.directive_ids)} directive(s)"
            self.session.append(Marker("envelope", turn, seq, what))
        elif isinstance(p, ev.Compacted):
            self.session.append(Marker("compacted", turn, seq, f"compacted {_at(event, turn)}"))
        elif isinstance(p, ev.ProviderEvaluated):
            outcome = "fired" if p.fired else "quiet"
            what = (
                f"provider {p.provider_id}: provider_evaluated on {p.event}, {outcome} "
                f"{_at(event, turn)}"
            )
            self.providers.append(Marker("provider_evaluated", turn, seq, what, fired=p.fired))


def _mark_held_back(
    summary: ev.RenderSummary, event: ev.Event, turn: int, row: Callable[[str], _RowBuilder]
) -> None:
    """A `withheld` marker on each reminder a render held back, saying why (SPEC §12.1)."""
    for reason, ids in (
        ("shed by the budget", summary.shed_ids),
        ("muted", summary.muted_ids),
        ("not yet due", summary.not_yet_ids),
    ):
        for reminder_id in ids:
            row(reminder_id).mark("withheld", event, turn, f" ({reason})")


def _add_to_rows(event: ev.Event, turn: int, row: Callable[[str], _RowBuilder]) -> None:
    """What one event does to the rows of the reminders it names."""
    p = event.payload
    if isinstance(p, ev.Queued):
        r = row(p.reminder.id or "")
        r.close(event, "queued again", turn)
        r.open = _Open(p.reminder.authority, turn, turn, False, False)
        r.mark("queued", event, turn, f" for {p.mode}")
        r.name(p.reminder.tags, p.reminder.dedupe_key, p.reminder.body)
    elif isinstance(p, ev.Injected):
        r = row(p.reminder_id)
        waited = r.open.queued_turn if r.open and not r.open.injected else None
        if r.open and r.open.injected:
            r.close(event, "injected again", turn)
        r.open = _Open(p.authority, turn, waited, True, p.audit_only)
        r.name(p.tags, p.dedupe_key, p.reminder.body)
    elif isinstance(p, ev.Deduped):
        for replaced in p.replaced_ids:
            row(replaced).mark("deduped", event, turn, f", replaced by {p.reminder_id}")
            row(replaced).close(event, "deduped", turn)
    elif isinstance(p, ev.Revoked):
        row(p.reminder_id).mark("revoked", event, turn)
        row(p.reminder_id).close(event, "revoked", turn)
    elif isinstance(p, ev.Fired):
        row(p.reminder_id).mark("fired", event, turn)
    elif isinstance(p, ev.Delivered):
        for directive in p.directive_ids:
            row(directive).mark("delivered", event, turn)
        if p.summary is not None:
            _mark_held_back(p.summary, event, turn, row)
    elif isinstance(p, ev.Withheld):
        _mark_held_back(p.summary, event, turn, row)
    elif isinstance(p, ev.Acknowledged):
        row(p.reminder_id).mark("acknowledged", event, turn, f" as {p.outcome} by {p.by}")
    elif isinstance(p, ev.Expired):
        if p.reason == "deadline":
            row(p.reminder_id).mark("deadline", event, turn, ", its expires_at passed")
        row(p.reminder_id).close(event, f"expired ({p.reason})", turn)
    elif isinstance(p, ev.Dropped):
        row(p.reminder_id).mark("dropped", event, turn, f" ({p.reason}, {p.code})")
        row(p.reminder_id).close(event, "dropped", turn)
    elif isinstance(p, ev.Compacted):
        for kept in p.preserved_ids:
            row(kept).mark("compacted", event, turn, ", kept through it")
    elif isinstance(p, ev.HandedOff):
        for handed in p.propagated_ids:
            row(handed).mark("handed_off", event, turn, f" to {p.child_session_id}")
    elif isinstance(p, ev.Inherited):
        row(p.reminder_id).mark("inherited", event, turn, f" from {p.parent_session_id}")


def chart(events: Iterable[ev.Event]) -> Chart:
    """The chart of a session's events, in log order."""
    listed = list(events)
    if not listed:
        return Chart((), (), (), (), ())
    first = listed[0].turn
    last = max(e.turn for e in listed)
    rows: dict[str, _RowBuilder] = {}
    lanes = _Lanes()

    def row(reminder_id: str) -> _RowBuilder:
        return rows.setdefault(reminder_id, _RowBuilder(reminder_id))

    turn = first
    for event in listed:
        turn = max(turn, event.turn)
        _add_to_rows(event, turn, row)
        lanes.add(event, turn)
    end = listed[-1]
    for builder in rows.values():
        builder.close(end, None, last)
    return Chart(
        turns=tuple(range(first, last + 1)),
        rows=tuple(
            ReminderTimeline(
                b.reminder_id, tuple(b.bars), tuple(b.markers), b.label or b.reminder_id
            )
            for b in rows.values()
        ),
        envelopes=tuple(lanes.envelopes),
        session_markers=tuple(lanes.session),
        providers=tuple(lanes.providers),
    )

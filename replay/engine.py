"""`replay(rows) -> ReplayResult`: the canonical state of a session, its digest, its checks.

It folds with `core.fold`, exactly what the projector uses, so an audit and the live
projection cannot disagree. Cuts (SPEC §7.2): `until_seq` keeps events with
`session_seq <= N`; `at_turn` gives the state right after the last event with `turn <= T`;
`until_time` keeps events up to the last one with `occurred_at <= ISO`.

A cut before the first event gives the empty state of that session (its `session_id` set,
`session_seq` 0). A `until_seq` past the last event keeps every event and says so in
`ReplayResult.notes` (the CLI prints the note on stderr).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from contracts.decode import InvalidEvent, UnknownSchema, decode
from contracts.events import Event
from contracts.state import SessionState
from contracts.stored import StoredEvent
from core import canonical_json, fold_all
from replay.errors import ReplayError


@dataclass(frozen=True)
class Cut:
    """Where to stop the replay."""

    until_seq: int | None = None
    at_turn: int | None = None
    until_time: str | None = None


@dataclass
class ReplayResult:
    """The replayed state, the bytes `--format json` prints, and their digest."""

    state: SessionState
    events: list[Event]
    rows: list[StoredEvent]
    divergences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def canonical(self) -> str:
        """Canonical JSON of the state with a newline at the end (SPEC §7.2)."""
        return state_json(self.state)

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical bytes."""
        return hashlib.sha256(self.canonical.encode("utf-8")).hexdigest()


def state_json(state: SessionState) -> str:
    """The `--format json` text of a state."""
    return canonical_json(state.model_dump(mode="json")) + "\n"


def parse_time(text: str) -> datetime:
    """An ISO 8601 time; naive times are UTC."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ReplayError(f"--until-time: not an ISO 8601 time: {text[:60]!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def decode_rows(rows: Sequence[StoredEvent]) -> list[Event]:
    """Decode every row (`contracts.decode`), or fail naming the first that is not an event."""
    events = []
    for row in rows:
        try:
            events.append(decode(row.envelope))
        except UnknownSchema as exc:
            raise ReplayError(
                f"stream_seq {row.stream_seq}: unknown event schema version {exc.schema[:60]!r}"
            ) from None
        except InvalidEvent as exc:
            raise ReplayError(
                f"stream_seq {row.stream_seq}: not a valid event ({', '.join(exc.places[:4])})"
            ) from None
    return events


def cut_length(events: Sequence[Event], cut: Cut) -> int:
    """How many leading events the cut keeps."""
    keep = len(events)
    if cut.until_seq is not None:
        keep = min(keep, sum(1 for e in events if e.session_seq <= cut.until_seq))
    if cut.at_turn is not None:
        last = max((i for i, e in enumerate(events) if e.turn <= cut.at_turn), default=-1)
        keep = min(keep, last + 1)
    if cut.until_time is not None:
        limit = parse_time(cut.until_time)
        last = max(
            (i for i, e in enumerate(events) if parse_time(e.occurred_at) <= limit), default=-1
        )
        keep = min(keep, last + 1)
    return keep


def replay(rows: Sequence[StoredEvent], cut: Cut | None = None) -> ReplayResult:
    """Fold a session's rows (in stream order) into its canonical state."""
    events = decode_rows(rows)
    cut = cut or Cut()
    keep = cut_length(events, cut)
    kept_events, kept_rows = events[:keep], list(rows[:keep])
    state = fold_all(
        SessionState(), [(e, r.stream_seq) for e, r in zip(kept_events, kept_rows, strict=True)]
    )
    if not kept_events and events:
        # Before its first event the session exists, empty: name it rather than print "".
        state = state.model_copy(update={"session_id": events[0].session_id})
    notes = []
    if cut.until_seq is not None and events and cut.until_seq > events[-1].session_seq:
        notes.append(
            f"--until-seq {cut.until_seq} is past the last event (session_seq "
            f"{events[-1].session_seq}); showing the whole session"
        )
    return ReplayResult(state, kept_events, kept_rows, notes=notes)

"""`project(record, stored) -> (record, outcome)`: the projector's rules for one stored event.

SPEC §6.3–§6.4, as one pure function used alike by the live projector, `reminders rebuild`
and `reminders verify-projection`. A record is what the bucket holds for a session token:
a `SessionState`, a `Tombstone`, or nothing. In order:

1. poison — the message does not decode (`contracts.decode`), or its subject does not
   confirm its kind and session or is not `transcript.reminder.<kind>.<token>`: it goes to
   the DLQ and the session is marked degraded at its `stream_seq` (a message whose subject
   is not an event subject belongs to no session and degrades none; a tombstone stays);
2. tombstoned — a forgotten session skips its purged events; a `session_seq` 1 after the
   purge starts a new life;
3. degraded — a degraded session skips everything until `reminders rebuild` repairs it;
4. duplicate — a `session_seq` already applied is skipped;
5. gap — a `session_seq` past the next one waits (nak with a delay); when no redelivery can
   fill it any more (`gap_is_final`) it is poison `gap`;
6. broken chain — `chain` does not follow the session's `chain_head`: poison;
7. applied — folded with `core.fold`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from contracts.decode import DecodeError, decode
from contracts.records import Tombstone
from contracts.state import DegradedMark, SessionState
from contracts.stored import StoredEvent, Unreadable
from contracts.subjects import parse_event_subject
from core.canonical import links
from core.fold import fold

Record = SessionState | Tombstone | None
"""What the projection bucket holds for one session token."""


class Verdict(Enum):
    """What happens to one delivery."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"
    GAP = "gap"
    POISON = "poison"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Outcome:
    """A verdict, with the DLQ code and reason of poison (or why a message was skipped)."""

    verdict: Verdict
    code: str = ""
    reason: str = ""


APPLIED = Outcome(Verdict.APPLIED)
DUPLICATE = Outcome(Verdict.DUPLICATE)
GAP = Outcome(Verdict.GAP)
TOMBSTONED = Outcome(Verdict.SKIPPED, "tombstoned")
DEGRADED = Outcome(Verdict.SKIPPED, "degraded")


def degrade(record: Record, stream_seq: int, code: str) -> Record:
    """Mark the session degraded at the first poison message (tombstones stay)."""
    if isinstance(record, Tombstone):
        return record
    state = record or SessionState()
    if state.degraded is not None:
        return state
    return state.model_copy(update={"degraded": DegradedMark(stream_seq=stream_seq, code=code)})


def _poison(
    record: Record, stream_seq: int, subject: str, code: str, reason: str
) -> tuple[Record, Outcome]:
    if parse_event_subject(subject) is not None:
        record = degrade(record, stream_seq, code)
    return record, Outcome(Verdict.POISON, code, reason)


def project(
    record: Record,
    stored: StoredEvent | Unreadable,
    *,
    after_gap: bool = False,
    gap_is_final: bool = False,
) -> tuple[Record, Outcome]:
    """The record after one stored event, and what became of the event.

    `after_gap`: an earlier event of this session in the same batch is waiting on a gap, so
    this one waits too. `gap_is_final`: a gap will not be filled by waiting (the message was
    redelivered too often, or the whole log is being read), so it is poison.
    """
    if isinstance(stored, Unreadable):
        error = stored.error
        return _poison(record, stored.stream_seq, stored.subject, error.code, error.reason)
    try:
        event = decode(stored.envelope, stored.subject)
    except DecodeError as exc:
        return _poison(record, stored.stream_seq, stored.subject, exc.code, exc.reason)
    if isinstance(record, Tombstone):
        if stored.stream_seq <= record.purged_through or event.session_seq != 1:
            return record, TOMBSTONED
        record = None  # a new life of a forgotten session id
    state = record if isinstance(record, SessionState) else SessionState()
    if state.degraded is not None:
        return record, DEGRADED
    if event.session_seq <= state.session_seq:
        return record, DUPLICATE
    if after_gap or event.session_seq > state.session_seq + 1:
        if gap_is_final:
            reason = "the previous event never arrived"
            return _poison(record, stored.stream_seq, stored.subject, "gap", reason)
        return record, GAP
    if not links(state.chain_head, stored.envelope):
        reason = "chain does not follow chain_head"
        return _poison(record, stored.stream_seq, stored.subject, "broken_chain", reason)
    return fold(state, event, stored.stream_seq), APPLIED


def project_all(
    record: Record,
    stored: Sequence[StoredEvent | Unreadable],
    *,
    gap_is_final: Sequence[bool] | None = None,
) -> tuple[Record, list[Outcome]]:
    """`project` over one session's events in stream order; after a gap, later ones wait.

    `gap_is_final[i]` says whether a gap at event i is final; without it every gap is (what
    a rebuild or a verification wants: the log read is all there is).
    """
    outcomes: list[Outcome] = []
    blocked = False
    for index, item in enumerate(stored):
        final = True if gap_is_final is None else gap_is_final[index]
        record, outcome = project(record, item, after_gap=blocked, gap_is_final=final)
        blocked = blocked or outcome.verdict is Verdict.GAP
        outcomes.append(outcome)
    return record, outcomes

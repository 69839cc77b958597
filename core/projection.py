"""`project(record, stored) -> (record, judgement)`: the projector's rules for one stored event.

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
from contracts.events import Event
from contracts.records import Tombstone
from contracts.state import DegradedMark, SessionState
from contracts.stored import StoredEvent, Unreadable
from contracts.subjects import parse_event_subject
from core.canonical import links
from core.fold import Scratch, apply_event, fold

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
class Judgement:
    """What `project` judged of one delivery: its verdict, with the DLQ code and reason of
    poison (or why a message was skipped)."""

    verdict: Verdict
    code: str = ""
    reason: str = ""


APPLIED = Judgement(Verdict.APPLIED)
DUPLICATE = Judgement(Verdict.DUPLICATE)
GAP = Judgement(Verdict.GAP)
TOMBSTONED = Judgement(Verdict.SKIPPED, "tombstoned")
DEGRADED = Judgement(Verdict.SKIPPED, "degraded")


def degrade(record: Record, stream_seq: int, code: str) -> Record:
    """Mark the session degraded at the first poison message (tombstones stay)."""
    if isinstance(record, Tombstone):
        return record
    state = record or SessionState()
    if state.degraded is not None:
        return state
    return state.model_copy(update={"degraded": DegradedMark(stream_seq=stream_seq, code=code)})


#: What `_judge` reads of the session: a frozen `SessionState` or the `Scratch` a run of
#: events is being folded into (same field names, so one set of rules serves both).
_Current = SessionState | Scratch | Tombstone | None


def _judge(
    current: _Current,
    stored: StoredEvent | Unreadable,
    *,
    after_gap: bool,
    gap_is_final: bool,
) -> tuple[Event | None, Judgement, bool]:
    """Rules 1–6 of the module docstring for one stored event, without changing anything.

    Returns the decoded event when it is to be applied, the judgement, and whether `current`
    is a tombstone whose new life this event starts (the caller then folds from empty).
    """
    if isinstance(stored, Unreadable):
        error = stored.error
        return None, Judgement(Verdict.POISON, error.code, error.reason), False
    try:
        event = decode(stored.envelope, stored.subject)
    except DecodeError as exc:
        return None, Judgement(Verdict.POISON, exc.code, exc.reason), False
    new_life = False
    if isinstance(current, Tombstone):
        if stored.stream_seq <= current.purged_through or event.session_seq != 1:
            return None, TOMBSTONED, False
        current, new_life = None, True  # a new life of a forgotten session id
    if current is None:
        degraded, session_seq, chain_head = None, 0, ""
    else:
        degraded, session_seq, chain_head = (
            current.degraded,
            current.session_seq,
            current.chain_head,
        )
    if degraded is not None:
        return None, DEGRADED, new_life
    if event.session_seq <= session_seq:
        return None, DUPLICATE, new_life
    if after_gap or event.session_seq > session_seq + 1:
        if gap_is_final:
            reason = "the previous event never arrived"
            return None, Judgement(Verdict.POISON, "gap", reason), new_life
        return None, GAP, new_life
    if not links(chain_head, stored.envelope):
        reason = "chain does not follow chain_head"
        return None, Judgement(Verdict.POISON, "broken_chain", reason), new_life
    return event, APPLIED, new_life


def project(
    record: Record,
    stored: StoredEvent | Unreadable,
    *,
    after_gap: bool = False,
    gap_is_final: bool = False,
) -> tuple[Record, Judgement]:
    """The record after one stored event, and what became of the event.

    `after_gap`: an earlier event of this session in the same batch is waiting on a gap, so
    this one waits too. `gap_is_final`: a gap will not be filled by waiting (the message was
    redelivered too often, or the whole log is being read), so it is poison.

    An event that is neither applied nor poison changes nothing: a new life's first event that
    waits on a gap leaves the tombstone, which only that event applied (or poison) replaces.
    """
    event, judgement, new_life = _judge(
        record, stored, after_gap=after_gap, gap_is_final=gap_is_final
    )
    if event is not None:
        # A new life's record is a tombstone, so it folds from an empty state too.
        return fold(
            record if isinstance(record, SessionState) else SessionState(), event, stored.stream_seq
        ), judgement
    if judgement.verdict is Verdict.POISON and parse_event_subject(stored.subject) is not None:
        # Poison that starts a new life degrades the new life; a tombstone stays otherwise.
        record = degrade(None if new_life else record, stored.stream_seq, judgement.code)
    return record, judgement


class SessionFold:
    """`project` over one session's events as they come, in stream order; after a gap,
    later ones wait.

    A run of applied events is folded into one scratch and frozen only when `record` is
    asked for, so a run costs one copy of the state, not one per event (`core.fold`). A
    streaming reader (`reminders rebuild`) keeps one per session it is folding and feeds it
    event by event; `project_all` is the same over a list.
    """

    __slots__ = ("_blocked", "_record", "_scratch")

    def __init__(self, record: Record) -> None:
        self._record: Record = record
        self._scratch: Scratch | None = None
        self._blocked = False

    def add(self, item: StoredEvent | Unreadable, *, gap_is_final: bool = True) -> Judgement:
        """Judge one stored event and fold it in when it applies."""
        current = self._record if self._scratch is None else self._scratch
        event, judgement, new_life = _judge(
            current, item, after_gap=self._blocked, gap_is_final=gap_is_final
        )
        if new_life:
            self._record = None
        if event is not None:
            if self._scratch is None:
                record = self._record
                self._scratch = Scratch.thaw(
                    record if isinstance(record, SessionState) else SessionState()
                )
            apply_event(self._scratch, event, item.stream_seq)
        elif judgement.verdict is Verdict.POISON and parse_event_subject(item.subject) is not None:
            if self._scratch is None:
                self._record = degrade(self._record, item.stream_seq, judgement.code)
            elif self._scratch.degraded is None:
                self._scratch.degraded = DegradedMark(
                    stream_seq=item.stream_seq, code=judgement.code
                )
        self._blocked = self._blocked or judgement.verdict is Verdict.GAP
        return judgement

    @property
    def record(self) -> Record:
        """The record after every event added so far."""
        if self._scratch is not None:
            self._record = self._scratch.release()
            self._scratch = None
        return self._record


def project_all(
    record: Record,
    stored: Sequence[StoredEvent | Unreadable],
    *,
    gap_is_final: Sequence[bool] | None = None,
) -> tuple[Record, list[Judgement]]:
    """`project` over one session's events in stream order; after a gap, later ones wait
    (`SessionFold`).

    `gap_is_final[i]` says whether a gap at event i is final; without it every gap is (what
    a rebuild or a verification wants: the log read is all there is).
    """
    folding = SessionFold(record)
    judgements = [
        folding.add(item, gap_is_final=True if gap_is_final is None else gap_is_final[index])
        for index, item in enumerate(stored)
    ]
    return folding.record, judgements

"""The gateway's cache of folded sessions, and how an entry behind the log is caught up.

After a conflict or a commit whose outcome is unknown, the cached session may be behind the
log. Reading the whole session again costs its whole history (thousands of events for a
long-lived session, each decoded and folded), and under load such a read can take longer
than a command's deadline: measured in the soak, a gateway whose long sessions all needed
reading again after faults timed out on every read, cached nothing, and read them again on
the next command. So the entry is kept, marked behind, and what the log holds after it is
folded onto it (`caught_up`), checked against the log's count of the session's messages;
anything that does not continue it exactly is read whole instead — except a tail that
continues it exactly but stops short of the count (`ReplicaBehind`): the replica that
answered the direct gets is behind the leader that counted, and a whole read answered by
it would be as far behind, at the cost of the session's whole history held at once. The
catch-up is tried again then (another replica may answer), a few times, before the whole
read. And a count lower than the cached state has seen (`ShorterLog`) is a forgotten
session only while the leader that counted is in quorum; otherwise it is a leader cut off
from its cluster, and the read waits for a leader that is.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.decode import DecodeError, decode
from contracts.events import Event
from contracts.session_index import IndexBuilder
from contracts.state import SessionState
from core import fold_all
from services.adapters.lru import SizedLru
from services.adapters.session_read import RawStored
from services.gateway.command import CachedSession

#: Between two measures, each event folded into a cached state is charged this many bytes.
EVENT_ALLOWANCE_BYTES = 128
#: A cached state is measured again once it has folded one event per this many bytes of its
#: last measure: encoding costs about as much per byte as anything, so this spends about one
#: kibibyte's encoding per event, whatever the state's size.
REMEASURE_BYTES_PER_EVENT = 1024


def encoded_bytes(state: SessionState) -> int:
    """Bytes of the state encoded as JSON: the measure the cache's byte bound counts (the
    bucket's canonical form is about as long, but several times slower to make)."""
    return len(state.__pydantic_serializer__.to_json(state))


@dataclass
class _Slot:
    """One cached session: the entry, its last measure and the events folded since."""

    entry: CachedSession
    measured: int
    unmeasured_events: int = 0
    #: The log may hold events after it (a conflict, an unknown outcome): not served as it
    #: is, but caught up from by a read of what follows it (`behind`, `caught_up`).
    behind: bool = False

    @property
    def size(self) -> int:
        """What the slot counts against the byte bound."""
        return self.measured + self.unmeasured_events * EVENT_ALLOWANCE_BYTES


class SessionCache:
    """LRU of folded sessions, bounded by count and by the bytes of their encoded states.

    A folded state holds what its session's history grew (replies, envelopes, ids) up to
    `max_payload_bytes`, so a bound by count alone bounds nothing a deployment can size.
    A state read from the log is measured (`encoded_bytes`; the read costs far more); a
    state the command path folds further is charged `EVENT_ALLOWANCE_BYTES` per event and
    measured again every `measured / REMEASURE_BYTES_PER_EVENT` events, so that measuring
    stays a small constant share of a command however large the session."""

    def __init__(self, capacity: int, capacity_bytes: int = 32 * 1024 * 1024) -> None:
        self._capacity = capacity
        self._capacity_bytes = capacity_bytes
        self._slots: SizedLru[_Slot] = SizedLru(capacity_bytes, capacity)

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def cached_bytes(self) -> int:
        """What the cached sessions count against the byte bound."""
        return self._slots.bytes

    @property
    def evictions(self) -> int:
        """Sessions evicted beyond a bound so far."""
        return self._slots.evictions

    def get(self, session_id: str) -> CachedSession | None:
        """The cached entry, freshened in LRU order; None when it may be behind the log."""
        slot = self._slots.get(session_id)
        return None if slot is None or slot.behind else slot.entry

    def behind(self, session_id: str) -> CachedSession | None:
        """The entry marked behind the log (`mark_behind`), to catch up from; else None."""
        slot = self._slots.get(session_id)
        return slot.entry if slot is not None and slot.behind else None

    def mark_behind(self, session_id: str) -> None:
        """The log may hold events after the cached entry (after a conflict or an unknown
        outcome): keep it as the start of a read of what follows, not as the session."""
        slot = self._slots.get(session_id)
        if slot is not None:
            slot.behind = True

    def put(self, session_id: str, entry: CachedSession, folded_events: int | None = None) -> None:
        """Remember an entry, evicting the least recently used beyond either bound.

        `folded_events`: how many events `entry` folded onto the entry cached before (its
        size then follows from the old one's); None measures the state."""
        if self._capacity == 0 or self._capacity_bytes == 0:
            return
        old = self._slots.pop(session_id)
        if old is not None and folded_events is not None:
            unmeasured = old.unmeasured_events + folded_events
            if unmeasured * REMEASURE_BYTES_PER_EVENT <= old.measured:
                self._slots.put(session_id, _Slot(entry, old.measured, unmeasured))
                return
        self._slots.put(session_id, _Slot(entry, encoded_bytes(entry.state)))

    def drop(self, session_id: str) -> None:
        """Forget a session (after a conflict)."""
        self._slots.pop(session_id)


class ShorterLog(Exception):
    """The leader counts fewer messages of the session than the cached state has seen: the
    session was forgotten (its new life, if any, not in the tail), or the leader is one cut
    off from its cluster, answering from its old log until it steps down."""


class ReplicaBehind(Exception):
    """The catch-up's tail continued the cached state exactly but ended before the log's
    count of the session's messages: the replica that answered is behind; try again."""


def caught_up(
    base: CachedSession, tail: list[RawStored], count: int, events_after: int | None
) -> tuple[CachedSession, list[tuple[Event, int]]] | None:
    """`base` with the session's messages after it in `tail` folded on, and the events of
    `tail` stored after stream seq `events_after` (none for None); or None when `tail` does
    not continue `base` — an event out of sequence, an unreadable message, or a log whose
    count of the session's messages (`count`) is not what the folded state has seen: a
    forgotten session's new life, a replica still behind, something written beside the
    gateway. Then the session is read whole. Raises `ReplicaBehind` when `tail` continues
    `base` exactly and only falls short of `count`, `ShorterLog` when `count` is below what
    `base` and `tail` have seen."""
    kept: list[tuple[Event, int]] = []
    new: list[tuple[Event, int]] = []
    expected = base.state.session_seq + 1
    for raw in tail:
        try:
            event = decode(raw.data)
        except DecodeError:
            return None
        if events_after is not None and raw.stream_seq > events_after:
            kept.append((event, raw.stream_seq))
        if raw.stream_seq > base.last_stream_seq:
            if event.session_seq != expected:
                return None
            expected += 1
            new.append((event, raw.stream_seq))
    if count > expected - 1:
        raise ReplicaBehind(f"the tail ends at {expected - 1} of {count}")
    if count < expected - 1:
        raise ShorterLog(f"the log counts {count} of {expected - 1} seen")
    if not new:
        return base, kept
    builder = IndexBuilder(base.index)
    for event, seq in new:
        builder.add(event.command_id, seq)
    return CachedSession(fold_all(base.state, new), new[-1][1], builder.index()), kept

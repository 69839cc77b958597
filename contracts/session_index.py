"""The session index header: where a session's earlier events are stored (SPEC §7.1).

A reader that walks a session back along its `Nats-Expected-Last-Subject-Sequence` links
waits for one event before it can ask for the one before it. The last message of every
append (one command's events for one session) therefore carries `Reminders-Session-Index`,
which says where every earlier append of the session is, in a tree of fan-out `FANOUT`: so a
reader that fetched the session's last event knows, after a few rounds of direct gets, the
stream sequence of every event, and asks for them all at once.

The index is a function of the session's appends alone — their first stream sequence and
their event count, in order — so every writer (any gateway replica, a gateway that read the
session from the log) computes the same header for the next append:

- level 0 lists the appends not yet grouped, as `first:count`;
- level L ≥ 1 lists references: the stream sequence of a message whose own header's level
  L−1 list was full (`FANOUT` entries), which the reader expands.

A level that reached `FANOUT` entries is listed full once more, in the header of the next
append's last message, and then replaced by one reference to that message one level up.
The header is a hint, never trusted: a reader keeps what it found only when every message
is on the session's subjects and they are exactly as many as the stream counts.

Value: `count;level0;level1;…`, the append's own event count then each level, entries
comma-separated, trailing empty levels left out. Example: `2;118:2,140:1;64,97`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

H_SESSION_INDEX: Final = "Reminders-Session-Index"
#: Entries a level lists at most before it is grouped under one reference a level up.
FANOUT: Final = 16
#: Levels at most: `FANOUT ** MAX_LEVELS` appends of one session are indexed; past that no
#: header is written and readers walk the session back as they would an unindexed one.
MAX_LEVELS: Final = 6
#: The header's value is at most this long: level 0's entries (two numbers of at most 20
#: digits and two separators each) and the references of the levels above.
MAX_HEADER_BYTES: Final = 5 + FANOUT * 42 + (MAX_LEVELS - 1) * FANOUT * 21 + MAX_LEVELS

#: One append: the stream sequence of its first event and how many events it stored.
Run = tuple[int, int]


@dataclass(frozen=True)
class SessionIndex:
    """Where a session's appends are, as the next append's header lists them."""

    runs: tuple[Run, ...] = ()
    """Level 0: the appends not yet grouped, in order."""
    refs: tuple[tuple[int, ...], ...] = ()
    """Levels 1 and up: `refs[i]` are messages whose header's level-i list was full."""

    def header(self, count: int) -> str:
        """The header value for the last message of an append of `count` events."""
        levels = [",".join(f"{first}:{n}" for first, n in self.runs)]
        levels += [",".join(map(str, level)) for level in self.refs]
        while levels and not levels[-1]:
            levels.pop()
        return ";".join([str(count), *levels])

    def after(self, first: int, count: int) -> SessionIndex | None:
        """The index once an append of `count` events stored from stream seq `first` (its
        header written from this index); None past `MAX_LEVELS` levels."""
        last = first + count - 1
        levels: list[list[int]] = [list(level) for level in self.refs]
        runs = list(self.runs)
        # Highest level first: a full level's reference lands one level up, which may itself
        # have been full and been emptied just now.
        for depth in range(len(levels), -1, -1):
            size = len(runs) if depth == 0 else len(levels[depth - 1])
            if size < FANOUT:
                continue
            if depth + 1 >= MAX_LEVELS:
                return None
            if depth == len(levels):
                levels.append([])
            levels[depth].append(last)
            if depth == 0:
                runs = []
            else:
                levels[depth - 1] = []
        runs.append((first, count))
        return SessionIndex(tuple(runs), tuple(tuple(level) for level in levels))


#: The index of a session with no events.
EMPTY_INDEX: Final = SessionIndex()


class IndexBuilder:
    """The index of a session read event by event, from each event's command id and stream
    seq: a run of one command's events at consecutive stream sequences is one append. Holds
    the index and the append in progress only, however long the session."""

    def __init__(self, start: SessionIndex | None = EMPTY_INDEX) -> None:
        self._index = start
        #: The append in progress: its command id, first stream seq and event count.
        self._open: tuple[str, int, int] | None = None

    def add(self, command_id: str, seq: int) -> None:
        """The session's next event."""
        current = self._open
        if current is not None and current[0] == command_id and current[1] + current[2] == seq:
            self._open = (command_id, current[1], current[2] + 1)
            return
        self._index = self._closed()
        self._open = (command_id, seq, 1)

    def index(self) -> SessionIndex | None:
        """The index after every event added (None past `MAX_LEVELS`)."""
        return self._closed()

    def _closed(self) -> SessionIndex | None:
        if self._open is None or self._index is None:
            return self._index
        return self._index.after(self._open[1], self._open[2])


@dataclass(frozen=True)
class ParsedIndex:
    """A header's value read back: the append's event count, its level 0 and references."""

    count: int
    runs: tuple[Run, ...]
    refs: tuple[tuple[int, ...], ...]

    def refs_at(self, depth: int) -> tuple[int, ...]:
        """The references of level `depth` ≥ 1 (none past the last level)."""
        return self.refs[depth - 1] if depth <= len(self.refs) else ()


def parse_index(value: str) -> ParsedIndex:
    """A header's value; raises ValueError when it is not one."""
    if len(value) > MAX_HEADER_BYTES:
        raise ValueError("session index too long")
    parts = value.split(";")
    count = _positive(parts[0])
    runs: list[Run] = []
    if len(parts) > 1 and parts[1]:
        for entry in parts[1].split(","):
            first, _, n = entry.partition(":")
            runs.append((_positive(first), _positive(n)))
    refs = tuple(
        tuple(_positive(entry) for entry in part.split(",")) if part else () for part in parts[2:]
    )
    if len(refs) >= MAX_LEVELS:
        raise ValueError("session index too deep")
    return ParsedIndex(count, tuple(runs), refs)


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or text.startswith("0"):
        raise ValueError(f"not a positive integer: {text!r}")
    return int(text)

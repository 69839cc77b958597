"""Folding the whole stream session by session in bounded memory, for `reminders rebuild`
and `reminders verify-projection --all`.

The stream is read once, in order. Each session being folded is a `core.projection.SessionFold`
in a least-recently-used cache of at most `cache_sessions` sessions; past that, the sessions
touched longest ago are frozen, encoded as the bucket would store them and spilled to a
temporary SQLite file, and read back (decoded and validated) when their next event comes.
The file, not the process, grows with the stream: memory holds the cache, one read batch and
SQLite's page cache, whatever the stream's size. Nothing is written to the projection bucket
while the stream is read; the caller writes or compares the finished records afterwards
(`FoldStore.sessions`).
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from contracts.records import Tombstone
from contracts.state import SessionState
from contracts.stored import StoredEvent
from contracts.subjects import last_token
from core.projection import Record, SessionFold
from services.adapters.records import decode_record, encode_state

#: Sessions folded in memory at once by default. A folded session of ordinary traffic takes
#: about ten KiB as Python objects (its state's size is capped by the contract), so the
#: cache stays a few tens of MiB.
DEFAULT_CACHE_SESSIONS = 4096
#: Share of the cache spilled at once when it is full (one SQLite transaction).
_SPILL_SHARE = 8


@dataclass(slots=True)
class _Folding:
    """One session being folded, with where its events sat."""

    fold: SessionFold
    first_seq: int
    last_seq: int
    events: int


@dataclass(frozen=True, slots=True)
class FoldedSession:
    """What the stream gave for one session token: the record its events fold into from
    nothing, and the stream sequences of its first and last event and how many it had."""

    token: str
    record: Record
    first_seq: int
    last_seq: int
    events: int


def _encode(record: Record) -> bytes:
    if isinstance(record, SessionState):
        return encode_state(record)
    if isinstance(record, Tombstone):  # a fold from nothing never makes one
        return record.model_dump_json().encode("utf-8")
    return b""


class FoldStore:
    """Every session of a stream read in order, folded from nothing, in bounded memory."""

    def __init__(self, cache_sessions: int = DEFAULT_CACHE_SESSIONS) -> None:
        self._capacity = max(1, cache_sessions)
        self._cache: OrderedDict[str, _Folding] = OrderedDict()
        self._directory = tempfile.TemporaryDirectory(prefix="reminders-fold-")
        self._db = sqlite3.connect(Path(self._directory.name) / "fold.sqlite3")
        # A scratch file deleted at the end: no journal, no fsync.
        self._db.execute("PRAGMA journal_mode=OFF")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute(
            "CREATE TABLE folded (token TEXT PRIMARY KEY, record BLOB NOT NULL,"
            " first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, events INTEGER NOT NULL)"
        )
        self.spilled = 0
        self.reloaded = 0

    def __enter__(self) -> FoldStore:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Drop the spill file."""
        self._db.close()
        self._directory.cleanup()

    def add(self, row: StoredEvent) -> None:
        """Fold the next stored event of the stream into its session."""
        token = last_token(row.subject)
        folding = self._cache.get(token)
        if folding is None:
            folding = self._reload(token) or _Folding(SessionFold(None), row.stream_seq, 0, 0)
            self._cache[token] = folding
            if len(self._cache) > self._capacity:
                self._spill(max(1, self._capacity // _SPILL_SHARE))
        else:
            self._cache.move_to_end(token)
        folding.fold.add(row)
        folding.last_seq = row.stream_seq
        folding.events += 1

    def _reload(self, token: str) -> _Folding | None:
        found = self._db.execute(
            "SELECT record, first_seq, last_seq, events FROM folded WHERE token = ?", (token,)
        ).fetchone()
        if found is None:
            return None
        self.reloaded += 1
        record, first_seq, last_seq, events = found
        return _Folding(SessionFold(decode_record(record)), first_seq, last_seq, events)

    def _spill(self, count: int) -> None:
        rows = []
        for _ in range(min(count, len(self._cache))):
            token, folding = self._cache.popitem(last=False)
            rows.append(
                (
                    token,
                    _encode(folding.fold.record),
                    folding.first_seq,
                    folding.last_seq,
                    folding.events,
                )
            )
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO folded VALUES (?, ?, ?, ?, ?)", rows)
        self.spilled += len(rows)

    def finish(self) -> int:
        """Spill what is still cached; returns how many sessions were folded."""
        self._spill(len(self._cache))
        (count,) = self._db.execute("SELECT count(*) FROM folded").fetchone()
        return int(count)

    def sessions(self, chunk: int = 256) -> Iterator[list[FoldedSession]]:
        """Every folded session (after `finish`), in token order, `chunk` at a time."""
        cursor = self._db.execute(
            "SELECT token, record, first_seq, last_seq, events FROM folded ORDER BY token"
        )
        while batch := cursor.fetchmany(chunk):
            yield [
                FoldedSession(token, decode_record(record), first_seq, last_seq, events)
                for token, record, first_seq, last_seq, events in batch
            ]

    def __contains__(self, token: object) -> bool:
        found = self._db.execute("SELECT 1 FROM folded WHERE token = ?", (token,)).fetchone()
        return found is not None

"""Folding the whole stream session by session in bounded memory, for `reminders rebuild`
and `reminders verify-projection --all`.

Two passes. While the stream is read, once and in order, each stored message is appended
as it came to one of `partitions` temporary files, chosen by a hash of its session's token,
so each file holds whole sessions in stream order (`add`). Then each file is read back in
turn and its sessions folded (`finish`): each session being folded is a
`core.projection.SessionFold` in a least-recently-used cache of at most `cache_sessions`
sessions; past that, the sessions touched longest ago are frozen, encoded as the bucket
would store them and spilled to a temporary SQLite file, and read back (decoded and
validated) when their next event comes. A file holds a `partitions`-th of the sessions, so
unless a stream has more than `partitions × cache_sessions` sessions nothing is spilled
before its session's last event: each session's state is built once and encoded once,
where folding interleaved traffic as it comes would read back and spill again a session for
nearly every event. The files, not the process, grow with the stream: memory holds the
cache, the files' write buffers and one read buffer, and SQLite's page cache, whatever the
stream's size. Nothing is written to the projection bucket here; the caller writes or
compares the finished records afterwards (`FoldStore.sessions`).

The files are independent of each other, so a big stream's are folded by `workers` processes
at once, each with its own cache and its own SQLite file, merged into the store's as each
file is done: the fold is the costliest part of a rebuild and one process uses one core.
Memory is then bounded per process: each worker holds an interpreter with the contracts (and
no NATS client: this module loads none) and its cache, beside the reading process. Workers
are started with `spawn`, so a program that calls this with enough messages to start them
must guard its main module (`if __name__ == "__main__":`), as `multiprocessing` requires;
the `reminders` command does.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import struct
import tempfile
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO

from contracts.records import Tombstone
from contracts.state import SessionState
from contracts.stored import StoredEvent
from contracts.subjects import last_token
from core.projection import Record, SessionFold
from services.adapters.record_codec import decode_record, encode_state

if TYPE_CHECKING:  # the fold's workers load no NATS client
    from services.adapters.session_read import RawStored

#: Sessions folded in memory at once by default. A folded session of ordinary traffic takes
#: about ten KiB as Python objects (its state's size is capped by the contract), so the
#: cache stays a few tens of MiB.
DEFAULT_CACHE_SESSIONS = 4096
#: Share of the cache spilled at once when it is full (one SQLite transaction).
_SPILL_SHARE = 8
#: Files the first pass spreads the sessions over: every one may be open at once, well
#: under a process's usual limit of open files.
DEFAULT_PARTITIONS = 256
#: Each file's write buffer, in bytes.
_WRITE_BUFFER = 32 * 1024
#: One message in a partition file: its stream sequence, the lengths of its subject and body
#: (then the subject and the body).
_MESSAGE = struct.Struct("<QII")
#: `progress(done, total)` of the second pass, in messages folded.
FoldProgress = Callable[[int, int], None]
#: Messages kept below which the files are folded in this process: starting a worker
#: process costs about as much as folding this many messages.
WORKERS_FROM_MESSAGES = 50_000
#: The table of folded sessions, in the store's SQLite file and in each worker's.
_FOLDED_TABLE = (
    "CREATE TABLE folded (token TEXT PRIMARY KEY, record BLOB NOT NULL,"
    " first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, events INTEGER NOT NULL,"
    " session_id TEXT, state_seq INTEGER, degraded INTEGER NOT NULL)"
)


#: Most processes folding at once by default: each holds an interpreter with the contracts
#: loaded and a cache of its own, so memory grows with them.
MAX_DEFAULT_WORKERS = 4


def default_workers() -> int:
    """Processes folding at once by default: one per core this process may run on, at most
    `MAX_DEFAULT_WORKERS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_WORKERS))


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
    nothing, as the bucket would store it, and the stream sequences of its first and last
    event and how many it had.

    The record is kept encoded, with the few of its fields a rebuild or a verification
    decides on beside it, so writing it or finding it equal to the bucket's value needs no
    decoding (`record` decodes it when a session needs more)."""

    token: str
    #: The record's bucket bytes (`encode_state`); empty when the events fold into nothing.
    encoded: bytes
    first_seq: int
    last_seq: int
    events: int
    #: The state's `session_id` and `stream_seq`; None when the record is not a state.
    session_id: str | None = None
    state_seq: int | None = None
    #: Whether the state is marked degraded (a poison event skipped).
    degraded: bool = False

    @property
    def record(self) -> Record:
        """The record itself, decoded and validated."""
        return decode_record(self.encoded)

    @classmethod
    def of(
        cls, token: str, record: Record, first_seq: int, last_seq: int, events: int
    ) -> FoldedSession:
        """A session folded to `record`, encoded once here."""
        encoded = encode_record(record)
        if not isinstance(record, SessionState):
            return cls(token, encoded, first_seq, last_seq, events)
        return cls(
            token,
            encoded,
            first_seq,
            last_seq,
            events,
            record.session_id,
            record.stream_seq,
            record.degraded is not None,
        )


def encode_record(record: Record) -> bytes:
    """A record's bytes as the bucket would store them (empty for no record)."""
    if isinstance(record, SessionState):
        return encode_state(record)
    if isinstance(record, Tombstone):  # a fold from nothing never makes one
        return record.model_dump_json().encode("utf-8")
    return b""


def _open_scratch_db(path: Path) -> sqlite3.Connection:
    """A SQLite file of folded sessions, deleted at the end: no journal, no fsync."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute(_FOLDED_TABLE)
    return db


class _SessionFolder:
    """Folds partition files into the `folded` table of `db`, at most `capacity` sessions
    in memory at once (the rest spilled to the table and read back when needed)."""

    def __init__(self, db: sqlite3.Connection, capacity: int) -> None:
        self._db = db
        self._capacity = max(1, capacity)
        self._cache: OrderedDict[str, _Folding] = OrderedDict()
        self.spilled = 0
        self.reloaded = 0

    def fold_file(self, path: Path) -> int:
        """Fold every message of one partition file, then spill its sessions, all of which
        are whole now, and drop the file; returns how many messages it held."""
        folded = 0
        with open(path, "rb") as file:
            while header := file.read(_MESSAGE.size):
                stream_seq, subject_size, body_size = _MESSAGE.unpack(header)
                subject = file.read(subject_size).decode("utf-8")
                self._fold(StoredEvent.leniently(file.read(body_size), stream_seq, subject))
                folded += 1
        path.unlink()
        self._spill(len(self._cache))
        return folded

    def _fold(self, row: StoredEvent) -> None:
        """Fold one stored event into its session."""
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
            folded = FoldedSession.of(
                token, folding.fold.record, folding.first_seq, folding.last_seq, folding.events
            )
            rows.append(
                (
                    token,
                    folded.encoded,
                    folded.first_seq,
                    folded.last_seq,
                    folded.events,
                    folded.session_id,
                    folded.state_seq,
                    folded.degraded,
                )
            )
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO folded VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
        self.spilled += len(rows)


def _leave_interrupts_to_the_command() -> None:
    """A worker's start: Ctrl-C reaches every process of the terminal's group, and the
    command stops the pool itself (a worker interrupted would print its own traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _fold_in_worker(partition: str, db_path: str, capacity: int) -> tuple[int, int, int]:
    """A worker process's part: one partition file folded into a SQLite file of its own;
    returns (messages folded, sessions spilled, sessions read back)."""
    db = _open_scratch_db(Path(db_path))
    try:
        folder = _SessionFolder(db, capacity)
        messages = folder.fold_file(Path(partition))
        return messages, folder.spilled, folder.reloaded
    finally:
        db.close()


class FoldStore:
    """Every session of a stream read in order, folded from nothing, in bounded memory."""

    def __init__(
        self,
        cache_sessions: int = DEFAULT_CACHE_SESSIONS,
        partitions: int = DEFAULT_PARTITIONS,
        workers: int | None = None,
        workers_from: int | None = None,
    ) -> None:
        self._capacity = max(1, cache_sessions)
        self._directory = tempfile.TemporaryDirectory(prefix="reminders-fold-")
        self._partition_count = max(1, partitions)
        self._partitions: dict[int, BinaryIO] = {}
        self._kept = 0
        self._workers = max(1, default_workers() if workers is None else workers)
        # Looked up here, not bound as a default, so a test can lower it for a whole command.
        self._workers_from = WORKERS_FROM_MESSAGES if workers_from is None else workers_from
        self._db = _open_scratch_db(Path(self._directory.name) / "fold.sqlite3")
        # Its counts cover the workers' too (added as each file is merged).
        self._folder = _SessionFolder(self._db, self._capacity)

    @property
    def spilled(self) -> int:
        """Sessions frozen and spilled to SQLite while folding, by every process."""
        return self._folder.spilled

    @property
    def reloaded(self) -> int:
        """Spilled sessions read back because more of their events came, by every process."""
        return self._folder.reloaded

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
        """Drop the partition and spill files."""
        for file in self._partitions.values():
            file.close()
        self._partitions.clear()
        self._db.close()
        self._directory.cleanup()

    def _partition_path(self, index: int) -> Path:
        return Path(self._directory.name) / f"partition-{index}"

    def add(self, raw: RawStored) -> None:
        """Keep the next stored message of the stream, to be folded into its session by
        `finish`."""
        subject = raw.subject.encode("utf-8")
        index = zlib.crc32(last_token(raw.subject).encode("utf-8")) % self._partition_count
        file = self._partitions.get(index)
        if file is None:
            file = open(self._partition_path(index), "wb", buffering=_WRITE_BUFFER)  # noqa: SIM115
            self._partitions[index] = file
        file.write(_MESSAGE.pack(raw.stream_seq, len(subject), len(raw.data)))
        file.write(subject)
        file.write(raw.data)
        self._kept += 1

    def finish(self, progress: FoldProgress | None = None) -> int:
        """Fold every message kept, partition by partition (in worker processes when there
        are several and enough messages); returns how many sessions were folded."""
        for file in self._partitions.values():
            file.close()
        indexes = sorted(self._partitions)
        self._partitions.clear()
        if self._workers > 1 and len(indexes) > 1 and self._kept >= self._workers_from:
            self._fold_in_workers(indexes, progress)
        else:
            done = 0
            for index in indexes:
                done += self._folder.fold_file(self._partition_path(index))
                if progress is not None:
                    progress(done, self._kept)
        (count,) = self._db.execute("SELECT count(*) FROM folded").fetchone()
        return int(count)

    def _fold_in_workers(self, indexes: list[int], progress: FoldProgress | None) -> None:
        """Each partition file folded by one of `workers` processes into a SQLite file of
        its own, merged into the store's as it is done. Workers are started fresh (spawn):
        this process runs an event loop and holds a connection a fork would copy."""
        context = multiprocessing.get_context("spawn")
        workers = min(self._workers, len(indexes))
        done = 0
        pool = ProcessPoolExecutor(
            workers, mp_context=context, initializer=_leave_interrupts_to_the_command
        )
        try:
            pending = {
                pool.submit(
                    _fold_in_worker,
                    str(self._partition_path(index)),
                    str(self._worker_db_path(index)),
                    self._capacity,
                ): index
                for index in indexes
            }
            for future in as_completed(pending):
                messages, spilled, reloaded = future.result()
                self._merge(self._worker_db_path(pending[future]))
                self._folder.spilled += spilled
                self._folder.reloaded += reloaded
                done += messages
                if progress is not None:
                    progress(done, self._kept)
        finally:
            # After a worker's error or an interrupt, the files not started are not folded.
            pool.shutdown(wait=True, cancel_futures=True)

    def _worker_db_path(self, index: int) -> Path:
        return Path(self._directory.name) / f"folded-{index}.sqlite3"

    def _merge(self, path: Path) -> None:
        """A worker's folded sessions copied into the store's table, and its file dropped.
        A session's events all went to one partition file, so no token comes twice."""
        self._db.execute("ATTACH DATABASE ? AS part", (str(path),))
        try:
            with self._db:
                self._db.execute("INSERT INTO folded SELECT * FROM part.folded")
        finally:
            self._db.execute("DETACH DATABASE part")
        path.unlink()

    def sessions(self, chunk: int = 256) -> Iterator[list[FoldedSession]]:
        """Every folded session (after `finish`), in token order, `chunk` at a time."""
        cursor = self._db.execute(
            "SELECT token, record, first_seq, last_seq, events, session_id, state_seq, degraded"
            " FROM folded ORDER BY token"
        )
        while batch := cursor.fetchmany(chunk):
            yield [
                FoldedSession(token, record, first, last, events, session_id, seq, bool(degraded))
                for token, record, first, last, events, session_id, seq, degraded in batch
            ]

    def __contains__(self, token: object) -> bool:
        found = self._db.execute("SELECT 1 FROM folded WHERE token = ?", (token,)).fetchone()
        return found is not None

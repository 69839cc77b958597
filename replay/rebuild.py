"""`reminders rebuild` and `reminders verify-projection` (SPEC §7.2).

Both read the whole stream once, in order, and fold every session from nothing with the
projector's own rules (`core.projection.SessionFold`) in bounded memory (`replay.fold_store`:
the messages kept by session in temporary files while the stream is read, then each file
folded in a bounded cache of sessions, any overflow spilled to a temporary file). Only then do they
touch the bucket, `SESSIONS_IN_FLIGHT` sessions at a time (their values read with one
multi-key get, a rebuild's writes sent as one atomic batch):

- rebuild writes each folded record with compare-and-set on the revision it read. It is safe
  while services run: a session whose projection is already ahead of what was read (a
  greater `stream_seq`) is left to the live projector; a write that loses a race is re-read
  and decided again; a session forgotten meanwhile (a tombstone) is folded again from the
  tombstone with the session's own events.
- verify-projection compares each projected state with the fold of the session's events up
  to that state's `stream_seq`: the fold of the whole read when the state covers it, else
  the session's events read again on their own. Then it lists the bucket's keys (by its
  stream, with direct gets: `services.adapters.bucket_scan`, so the fleet auditor, who may
  create no consumer, can run it) for projections whose session the read found no event of.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

import nats.errors
from nats.aio.client import Client

from contracts.records import Tombstone
from contracts.state import SessionState
from contracts.stored import StoredEvent
from contracts.subjects import session_token, token_subject_filter
from core.projection import Record, project_all
from replay.errors import ReplayError
from replay.fold_store import DEFAULT_CACHE_SESSIONS, FoldedSession, FoldStore, encode_record
from replay.scope import AuditScope
from replay.source import EVENT_FILTER, STALL_RETRIES, iterate_raw, stored_row
from services.adapters.bucket_scan import bucket_values
from services.adapters.jetstream import JetStreamApiError
from services.adapters.record_codec import decode_record, encode_state, record_position
from services.adapters.records import KvSessionStore, StaleRevision
from services.adapters.session_read import iterate_direct, session_messages

FLEET = AuditScope()
#: `progress(stage, done, total)`: stages "reading" and "folding" count events, "writing" and
#: "checking" count sessions, "listing" (verify-projection's scan of the bucket) counts its
#: messages.
StageProgress = Callable[[str, int, int], None]
#: What a read of the bucket returns.
Read = TypeVar("Read")
#: Sessions written or checked at once: their values read with one multi-key get, their
#: writes sent as one atomic batch (the server takes at most 1,000 of either).
SESSIONS_IN_FLIGHT = 256


def project(start: Record, rows: list[StoredEvent]) -> Record:
    """What the projector's rules make of a session's whole log, from `start`."""
    record, _ = project_all(start, rows)
    return record


async def fold_stream(
    nc: Client,
    stream: str,
    store: FoldStore,
    progress: StageProgress | None = None,
) -> int:
    """Fold every event of the stream into `store`; returns how many sessions it holds."""
    reading = None if progress is None else lambda done, total: progress("reading", done, total)
    async for raw in iterate_raw(nc, stream, EVENT_FILTER, progress=reading):
        store.add(raw)
    folding = None if progress is None else lambda done, total: progress("folding", done, total)
    return store.finish(folding)


async def session_rows(
    nc: Client, stream: str, token: str, session_id: str | None, through_seq: int
) -> list[StoredEvent]:
    """One session's events up to `through_seq`, read on their own: along the session's
    back-pointers when its id is known (cost grows with the session), else by its subject."""
    if session_id is not None and session_token(session_id) == token:
        messages, _ = await session_messages(nc, stream, session_id, batch=2048)
    else:
        messages = [
            raw async for raw in iterate_direct(nc, stream, token_subject_filter(token), batch=2048)
        ]
    return [stored_row(raw) for raw in messages if raw.stream_seq <= through_seq]


async def _each(
    store: FoldStore,
    total: int,
    stage: str,
    handle: Callable[[list[FoldedSession]], Awaitable[None]],
    progress: StageProgress | None,
) -> None:
    """`handle` every folded session, `SESSIONS_IN_FLIGHT` at a time."""
    done = 0
    for chunk in store.sessions(SESSIONS_IN_FLIGHT):
        await handle(chunk)
        done += len(chunk)
        if progress is not None:
            progress(stage, done, total)


async def read_projection(store: KvSessionStore, token: str) -> tuple[bytes | None, int | None]:
    """The bucket's value and revision for `token`, asked for again (up to `STALL_RETRIES`
    times) when a read times out: a direct get may be answered by a replica that froze or
    went away, as a whole-stream read's batch may; a read that keeps timing out ends the
    command in one line (`ReplayError`)."""
    return await _asked_again(
        lambda: store.read(token), f"the projection of session {token} was not read in time"
    )


async def read_projections(
    store: KvSessionStore, tokens: list[str]
) -> dict[str, tuple[bytes | None, int | None]]:
    """`read_projection` of several sessions with one multi-key get, asked for again as
    that one is."""
    return await _asked_again(
        lambda: store.read_many(tokens),
        f"the projections of {len(tokens)} sessions were not read in time",
    )


async def _asked_again(read: Callable[[], Awaitable[Read]], failure: str) -> Read:
    """`read()`, tried `STALL_RETRIES` more times while it times out (nats-py's timeout is
    one too); then `ReplayError(failure)`."""
    for attempt in range(STALL_RETRIES + 1):
        try:
            return await read()
        except TimeoutError:
            if attempt == STALL_RETRIES:
                raise ReplayError(failure) from None
    raise AssertionError("unreachable")


#: Compare-and-set writes of one session before the rebuild leaves it to the live projector.
WRITE_ATTEMPTS = 10


@dataclass
class RebuildReport:
    """What a rebuild did."""

    written: int = 0
    #: Sessions whose bucket value was already, byte for byte, what the fold made (not
    #: written again).
    unchanged: int = 0
    left_to_live_projector: int = 0
    tombstoned: int = 0
    degraded: list[str] = field(default_factory=list)
    #: Sessions whose value changed under every one of `WRITE_ATTEMPTS` writes (another
    #: writer, the live projector, kept getting there first): not written, left to it.
    still_changing: list[str] = field(default_factory=list)

    def to_write(self, current_seq: int | None, seq: int | None) -> bool:
        """Whether a state at `stream_seq` `seq` (None: the fold made no state, so there is
        nothing but a tombstone to write) is to be written over the bucket's state at
        `current_seq` (None: none); what is not is counted."""
        if seq is None:
            self.tombstoned += 1
            return False
        if current_seq is not None and current_seq > seq:
            self.left_to_live_projector += 1
            return False
        return True

    def already_equal(self, folded: FoldedSession, value: bytes | None) -> bool:
        """Whether the bucket's `value` is already, byte for byte, what the fold made: such
        a session is not written again (a write would only move the key's revision and wake
        every watcher), and is counted, and named when degraded, all the same."""
        if not value or value != folded.encoded:
            return False
        self.unchanged += 1
        self._note_degraded(folded.token, folded.degraded)
        return True

    def written_one(self, token: str, degraded: bool) -> None:
        """Count a session written."""
        self.written += 1
        self._note_degraded(token, degraded)

    def _note_degraded(self, token: str, degraded: bool) -> None:
        if degraded:
            self.degraded.append(token)


async def rebuild(
    nc: Client,
    stream: str,
    bucket: str,
    progress: StageProgress | None = None,
    cache_sessions: int = DEFAULT_CACHE_SESSIONS,
    workers: int | None = None,
) -> RebuildReport:
    """Project every session from the log into the bucket, the fold done by `workers`
    processes (None: one per core)."""
    kv = KvSessionStore(await nc.jetstream().key_value(bucket), nc, bucket)
    report = RebuildReport()

    async def write(folded: FoldedSession) -> None:
        for _attempt in range(WRITE_ATTEMPTS):
            value, revision = await read_projection(kv, folded.token)
            if report.already_equal(folded, value):
                return
            current = decode_record(value)
            record = folded.record
            if isinstance(current, Tombstone):
                # Forgotten since (or before) the read: only a new life after the purge counts.
                session_id = record.session_id if isinstance(record, SessionState) else None
                rows = await session_rows(nc, stream, folded.token, session_id, folded.last_seq)
                record = project(current, rows)
            current_seq = current.stream_seq if isinstance(current, SessionState) else None
            seq = record.stream_seq if isinstance(record, SessionState) else None
            if not report.to_write(current_seq, seq) or not isinstance(record, SessionState):
                return
            try:
                await kv.write(folded.token, encode_state(record), revision)
            except StaleRevision:
                continue
            report.written_one(folded.token, record.degraded is not None)
            return
        report.still_changing.append(folded.token)

    async def write_chunk(chunk: list[FoldedSession]) -> None:
        """The chunk's values read at once and the states to write written as one atomic
        batch, from the bytes the fold encoded (the bucket's value is only peeked at for its
        `stream_seq`); a forgotten session, and every session of a refused batch (another
        writer got there first: the live projector), go one by one (`write`)."""
        found = await read_projections(kv, [folded.token for folded in chunk])
        alone: list[FoldedSession] = []
        batch: list[tuple[FoldedSession, int | None]] = []
        for folded in chunk:
            value, revision = found[folded.token]
            if report.already_equal(folded, value):
                continue
            current = record_position(value)
            if isinstance(current, Tombstone):
                alone.append(folded)  # what counts after the purge needs the log
            elif report.to_write(current, folded.state_seq):
                batch.append((folded, revision))
        revisions = None
        if batch:
            writes = [(folded.token, folded.encoded, revision) for folded, revision in batch]
            try:
                revisions = await kv.write_many(writes)
            except (TimeoutError, nats.errors.Error, JetStreamApiError):
                revisions = None  # one by one, each write tells what became of it
        if revisions is None:
            alone += [folded for folded, _ in batch]
        else:
            for folded, _ in batch:
                report.written_one(folded.token, folded.degraded)
        await asyncio.gather(*(write(folded) for folded in alone))

    with FoldStore(cache_sessions, workers=workers) as store:
        total = await fold_stream(nc, stream, store, progress)
        await _each(store, total, "writing", write_chunk, progress)
    report.degraded.sort()
    report.still_changing.sort()
    return report


@dataclass
class Mismatch:
    """A session whose projection is not what a replay of the log gives."""

    token: str
    reason: str


async def _judge_projection(
    nc: Client, stream: str, current: Record, folded: FoldedSession
) -> str | None:
    """Why the projected `current` is not the fold of the session's events up to its
    `stream_seq` (None when it is)."""
    if isinstance(current, Tombstone):
        if folded.events and folded.first_seq <= current.purged_through:
            return "tombstoned but events are still in the log"
        return None
    if current is None:
        return f"{folded.events} event(s) but no projection" if folded.events else None
    expected = folded.encoded
    if current.stream_seq != folded.last_seq:
        # The projection stops elsewhere than the read did (a projector behind or ahead of
        # it, events skipped after a poison one): fold the session's own events up to it.
        rows = await session_rows(nc, stream, folded.token, current.session_id, current.stream_seq)
        expected = encode_record(project(None, rows))
    if expected != encode_state(current):
        return f"projection differs from a replay up to {current.stream_seq}"
    return None


async def verify_projection(
    nc: Client,
    stream: str,
    bucket: str,
    only_token: str | None = None,
    progress: StageProgress | None = None,
    cache_sessions: int = DEFAULT_CACHE_SESSIONS,
    scope: AuditScope = FLEET,
    workers: int | None = None,
) -> tuple[int, list[Mismatch]]:
    """Compare each projected state with a replay of its events up to the state's stream_seq
    (of the sessions within `scope`: one tenant's, or all), the fold done by `workers`
    processes (None: one per core); returns how many were checked."""
    kv = KvSessionStore(await nc.jetstream().key_value(bucket), nc, bucket)
    mismatches: list[Mismatch] = []
    checked = 0

    def in_scope(session_id: str | None) -> bool:
        """Whether a session (None: no state, so no session id) is within `scope`."""
        return scope.tenant is None or (session_id is not None and scope.covers(session_id))

    async def check(folded: FoldedSession, value: bytes | None) -> None:
        nonlocal checked
        if value and value == folded.encoded and folded.state_seq == folded.last_seq:
            # Byte for byte the fold of every event the read found: nothing to decode.
            if in_scope(folded.session_id):
                checked += 1
            return
        current = decode_record(value)
        current_id = current.session_id if isinstance(current, SessionState) else None
        if not (in_scope(folded.session_id) or (folded.events == 0 and in_scope(current_id))):
            return  # another tenant's session (or a bare tombstone)
        checked += 1
        reason = await _judge_projection(nc, stream, current, folded)
        if reason is not None:
            mismatches.append(Mismatch(folded.token, reason))

    if only_token is not None:
        rows = await session_rows(nc, stream, only_token, None, 2**63)
        value, _ = await read_projection(kv, only_token)
        await check(_folded_alone(only_token, rows), value)
        return checked, mismatches

    async def check_chunk(chunk: list[FoldedSession]) -> None:
        found = await read_projections(kv, [folded.token for folded in chunk])
        await asyncio.gather(*(check(folded, found[folded.token][0]) for folded in chunk))

    with FoldStore(cache_sessions, workers=workers) as store:
        total = await fold_stream(nc, stream, store, progress)
        await _each(store, total, "checking", check_chunk, progress)
        # A projection whose session the read found no event of.
        listing = None if progress is None else lambda done, of: progress("listing", done, of)
        unread = [
            found.key
            async for found in bucket_values(nc, bucket, listing)
            if found.key not in store
        ]
        for start in range(0, len(unread), SESSIONS_IN_FLIGHT):
            chunk = unread[start : start + SESSIONS_IN_FLIGHT]
            await check_chunk([FoldedSession(token, b"", 0, 0, 0) for token in chunk])
    mismatches.sort(key=lambda mismatch: mismatch.token)
    return checked, mismatches


def _folded_alone(token: str, rows: Iterable[StoredEvent]) -> FoldedSession:
    """One session's events folded from nothing, as the whole-stream read would have."""
    listed = list(rows)
    return FoldedSession.of(
        token,
        project(None, listed),
        listed[0].stream_seq if listed else 0,
        listed[-1].stream_seq if listed else 0,
        len(listed),
    )

"""`reminders rebuild` and `reminders verify-projection` (SPEC §7.2).

Rebuild reads the whole stream once and projects every session afresh with the projector's
own rules (`core.projection.project_all`), then writes each with compare-and-set. It is safe
while services run: a session whose projection is already ahead of what was read is left to
the live projector, and a write that loses a race is re-read and retried.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import nats
from nats.aio.client import Client

from contracts.records import Tombstone
from contracts.state import SessionState
from contracts.stored import StoredEvent
from contracts.subjects import last_token
from core.projection import Record, project_all
from replay.scope import AuditScope
from replay.source import EVENT_FILTER, iterate_stream
from services.adapters.records import KvSessionStore, StaleRevision, decode_record, encode_state

Progress = Callable[[int, int], None]
FLEET = AuditScope()


def project(start: Record, rows: list[StoredEvent]) -> Record:
    """What the projector's rules make of a session's whole log, from `start`."""
    record, _ = project_all(start, rows)
    return record


async def read_all_sessions(
    nc: Client, stream: str, progress: Progress | None = None
) -> dict[str, list[StoredEvent]]:
    """Every event of the stream, grouped by session token, in stream order."""
    sessions: dict[str, list[StoredEvent]] = defaultdict(list)
    async for row in iterate_stream(nc, stream, EVENT_FILTER, progress=progress):
        sessions[last_token(row.subject)].append(row)
    return dict(sessions)


@dataclass
class RebuildReport:
    """What a rebuild did."""

    written: int = 0
    left_to_live_projector: int = 0
    tombstoned: int = 0
    degraded: list[str] = field(default_factory=list)


async def rebuild(
    nc: Client, stream: str, bucket: str, progress: Progress | None = None
) -> RebuildReport:
    """Project every session from the log into the bucket."""
    store = KvSessionStore(await nc.jetstream().key_value(bucket))
    report = RebuildReport()
    for token, rows in (await read_all_sessions(nc, stream, progress)).items():
        for _attempt in range(10):
            value, revision = await store.read(token)
            current = decode_record(value)
            start = current if isinstance(current, Tombstone) else None
            record = project(start, rows)
            if isinstance(record, Tombstone) or record is None:
                report.tombstoned += 1
                break
            if isinstance(current, SessionState) and current.stream_seq > record.stream_seq:
                report.left_to_live_projector += 1
                break
            try:
                await store.write(token, encode_state(record), revision)
            except StaleRevision:
                continue
            report.written += 1
            if record.degraded is not None:
                report.degraded.append(token)
            break
    return report


@dataclass
class Mismatch:
    """A session whose projection is not what a replay of the log gives."""

    token: str
    reason: str


async def verify_projection(
    nc: Client,
    stream: str,
    bucket: str,
    only_token: str | None = None,
    progress: Progress | None = None,
    scope: AuditScope = FLEET,
) -> tuple[int, list[Mismatch]]:
    """Compare each projected state with a replay of its events up to the state's stream_seq
    (of the sessions within `scope`: one tenant's, or all)."""
    kv = await nc.jetstream().key_value(bucket)
    sessions = await read_all_sessions(nc, stream, progress)
    sessions = {token: rows for token, rows in sessions.items() if scope.rows(rows[:1])}
    try:
        keys = set(await kv.keys())
    except nats.js.errors.NoKeysError:
        keys = set()
    tokens = sorted((keys | set(sessions)) if only_token is None else {only_token})
    mismatches: list[Mismatch] = []
    checked = 0
    for token in tokens:
        try:
            current = decode_record((await kv.get(token)).value)
        except nats.js.errors.KeyNotFoundError:
            current = None
        rows = sessions.get(token, [])
        mine = bool(rows) or (
            isinstance(current, SessionState) and scope.covers(current.session_id)
        )
        if scope.tenant is not None and not mine:
            continue  # a key of another tenant's session (or a bare tombstone)
        checked += 1
        if isinstance(current, Tombstone):
            if any(r.stream_seq <= current.purged_through for r in rows):
                mismatches.append(Mismatch(token, "tombstoned but events are still in the log"))
            continue
        if current is None:
            if rows:
                mismatches.append(Mismatch(token, f"{len(rows)} event(s) but no projection"))
            continue
        covered = [row for row in rows if row.stream_seq <= current.stream_seq]
        expected = project(None, covered)
        if not isinstance(expected, SessionState) or encode_state(expected) != encode_state(
            current
        ):
            mismatches.append(
                Mismatch(token, f"projection differs from a replay up to {current.stream_seq}")
            )
    return checked, mismatches

"""Queries served from the projection (SPEC §4.10); `forget` (§4.11) is `forget.py`.

A query must see every command whose reply was sent before it arrived: read the session's
last stream sequence with one direct get, then wait — on a KV watch, not a poll — until the
projection has applied it (or `min_seq`), up to `timeout_ms`; past that, answer from the
projection with `stale: true`.
"""

from __future__ import annotations

import time
from typing import Any

import nats
from nats.aio.client import Client
from nats.js.kv import KeyValue

from contracts.records import Tombstone
from contracts.state import SessionState
from contracts.subjects import session_token
from services.adapters.jetstream import last_session_seq
from services.adapters.records import decode_record
from services.adapters.settings import Settings

DEFAULT_TIMEOUT_MS = 2000


def _caught_up(record: SessionState | Tombstone | None, last_seq: int, min_seq: int) -> bool:
    if isinstance(record, Tombstone):
        return last_seq <= record.purged_through and min_seq == 0
    state = record or SessionState()
    return state.stream_seq >= last_seq and state.session_seq >= min_seq


class ProjectionReader:
    """Reads session states from the bucket, waiting for the projection to catch up."""

    def __init__(self, nc: Client, settings: Settings) -> None:
        self._nc = nc
        self._settings = settings
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self._nc.jetstream().key_value(self._settings.kv_bucket)
        return self._kv

    async def _get(self, token: str) -> SessionState | Tombstone | None:
        try:
            entry = await (await self._bucket()).get(token)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return None
        return decode_record(entry.value)

    async def session_state(
        self, session_id: str, min_seq: int = 0, timeout_ms: int | None = None
    ) -> tuple[SessionState, bool]:
        """The projected state once it covers every stored event; and whether it is stale."""
        timeout_s = (DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms) / 1000
        deadline = time.monotonic() + timeout_s
        token = session_token(session_id)
        last_seq = await last_session_seq(self._nc, self._settings.stream, session_id)
        record = await self._get(token)
        if not _caught_up(record, last_seq, min_seq):
            record = await self._watch_until(token, last_seq, min_seq, deadline, record)
        stale = not _caught_up(record, last_seq, min_seq)
        if isinstance(record, SessionState):
            return record, stale
        return SessionState(session_id=session_id), stale

    async def _watch_until(
        self,
        token: str,
        last_seq: int,
        min_seq: int,
        deadline: float,
        record: SessionState | Tombstone | None,
    ) -> SessionState | Tombstone | None:
        watcher = await (await self._bucket()).watch(token)
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    entry = await watcher.updates(timeout=remaining)  # type: ignore[no-untyped-call]
                except nats.errors.TimeoutError:
                    break
                if entry is None or entry.value is None:
                    continue
                record = decode_record(entry.value)
                if _caught_up(record, last_seq, min_seq):
                    break
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
        return record


def pending_injections(state: SessionState) -> dict[str, Any]:
    """The §4.10 camelCase shape of the queued reminders, in FIFO order."""
    rows = []
    for row in state.queued:
        spec = row.reminder
        rows.append(
            {
                "kind": "reminder",
                "id": spec.id,
                "reminderId": spec.id,
                "mode": row.mode,
                "position": row.position,
                "body": spec.body,
                "tags": list(spec.tags),
                "dedupeKey": spec.dedupe_key,
                "ttlTurns": spec.ttl_turns,
                "preserveOnCompact": spec.preserve_on_compact,
                "propagate": spec.propagate,
                "roleHint": spec.role_hint,
                "authority": spec.authority,
                "source": spec.source,
                "firedAtTurn": spec.fired_at_turn,
                "originatingAgentId": spec.originating_agent_id,
            }
        )
    return {"pendingCount": len(rows), "injections": rows}

"""Queries served from the projection (SPEC §4.10); `forget` (§4.11) is `forget.py`.

A query must see every command whose reply was sent before it arrived: read the session's
last stream sequence with one direct get, then wait — on the replica's one shared watch of
the bucket (`watch.py`), not a poll and not a watcher per query — until the projection has
applied it (or `min_seq`), up to `timeout_ms`; past that, answer from the projection with
`stale: true`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
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
from services.gateway.watch import ProjectionWatch, TooManyWaiting

DEFAULT_TIMEOUT_MS = 2000


def _caught_up(record: SessionState | Tombstone | None, last_seq: int, min_seq: int) -> bool:
    if isinstance(record, Tombstone):
        return last_seq <= record.purged_through and min_seq == 0
    state = record or SessionState()
    return state.stream_seq >= last_seq and state.session_seq >= min_seq


class QueryBusy(Exception):
    """Too many queries wait already; the caller should retry after `retry_after_ms`."""

    def __init__(self, retry_after_ms: int) -> None:
        super().__init__(retry_after_ms)
        self.retry_after_ms = retry_after_ms


class ProjectionReader:
    """Reads session states from the bucket, waiting on the shared watch for the projection
    to catch up."""

    def __init__(self, nc: Client, settings: Settings) -> None:
        self._nc = nc
        self._settings = settings
        self._kv: KeyValue | None = None
        self.watch = ProjectionWatch(
            nc,
            settings.kv_bucket,
            max_waiting=settings.max_waiting_queries,
            # One session's flood may take a tenth of the places, never all of them.
            max_waiting_per_session=max(1, settings.max_waiting_queries // 10),
        )

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
        """The projected state once it covers every stored event; and whether it is stale.

        Raises `QueryBusy` when the query would have to wait and every place is taken.
        """
        timeout_s = (DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms) / 1000
        token = session_token(session_id)
        last_seq = await last_session_seq(self._nc, self._settings.stream, session_id)

        def ready(record: SessionState | Tombstone | None) -> bool:
            return _caught_up(record, last_seq, min_seq)

        record = await self._get(token)
        if not ready(record) and timeout_s > 0:
            record = await self._wait(token, ready, timeout_s)
        stale = not ready(record)
        if isinstance(record, SessionState):
            return record, stale
        return SessionState(session_id=session_id), stale

    async def _wait(
        self,
        token: str,
        ready: Callable[[SessionState | Tombstone | None], bool],
        timeout_s: float,
    ) -> SessionState | Tombstone | None:
        await self.watch.ensure_started()
        try:
            waiter = self.watch.register(token, ready)
        except TooManyWaiting:
            raise QueryBusy(retry_after_ms=min(1000, int(timeout_s * 1000))) from None
        try:
            # Read again once registered, so an update between the two reads is not missed.
            record = await self._get(token)
            if ready(record):
                return record
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(asyncio.shield(waiter.done), timeout_s)
            return await self._get(token)
        finally:
            self.watch.release(waiter)


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

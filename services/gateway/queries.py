"""Queries served from the projection (SPEC §4.10) and `forget` (§4.11).

A query must see every command whose reply was sent before it arrived: read the session's
last stream sequence with one direct get, then wait — on a KV watch, not a poll — until the
projection has applied it (or `min_seq`), up to `timeout_ms`; past that, answer from the
projection with `stale: true`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import nats
import orjson
from nats.aio.client import Client
from nats.js.kv import KeyValue

from contracts.errors import ErrorCode
from contracts.records import Tombstone
from contracts.replies import ErrorReply
from contracts.state import SessionState
from core.canonical import session_subject_filter, session_token
from services.adapters.ids import utc_now_millis
from services.adapters.jetstream import last_session_seq
from services.adapters.records import decode_record
from services.adapters.settings import Settings

DEFAULT_TIMEOUT_MS = 2000


def error_reply(code: ErrorCode, message: str) -> dict[str, Any]:
    """The wire form of a coded error."""
    return ErrorReply.model_validate({"error": {"code": code, "message": message}}).to_wire()


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

    async def _consumers_settled(self, last_seq: int, timeout_s: float = 10.0) -> bool:
        """Wait until no durable consumer holds an unacked delivery a purge could orphan.

        nats-server drops a consumer's delivered-but-unacked messages when a filtered purge
        removes its last delivered message (measured on 2.15). A consumer is safe when it has
        acked everything it was sent, or it was last sent something newer than the session's
        last event and has acked past that event.
        """
        js = self._nc.jetstream()
        deadline = time.monotonic() + timeout_s
        while True:
            settled = True
            for info in await js.consumers_info(self._settings.stream):
                delivered = info.delivered.stream_seq if info.delivered else 0
                acked = info.ack_floor.stream_seq if info.ack_floor else 0
                if not (acked >= (delivered or 0) or (delivered > last_seq and acked >= last_seq)):
                    settled = False
            if settled:
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)

    async def forget(self, session_id: str, request_id: str | None) -> dict[str, Any]:
        """Purge the session's events, tombstone its projection, audit without any body."""
        js = self._nc.jetstream()
        token = session_token(session_id)
        # Another gateway replica may append while we wait for the consumers (the session
        # lock is per replica): purge again until nothing of the session is left.
        purged_count, last_seq = 0, 0
        for _round in range(5):
            newest = await last_session_seq(self._nc, self._settings.stream, session_id)
            if newest <= last_seq and _round > 0:
                break
            last_seq = newest
            if not await self._consumers_settled(last_seq):
                return error_reply(
                    ErrorCode.UNAVAILABLE,
                    "consumers are still processing the session; retry forget",
                )
            reply = await self._nc.request(
                f"$JS.API.STREAM.PURGE.{self._settings.stream}",
                orjson.dumps({"filter": session_subject_filter(session_id), "seq": last_seq + 1}),
                timeout=self._settings.request_timeout_s,
            )
            purged = orjson.loads(reply.data)
            if "error" in purged:
                return error_reply(ErrorCode.UNAVAILABLE, "the stream refused the purge")
            purged_count += int(purged.get("purged", 0))
        else:
            return error_reply(ErrorCode.CONFLICT, "the session kept being written; retry forget")
        purged_through = max(last_seq, 0)
        tombstone = Tombstone(
            session_token=token, purged_through=purged_through, forgotten_at=utc_now_millis()
        )
        await (await self._bucket()).put(token, orjson.dumps(tombstone.model_dump()))
        audit = {
            "kind": "forgotten",
            "session_token": token,
            "purged_count": purged_count,
            "purged_through": purged_through,
            "forgotten_at": tombstone.forgotten_at,
            "request_id": request_id,
        }
        await js.publish("reminders.audit.forgotten", orjson.dumps(audit))
        return {
            "ok": True,
            "session_token": token,
            "purged_count": audit["purged_count"],
            "purged_through": purged_through,
        }


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

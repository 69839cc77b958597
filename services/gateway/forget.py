"""`forget` (SPEC §4.11): purge a session's events, tombstone its projection, audit it.

The one write of the read side, kept apart from the queries (`queries.py`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from nats.aio.client import Client

from contracts.errors import ErrorCode
from contracts.records import Tombstone
from contracts.subjects import AUDIT_FORGOTTEN, session_subject_filter, session_token
from services.adapters.ids import utc_now_millis
from services.adapters.session_read import last_session_seq
from services.adapters.settings import Settings
from services.gateway.replies import error_reply


class Forgetter:
    """Forgets sessions: purge, tombstone, audit (never a body)."""

    def __init__(self, nc: Client, settings: Settings) -> None:
        self._nc = nc
        self._settings = settings

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
        bucket = await js.key_value(self._settings.kv_bucket)
        await bucket.put(token, orjson.dumps(tombstone.model_dump()))
        audit = {
            "kind": "forgotten",
            "session_token": token,
            "purged_count": purged_count,
            "purged_through": purged_through,
            "forgotten_at": tombstone.forgotten_at,
            "request_id": request_id,
        }
        await js.publish(AUDIT_FORGOTTEN, orjson.dumps(audit))
        return {
            "ok": True,
            "session_token": token,
            "purged_count": audit["purged_count"],
            "purged_through": purged_through,
        }

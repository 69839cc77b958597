"""Audit reads through the gateway (SPEC §7.1, §10.1): `events` and `sessions`, read-only.

A tenant's auditor may not read the log itself: the server's direct get by stream sequence
carries the sequence in its body, where no subject permission can limit it to one tenant. So
it asks the gateway, on its tenant's subjects, and the gateway reads for it:

- `events`: one page of one session's stored events, each exactly as stored (its bytes go
  into the reply as they are), in session order, after a stream sequence. The read is the
  gateway's own session read (`iterate_direct` on the session's subject filter), so it only
  ever returns that session's events; a foreign session is one of the caller's unknown ones
  (its id is namespaced to the caller's tenant), and both get the same empty page.
- `sessions`: one page of the caller tenant's session ids, from the projection bucket: the
  bucket's stream holds one value per session, each naming its `session_id`, so a page
  scans a bounded number of bytes of it (`services.adapters.bucket_scan.iterate_bucket`,
  the scan of the fleet auditor's whole-bucket reads too) and keeps the tenant's own. A key
  rewritten during a listing moves forward in that stream, so a listing misses no session
  (it may name one twice; the client keeps the first).

Every reply stays within `page_budget` bytes, below the server's `max_payload` (SPEC §4.1.1):
the budget is in bytes, never a count. Neither read appends anything.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, cast

import orjson
from nats.aio.client import Client

from contracts.errors import ErrorCode
from contracts.subjects import session_subject_filter
from contracts.tenants import DEFAULT_TENANT, split_session_id
from services.adapters.bucket_scan import iterate_bucket
from services.adapters.session_read import RawStored, iterate_direct
from services.gateway.replies import error_reply

#: Bytes kept free in a reply for its frame (`ok`, the cursor) and one event's wrapper (the
#: worst-case event of core/size is far below `max_payload` less this margin).
REPLY_FRAME_BYTES = 4096
#: Stored events asked of the server per direct-get batch (and at most this many bytes).
EVENTS_BATCH = 64
#: Bytes of projected values a `sessions` page reads at most before it answers.
SESSIONS_SCAN_BYTES = 8 * 1024 * 1024
#: Values of the bucket asked of the server per direct-get batch.
SESSIONS_BATCH = 256


def page_budget(max_payload_bytes: int) -> int:
    """The bytes a page's reply may hold: the server's bound less the frame."""
    return max_payload_bytes - REPLY_FRAME_BYTES


def _event_item(raw: RawStored) -> bytes:
    """One event of a page: `{"event":<the stored bytes>,"stream_seq":N,"subject":S}`. A
    stored body that is not a JSON object is sent as `null` (the replay names it, as it does
    for a direct read: a row without a schema)."""
    try:
        is_object = isinstance(orjson.loads(raw.data), dict)
    except orjson.JSONDecodeError:
        is_object = False
    event = raw.data if is_object else b"null"
    tail = orjson.dumps({"stream_seq": raw.stream_seq, "subject": raw.subject})
    return b'{"event":' + event + b"," + tail[1:]


async def events_page(
    messages: AsyncGenerator[RawStored], from_session_seq: int | None, budget: int
) -> dict[str, Any]:
    """The `events` reply from a session's stored messages in order (`iterate_direct`):
    `{ok, events: [{event, stream_seq, subject}], next_after_stream_seq}`, the last null when
    the page ends the session. At least one event per page, whatever its size; an event that
    leaves no room for the frame (`REPLY_FRAME_BYTES`) is `too_large`."""
    items: list[bytes] = []
    used = 0
    next_after: int | None = None
    last_seq = 0
    async with aclosing(messages) as stored:
        async for raw in stored:
            if from_session_seq is not None and _session_seq(raw) < from_session_seq:
                last_seq = raw.stream_seq
                next_after = last_seq if raw.pending else None
                continue
            item = _event_item(raw)
            if items and used + len(item) + 1 > budget:
                next_after = last_seq
                break
            if len(item) > budget + REPLY_FRAME_BYTES // 2:
                return _too_large(raw.stream_seq, len(item), budget)
            items.append(item)
            used += len(item) + 1
            last_seq = raw.stream_seq
            next_after = last_seq if raw.pending else None
    events = orjson.Fragment(b"[" + b",".join(items) + b"]")
    return {"ok": True, "events": events, "next_after_stream_seq": next_after}


def _too_large(stream_seq: int, size: int, budget: int) -> dict[str, Any]:
    """An event that no reply could carry (only a configuration far past the size invariant's
    worst case stores one): a clear error naming it, never a reply the server refuses."""
    return error_reply(
        ErrorCode.TOO_LARGE,
        f"the event at stream_seq {stream_seq} is too large for a reply; read it directly",
        stream_seq=stream_seq,
        size=size,
        limit=budget,
    )


def _session_seq(raw: RawStored) -> int:
    """The stored event's session_seq (0 for a body without one: before any)."""
    try:
        envelope = orjson.loads(raw.data)
    except orjson.JSONDecodeError:
        return 0
    seq = envelope.get("session_seq") if isinstance(envelope, dict) else None
    return seq if isinstance(seq, int) else 0


def _tenant_session(tenant: str, value: bytes) -> str | None:
    """The session id (as the tenant's hosts know it) of a projected value of `tenant`, else
    None (another tenant's, a tombstone, an empty or foreign value)."""
    if tenant != DEFAULT_TENANT and b'"session_id":"@' + tenant.encode() + b"/" not in value:
        return None  # cheap: a foreign value is not parsed
    try:
        record = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    session_id = record.get("session_id") if isinstance(record, dict) else None
    if not isinstance(session_id, str) or not session_id:
        return None
    owner, own_id = split_session_id(session_id)
    return own_id if owner == tenant else None


async def sessions_page(
    values: AsyncGenerator[RawStored], tenant: str, budget: int, scan_bytes: int
) -> dict[str, Any]:
    """The `sessions` reply from the bucket's values in stream order: `{ok, session_ids,
    next_after}`, the last null when the page ends the listing. It reads at most
    `scan_bytes` of values (at least one) and answers within `budget` bytes."""
    ids: list[str] = []
    used = 0
    scanned = 0
    next_after: int | None = None
    async with aclosing(values) as stored:
        async for raw in stored:
            own_id = _tenant_session(tenant, raw.data)
            size = 0 if own_id is None else len(orjson.dumps(own_id)) + 1
            if size and used + size > budget:
                break  # next_after stays before this value: the next page starts with it
            if own_id is not None:
                ids.append(own_id)
                used += size
            scanned += len(raw.data)
            next_after = raw.stream_seq if raw.pending else None
            if next_after is not None and scanned >= scan_bytes:
                break
    return {"ok": True, "session_ids": ids, "next_after": next_after}


class AuditReads:
    """Serves `events` and `sessions` from the log and the bucket with the gateway's reads."""

    def __init__(self, nc: Client, stream: str, bucket: str, max_payload_bytes: int) -> None:
        self._nc = nc
        self._stream = stream
        self._bucket = bucket
        self._budget = page_budget(max_payload_bytes)

    async def events(
        self, session_id: str, after_stream_seq: int, from_session_seq: int | None
    ) -> dict[str, Any]:
        """One page of the session's events (already scoped to the caller's tenant)."""
        messages = cast(
            AsyncGenerator[RawStored],
            iterate_direct(
                self._nc,
                self._stream,
                session_subject_filter(session_id),
                after_stream_seq,
                batch=EVENTS_BATCH,
                max_bytes=self._budget,
            ),
        )
        return await events_page(messages, from_session_seq, self._budget)

    async def sessions(self, tenant: str, after: int) -> dict[str, Any]:
        """One page of the tenant's session ids."""
        values = iterate_bucket(
            self._nc, self._bucket, after, batch=SESSIONS_BATCH, max_bytes=self._budget
        )
        return await sessions_page(values, tenant, self._budget, SESSIONS_SCAN_BYTES)


def too_busy_reply(retry_after_ms: int) -> dict[str, Any]:
    """The reply of an audit read past the replica's bound on waiting reads."""
    return error_reply(
        ErrorCode.RATE_LIMITED,
        "too many queries are waiting; retry later",
        retry_after_ms=retry_after_ms,
    )

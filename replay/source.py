"""Where a replay reads events from: an exported JSON Lines file, or NATS (SPEC §7.1).

From NATS, one session is read with a subject-filtered ordered consumer on
`transcript.reminder.*.<token>`, so the cost grows with that session's events, not with the
stream. An export row is the event envelope plus `stream_seq` and `subject`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import orjson
from nats.aio.client import Client
from nats.js.api import ConsumerInfo, DeliverPolicy

from contracts.decode import UnknownSchema, upcast
from contracts.stored import StoredEvent
from contracts.subjects import EVENT_SUBJECTS, session_subject_filter
from replay.errors import ReplayError

EVENT_FILTER = EVENT_SUBJECTS

Row = StoredEvent
"""Former name of `contracts.stored.StoredEvent`, kept for callers not yet switched."""


def _check_schema(envelope: dict[str, Any], where: str) -> None:
    """Refuse an envelope version that no upcaster brings to this build's (SPEC §3.7)."""
    try:
        upcast(envelope)
    except UnknownSchema:
        schema = envelope.get("schema")
        raise ReplayError(f"{where}: unknown event schema version {str(schema)[:60]!r}") from None


def rows_from_file(path: Path, session_id: str | None = None) -> list[StoredEvent]:
    """Read an export; keep one session's rows when `session_id` is given."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ReplayError(f"cannot read {path}: {exc.strerror}") from None
    rows: list[StoredEvent] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise ReplayError(f"{where}: not a valid export line (not JSON)") from None
        if not isinstance(item, dict) or "stream_seq" not in item or "subject" not in item:
            raise ReplayError(f"{where}: not a valid export line (needs stream_seq and subject)")
        envelope = {k: v for k, v in item.items() if k not in ("stream_seq", "subject")}
        _check_schema(envelope, where)
        if not isinstance(item["stream_seq"], int):
            raise ReplayError(f"{where}: stream_seq must be an integer")
        if session_id is None or envelope.get("session_id") == session_id:
            rows.append(StoredEvent(envelope, item["stream_seq"], str(item["subject"])))
    return rows


async def connect_for_replay(url: str, options: dict[str, Any] | None = None) -> Client:
    """A bounded connection: replay fails fast with one line when NATS is unreachable."""

    async def quiet(exc: Exception) -> None:
        """nats-py would print a traceback per failed attempt; the caller says it once."""

    try:
        return await asyncio.wait_for(
            nats.connect(
                url,
                name="reminders-replay",
                connect_timeout=3,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                error_cb=quiet,
                **(options or {}),
            ),
            timeout=5,
        )
    except Exception as exc:
        raise ReplayError(f"cannot reach NATS at {url} ({type(exc).__name__})") from None


@dataclass
class ReadStats:
    """What a read cost: messages received, and what the server's consumer says it sent."""

    delivered: int = 0
    matching_at_start: int = 0
    consumer_delivered: int = 0


def _sent(info: ConsumerInfo) -> int:
    """How many messages the server's consumer has sent so far."""
    return int(info.delivered.consumer_seq or 0) if info.delivered is not None else 0


async def iterate_stream(
    nc: Client,
    stream: str,
    subject_filter: str,
    stats: ReadStats | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> AsyncIterator[StoredEvent]:
    """Every stored message matching the filter, in order, through an ordered consumer."""
    js = nc.jetstream()
    try:
        subscription = await js.subscribe(
            subject_filter, stream=stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
        )
    except nats.js.errors.NotFoundError:
        raise ReplayError(f"stream {stream} does not exist") from None
    stats = stats or ReadStats()
    try:
        info = await subscription.consumer_info()
        # Some may already be on their way to us: count what was sent plus what is left.
        total = int(info.num_pending or 0) + _sent(info)
        stats.matching_at_start = total
        if total == 0:
            return
        while True:
            message = await subscription.next_msg(timeout=10)
            stats.delivered += 1
            try:
                envelope = orjson.loads(message.data)
            except orjson.JSONDecodeError:
                envelope = {"schema": None}
            metadata = message.metadata
            if not isinstance(envelope, dict):
                envelope = {"schema": None}
            yield StoredEvent(envelope, int(metadata.sequence.stream), message.subject)
            if progress is not None:
                progress(stats.delivered, total)
            if metadata.num_pending == 0:
                stats.consumer_delivered = _sent(await subscription.consumer_info())
                return
    finally:
        await subscription.unsubscribe()


async def rows_from_nats(
    nc: Client, stream: str, session_id: str, stats: ReadStats | None = None
) -> list[StoredEvent]:
    """One session's rows, read with a subject-filtered ordered consumer."""
    rows = [
        row async for row in iterate_stream(nc, stream, session_subject_filter(session_id), stats)
    ]
    for row in rows:
        _check_schema(row.envelope, f"stream_seq {row.stream_seq}")
    return rows

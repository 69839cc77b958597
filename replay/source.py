"""Where a replay reads events from: an exported JSON Lines file, or NATS (SPEC §7.1).

From NATS, one session is read with direct gets (`services.adapters.session_read.session_messages`:
by its subject filter `transcript.reminder.*.<token>` when the stream is small, else by
sequence along the events' back-pointers), so the cost grows with that session's events, not
with the stream, and an auditor needs no right to create a consumer. An export row is the event
envelope plus `stream_seq` and `subject`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import orjson
from nats.aio.client import Client

from contracts.decode import UnknownSchema, upcast
from contracts.stored import StoredEvent
from contracts.subjects import EVENT_SUBJECTS
from replay.errors import ReplayError
from services.adapters.connection import CLI_CONNECT_TIMEOUT_S, NatsUnreachable, connect_url
from services.adapters.jetstream import JetStreamApiError
from services.adapters.session_read import RawStored, iterate_direct, session_messages

EVENT_FILTER = EVENT_SUBJECTS


def check_schema(envelope: dict[str, Any], where: str) -> None:
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
        check_schema(envelope, where)
        if not isinstance(item["stream_seq"], int):
            raise ReplayError(f"{where}: stream_seq must be an integer")
        if session_id is None or envelope.get("session_id") == session_id:
            rows.append(StoredEvent(envelope, item["stream_seq"], str(item["subject"])))
    return rows


async def connect_for_replay(url: str, options: dict[str, Any] | None = None) -> Client:
    """A bounded connection: replay fails fast with one line naming the URL and the cause
    (refused, DNS, timeout, authorization) when NATS is unreachable."""
    try:
        return await connect_url(
            url,
            "reminders-replay",
            options,
            startup_timeout_s=CLI_CONNECT_TIMEOUT_S,
            fail_fast=True,
        )
    except NatsUnreachable as exc:
        raise ReplayError(str(exc)) from None


async def require_stream(nc: Client, stream: str, what: str | None = None) -> None:
    """Fail in one line, naming the command that creates it, when `stream` is not on the
    server (an unprovisioned or foreign server), or when JetStream is not enabled at all."""
    name = what or f"stream {stream}"
    try:
        await nc.jetstream().stream_info(stream)
    except nats.js.errors.NotFoundError:
        raise ReplayError(
            f"{name} does not exist on {_server(nc)}: run `reminders provision` to create it"
        ) from None
    except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
        raise ReplayError(
            f"JetStream is not enabled on {_server(nc)} (start nats-server with -js), "
            "then run `reminders provision`"
        ) from None
    except nats.errors.TimeoutError:
        raise ReplayError(f"{_server(nc)} did not answer for {name} in time") from None
    except nats.js.errors.APIError as exc:
        raise ReplayError(f"{name} cannot be read: {exc.description or exc}") from None


async def require_bucket(nc: Client, bucket: str) -> None:
    """Like `require_stream`, for the projection bucket (the stream `KV_<bucket>`)."""
    await require_stream(nc, f"KV_{bucket}", f"projection bucket {bucket}")


def _server(nc: Client) -> str:
    url = nc.connected_url
    return f"the NATS server at {url.geturl()}" if url is not None else "the NATS server"


#: How many times a whole-stream read asks again for a batch that stopped (a replica that
#: froze or went away mid-batch) before it gives up.
STALL_RETRIES = 2


@dataclass
class ReadStats:
    """What a read from NATS cost: matching messages when it began, and what the server sent."""

    matching_at_start: int = 0
    delivered: int = 0
    server_sent: int = 0


async def iterate_stream(
    nc: Client,
    stream: str,
    subject_filter: str,
    stats: ReadStats | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> AsyncIterator[StoredEvent]:
    """Every stored message matching the filter, in order (batched direct gets: the reader
    needs no consumer; the server steps over the messages between matching ones, so this is
    for reading the whole stream, and `rows_from_nats` for one session)."""
    stats = stats or ReadStats()
    async for raw in iterate_raw(nc, stream, subject_filter, progress):
        stats.server_sent += 1
        yield _row(raw, stats)


async def iterate_raw(
    nc: Client,
    stream: str,
    subject_filter: str,
    progress: Callable[[int, int], None] | None = None,
) -> AsyncIterator[RawStored]:
    """`iterate_stream`'s messages as the server sent them, not yet parsed (unfiltered
    batches when the stream holds only `subject_filter`'s subjects: `iterate_direct`)."""
    delivered = 0
    whole_stream = await holds_only(nc, stream, subject_filter)
    try:
        async for raw in iterate_direct(
            nc,
            stream,
            subject_filter,
            batch=2048,
            stall_retries=STALL_RETRIES,
            whole_stream=whole_stream,
        ):
            yield raw
            delivered += 1
            if progress is not None:
                progress(delivered, delivered + raw.pending)
    except JetStreamApiError as exc:
        raise ReplayError(f"stream {stream} cannot be read: {exc.description}") from None
    except nats.errors.NoRespondersError:
        raise ReplayError(f"stream {stream} does not exist") from None
    except nats.errors.TimeoutError:
        raise ReplayError(
            f"stream {stream} stopped answering: {STALL_RETRIES + 1} batches in a row "
            "waited more than 5 s for their next message"
        ) from None


async def holds_only(nc: Client, stream: str, subject_filter: str) -> bool:
    """Whether the stream is configured with `subject_filter` (a `prefix.>` filter) as its
    only subject, as `reminders provision` makes the event stream; False when that cannot
    be told (the read then asks the server to filter)."""
    if not subject_filter.endswith(".>"):
        return False
    try:
        info = await nc.jetstream().stream_info(stream)
    except nats.errors.Error:
        return False
    return list(info.config.subjects or []) == [subject_filter]


def _row(raw: RawStored, stats: ReadStats) -> StoredEvent:
    """A stored message as a row (`stored_row`), counted in `stats`."""
    if stats.delivered == 0:
        stats.matching_at_start = raw.pending + 1
    stats.delivered += 1
    return stored_row(raw)


def stored_row(raw: RawStored) -> StoredEvent:
    """A stored message as a row (`StoredEvent.leniently`)."""
    return StoredEvent.leniently(raw.data, raw.stream_seq, raw.subject)


async def rows_from_nats(
    nc: Client, stream: str, session_id: str, stats: ReadStats | None = None
) -> list[StoredEvent]:
    """One session's rows, in stream order (`session_messages`)."""
    stats = stats or ReadStats()
    try:
        messages, sent = await session_messages(nc, stream, session_id, batch=2048)
    except JetStreamApiError as exc:
        raise ReplayError(f"stream {stream} cannot be read: {exc.description}") from None
    except nats.errors.NoRespondersError:
        raise ReplayError(f"stream {stream} does not exist") from None
    stats.server_sent += sent
    rows = [_row(raw, stats) for raw in messages]
    for row in rows:
        check_schema(row.envelope, f"stream_seq {row.stream_seq}")
    return rows

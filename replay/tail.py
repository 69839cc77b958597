"""Watching lifecycle events as they are appended: what `reminders tail` reads and prints.

The reader is the auditor's (SPEC §10): batched direct gets of the event stream from a
chosen stream sequence (`services.adapters.jetstream.iterate_direct`), so it needs no
consumer and leaves no state on the server. Following is the same read again from just after
the last sequence seen, every `poll_s`: the stream's order is the only cursor, so a NATS
restart costs nothing but the wait (the connection reconnects by itself and the next read
starts after the last event printed). Every message goes through the one `decode`; one that
does not decode is shown as such, with its dead-letter code, never skipped silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import nats
import orjson
from nats.aio.client import Client
from pydantic import BaseModel

from contracts.decode import DecodeError, decode
from contracts.events import PAYLOADS, Event
from contracts.subjects import EVENT_PREFIX, EVENT_SUBJECTS, session_token
from replay.errors import ReplayError
from services.adapters.jetstream import JetStreamApiError
from services.adapters.session_read import RawStored, iterate_direct

#: How many words of a body a table line shows.
BODY_WORDS = 8
#: ...and at most this many characters of them.
BODY_CHARS = 60
#: Seconds between two reads once a follower has caught up with the stream.
POLL_S = 0.5


class TailInputError(ValueError):
    """A `tail` option that cannot be used; `code` is the stable error code (SPEC §2.2)."""

    code = "invalid_request"


def valid_kinds() -> tuple[str, ...]:
    """Every event kind this build reads, from the contracts (a new kind appears here as
    soon as it has a payload model)."""
    return tuple(PAYLOADS)


def parse_kinds(values: Iterable[str]) -> frozenset[str]:
    """The `--kind` values (each may also be a comma-separated list); raises
    `TailInputError` naming every valid kind for one it does not know."""
    kinds = frozenset(part.strip() for value in values for part in value.split(",") if part)
    unknown = sorted(kinds - set(valid_kinds()))
    if unknown:
        raise TailInputError(
            f"unknown kind {', '.join(map(repr, unknown))}; valid kinds: "
            + ", ".join(valid_kinds())
        )
    return kinds


@dataclass(frozen=True)
class Since:
    """Where a tail starts: after a stream sequence, at a time, or at the stream's end."""

    after_seq: int = 0
    at_time: datetime | None = None
    at_end: bool = False


def parse_since(text: str | None) -> Since:
    """`--since`: a stream sequence (1 or more: start there), an ISO 8601 time (naive means
    UTC: start at the first event stored then or later) or `now` (only new events)."""
    if text is None:
        return Since()
    value = text.strip()
    if value == "now":
        return Since(at_end=True)
    if value.isdigit():
        seq = int(value)
        if seq < 1:
            raise TailInputError("--since must be a stream sequence of 1 or more")
        return Since(after_seq=seq - 1)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise TailInputError(
            f"--since {text[:40]!r} is neither a stream sequence, an ISO 8601 time nor `now`"
        ) from None
    return Since(at_time=moment if moment.tzinfo else moment.replace(tzinfo=UTC))


@dataclass(frozen=True)
class TailQuery:
    """What to watch: one session (None: every session) and which kinds (empty: all)."""

    session_id: str | None = None
    kinds: frozenset[str] = frozenset()

    def subject_filter(self) -> str:
        """The narrowest stream filter: the server sends only what may be shown."""
        kind = next(iter(self.kinds)) if len(self.kinds) == 1 else "*"
        if self.session_id is not None:
            return f"{EVENT_PREFIX}.{kind}.{session_token(self.session_id)}"
        return EVENT_SUBJECTS if kind == "*" else f"{EVENT_PREFIX}.{kind}.>"

    def wants(self, event: Event) -> bool:
        """Whether a decoded event is one to show (the filter is coarse for 2+ kinds, and a
        session token is shared by sessions whose long ids hash alike only in theory)."""
        if self.kinds and event.kind not in self.kinds:
            return False
        return self.session_id is None or event.session_id == self.session_id


@dataclass(frozen=True)
class TailItem:
    """One stored message: its place, and the event or why it is not one."""

    stream_seq: int
    subject: str
    event: Event | None = None
    error: DecodeError | None = None


async def stream_last_seq(nc: Client, stream: str) -> int:
    """The stream's last sequence (what `--since now` starts after)."""
    info = await nc.jetstream().stream_info(stream)
    return int(info.state.last_seq or 0)


async def first_seq_at(nc: Client, stream: str, subject_filter: str, moment: datetime) -> int:
    """The sequence before the first message matching the filter stored at or after
    `moment`; the stream's last sequence when there is none yet."""
    start = moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    request = {"start_time": start, "next_by_subj": subject_filter}
    reply = await nc.request(f"$JS.API.DIRECT.GET.{stream}", orjson.dumps(request), timeout=5)
    headers = reply.headers or {}
    if headers.get("Status") == "404":
        return await stream_last_seq(nc, stream)
    if headers.get("Status"):
        raise ReplayError(f"stream {stream} cannot be read: {headers.get('Description', '')}")
    return int(headers["Nats-Sequence"]) - 1


async def start_after(nc: Client, stream: str, query: TailQuery, since: Since) -> int:
    """The stream sequence a tail reads after."""
    if since.at_end:
        return await stream_last_seq(nc, stream)
    if since.at_time is not None:
        return await first_seq_at(nc, stream, query.subject_filter(), since.at_time)
    return since.after_seq


def item_of(data: bytes, stream_seq: int, subject: str) -> TailItem:
    """A stored message decoded with the one `decode` (subject checked too)."""
    try:
        return TailItem(stream_seq, subject, event=decode(data, subject=subject))
    except DecodeError as exc:
        return TailItem(stream_seq, subject, error=exc)


#: What a read may meet while NATS restarts; a follower waits and reads again.
TRANSIENT = (
    nats.errors.TimeoutError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.NoRespondersError,
    nats.errors.OutboundBufferLimitError,
    TimeoutError,
)


async def tail_events(
    nc: Client,
    stream: str,
    query: TailQuery,
    since: Since,
    *,
    follow: bool = False,
    poll_s: float = POLL_S,
) -> AsyncGenerator[TailItem, None]:
    """Every event of `query` from `since`, in stream order; with `follow`, then every event
    appended later, forever (cancel the task to stop), across NATS restarts.

    A follower notes the stream's last sequence before each read and, once the read is
    done, starts the next one after it: the server then never steps again over the other
    sessions' events it already stepped over, however long the watched session stays idle.
    """
    after = await _retrying(lambda: start_after(nc, stream, query, since), follow, poll_s)
    subject_filter = query.subject_filter()
    while True:
        try:
            scanned_to = await stream_last_seq(nc, stream) if follow else 0
            reading = cast(
                AsyncGenerator[RawStored, None],
                iterate_direct(nc, stream, subject_filter, after_seq=after),
            )
            async with aclosing(reading) as messages:
                async for raw in messages:
                    after = raw.stream_seq
                    item = item_of(raw.data, raw.stream_seq, raw.subject)
                    if item.event is None or query.wants(item.event):
                        yield item
            after = max(after, scanned_to)
        except JetStreamApiError as exc:
            raise ReplayError(f"stream {stream} cannot be read: {exc.description}") from None
        except TRANSIENT as exc:
            if not follow:
                raise ReplayError(f"stream {stream} cannot be read: {type(exc).__name__}") from None
        if not follow:
            return
        await asyncio.sleep(poll_s)


async def _retrying(make: Callable[[], Awaitable[int]], follow: bool, poll_s: float) -> int:
    """`make()`, retried every `poll_s` while NATS is away when following."""
    while True:
        try:
            return await make()
        except nats.js.errors.NotFoundError:
            raise ReplayError("no event stream: run `reminders provision`") from None
        except TRANSIENT as exc:
            if not follow:
                raise ReplayError(f"NATS did not answer: {type(exc).__name__}") from None
            await asyncio.sleep(poll_s)


def _field(payload: BaseModel, name: str) -> Any:
    """A payload field, or the same field of the reminder spec it carries."""
    value = getattr(payload, name, None)
    if value is None:
        spec = getattr(payload, "reminder", None)
        value = getattr(spec, "id" if name == "reminder_id" else name, None)
    return value


def reminder_ids(payload: BaseModel) -> str:
    """The reminder(s) an event is about ('' when none): by field name, so a kind added
    later that names its reminder `reminder_id` (or carries a `reminder`) shows it too."""
    single = _field(payload, "reminder_id")
    if isinstance(single, str):
        return single
    for name in ("directive_ids", "propagated_ids", "preserved_ids", "replaced_ids"):
        many = getattr(payload, name, None)
        if isinstance(many, list) and many:
            return ",".join(str(item) for item in many)
    return ""


def authority_of(payload: BaseModel) -> str:
    """The reminder's authority, when the event carries it ('' otherwise)."""
    value = _field(payload, "authority")
    return str(getattr(value, "value", value)) if value is not None else ""


def body_of(payload: BaseModel) -> str | None:
    """The reminder body an event carries, if any."""
    body = _field(payload, "body")
    return body if isinstance(body, str) else None


def first_words(body: str, words: int = BODY_WORDS, chars: int = BODY_CHARS) -> str:
    """The start of a body on one line: its first `words` words, at most `chars` long."""
    parts = body.split()
    text = " ".join(parts[:words])
    if len(text) > chars:
        text = text[: chars - 1].rstrip() + "…"
    elif len(parts) > words:
        text += " …"
    return text


def as_record(item: TailItem, *, bodies: bool) -> dict[str, Any]:
    """One JSON Lines object: where, which session, turn, kind, reminder, authority and (only
    with `bodies`) the full body; an undecodable message carries its dead-letter code."""
    if item.event is None:
        error = item.error
        return {
            "stream_seq": item.stream_seq,
            "subject": item.subject,
            "error": error.code if error is not None else "invalid_event",
        }
    event = item.event
    record: dict[str, Any] = {
        "stream_seq": item.stream_seq,
        "session_id": event.session_id,
        "session_seq": event.session_seq,
        "turn": event.turn,
        "kind": event.kind,
        "reminder_id": reminder_ids(event.payload) or None,
        "authority": authority_of(event.payload) or None,
        "occurred_at": event.occurred_at,
        "event_id": event.event_id,
    }
    if bodies:
        record["body"] = body_of(event.payload)
    return record


def table_header(*, all_sessions: bool) -> str:
    """The column names of `table_line`."""
    session = f"{'session':<20} " if all_sessions else ""
    return f"{'seq':>7} {session}{'turn':>4}  {'kind':<20} {'reminder':<24} {'authority':<10} body"


def table_line(item: TailItem, *, bodies: bool, all_sessions: bool) -> str:
    """One readable line per stored message (columns of `table_header`)."""
    if item.event is None:
        code = item.error.code if item.error is not None else "invalid_event"
        return f"{item.stream_seq:>7} ({code}: not an event this build reads, on {item.subject})"
    event = item.event
    session = f"{_clip(event.session_id, 20):<20} " if all_sessions else ""
    body = body_of(event.payload)
    shown = first_words(body) if bodies and body is not None else ""
    return (
        f"{item.stream_seq:>7} {session}{event.turn:>4}  {event.kind:<20} "
        f"{_clip(reminder_ids(event.payload), 24):<24} {authority_of(event.payload):<10} {shown}"
    ).rstrip()


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"

"""Runtime events for `replay --verify` (SPEC §9): from a JSON Lines file (one runtime event
per line, as hosts publish them) or from the `AGENT_EVENTS` stream with direct gets of one
session's subjects (`agent.events.*.<token>`), by runtime event id. Lines or messages that
do not decode are skipped: verify then lists their evaluations as not re-derivable."""

from __future__ import annotations

from pathlib import Path

from nats.aio.client import Client

from contracts.agent_events import RuntimeEvent, decode_runtime_event
from contracts.decode import DecodeError
from contracts.subjects import AGENT_EVENT_PREFIX, session_token
from services.adapters.session_read import iterate_direct


def runtime_events_from_file(path: Path) -> dict[str, RuntimeEvent]:
    """Runtime events by id from a JSON Lines file."""
    found: dict[str, RuntimeEvent] = {}
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            event = decode_runtime_event(line)
        except DecodeError:
            continue
        found.setdefault(event.event_id, event)
    return found


async def runtime_events_from_nats(
    nc: Client, stream: str, session_id: str
) -> dict[str, RuntimeEvent]:
    """One session's runtime events by id, still held by `stream` (AGENT_EVENTS)."""
    found: dict[str, RuntimeEvent] = {}
    subject_filter = f"{AGENT_EVENT_PREFIX}.*.{session_token(session_id)}"
    try:
        async for raw in iterate_direct(nc, stream, subject_filter):
            try:
                event = decode_runtime_event(raw.data, subject=raw.subject)
            except DecodeError:
                continue
            found.setdefault(event.event_id, event)
    except Exception:  # no such stream, or no right to read it: nothing to re-derive from
        return found
    return found

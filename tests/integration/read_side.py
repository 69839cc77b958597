"""Helpers for read-side tests: replay a session from the stream, read its projection."""

from __future__ import annotations

import asyncio
import time

import nats
from nats.aio.client import Client

from contracts.decode import decode
from contracts.records import Tombstone
from contracts.state import SessionState
from core import canonical_json, fold_all
from core.canonical import session_token
from services.adapters.record_codec import decode_record
from services.adapters.session_read import read_session
from services.adapters.settings import Settings


async def replayed(nc: Client, settings: Settings, session_id: str) -> SessionState:
    """The state a replay of the session's stored events gives."""
    stored = await read_session(nc, settings.stream, session_id)
    return fold_all(SessionState(), [(decode(i.envelope), i.stream_seq) for i in stored])


async def projected(
    nc: Client, settings: Settings, session_id: str
) -> SessionState | Tombstone | None:
    """What the bucket holds for the session."""
    kv = await nc.jetstream().key_value(settings.kv_bucket)
    try:
        entry = await kv.get(session_token(session_id))
    except nats.js.errors.KeyNotFoundError:
        return None
    return decode_record(entry.value)


def canonical(state: SessionState | Tombstone | None) -> str:
    assert isinstance(state, SessionState), state
    return canonical_json(state.model_dump(mode="json"))


async def wait_projected_equal(
    nc: Client, settings: Settings, session_ids: list[str], timeout_s: float = 30.0
) -> None:
    """Until every session's projection equals its replay (bounded)."""
    deadline = time.monotonic() + timeout_s
    pending = list(session_ids)
    while pending and time.monotonic() < deadline:
        for session_id in list(pending):
            state = await projected(nc, settings, session_id)
            if isinstance(state, SessionState) and canonical(state) == canonical(
                await replayed(nc, settings, session_id)
            ):
                pending.remove(session_id)
        if pending:
            await asyncio.sleep(0.1)
    assert not pending, f"projection never caught up for {pending[:5]}"

"""Acknowledgements and the wall clock (SPEC §12.3, §12.4) through a gateway running as its
own process: the bus op, a deadline reached in real time, and the recorded times."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

from nats.aio.client import Client

from client.sdk import ReminderClient
from contracts.decode import decode
from replay.source import rows_from_nats
from replay.verify import verify
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from tests.processes import ServiceRunner


async def test_acknowledge_and_a_deadline_over_the_bus(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    client = ReminderClient(nc)
    sid = "effect-bus"
    soon = datetime.now(UTC) + timedelta(seconds=1.5)
    expires_at = soon.astimezone(timezone(timedelta(hours=2))).isoformat()  # any offset is accepted
    for reminder in (
        {"body": "Run the tests.", "id": "t1", "tags": ["tests"]},
        {"body": "Deploy before the window closes.", "id": "d1", "expires_at": expires_at},
    ):
        reply = await client.request("inject", {"session_id": sid, "reminder": reminder})
        assert reply["ok"], reply
    rendered = await client.request("render", {"session_id": sid, "turn": 0})
    assert rendered["envelope"]["directive_ids"] == ["t1", "d1"]
    acted = await client.request(
        "acknowledge",
        {"session_id": sid, "reminder_id": "t1", "turn": 0, "outcome": "acted", "by": "model"},
    )
    assert acted["ok"] and acted["already_acknowledged"] is False
    again = await client.request(
        "acknowledge", {"session_id": sid, "reminder_id": "t1", "turn": 0, "outcome": "acted"}
    )
    assert again["already_acknowledged"] is True and again["session_seq"] == acted["session_seq"]
    past = await client.request(
        "inject",
        {"session_id": sid, "reminder": {"body": "x", "expires_at": "2020-01-01T00:00:00Z"}},
    )
    assert past["error"]["code"] == "HARN-RMD-001"

    await asyncio.sleep(max(0.0, (soon - datetime.now(UTC)).total_seconds()) + 0.3)
    ended = await client.request("end_turn", {"session_id": sid, "turn": 0})
    assert ended["ok"], ended
    events = [decode(item.envelope) for item in await read_session(nc, provisioned.stream, sid)]
    expiry = [e for e in events if e.kind == "expired"]
    assert [(e.payload.reminder_id, e.payload.reason) for e in expiry] == [("d1", "deadline")]  # type: ignore[union-attr]
    # In the end_turn's own batch, before its post_turn.
    assert [e.kind for e in events[-2:]] == ["expired", "post_turn"]
    stored_spec = next(e for e in events if e.kind == "injected" and e.payload.reminder_id == "d1")
    assert stored_spec.payload.reminder.expires_at.endswith("Z")  # type: ignore[union-attr]
    times = [e.occurred_at for e in events]
    assert times == sorted(times)
    assert verify(await rows_from_nats(nc, provisioned.stream, sid)) is None

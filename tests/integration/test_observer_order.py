"""The observer process notifies ACP clients in the log's order: each `fired` event's
`session/update` then its `_reminders/emitted`, in the order the events were stored, for
several sessions written at once (its events are taken as a flow and settled one after
another: `services/observer/app.py`)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import orjson
from nats.aio.client import Client

from client.sdk import ReminderClient
from contracts.decode import decode
from contracts.events import Fired
from services.adapters.session_read import session_messages
from services.adapters.settings import Settings
from tests.processes import ServiceRunner

SESSIONS = ("order-a", "order-b", "order-c")
REMINDERS = 6


async def fired_in_log_order(nc: Client, stream: str, session_id: str) -> list[str]:
    messages, _ = await session_messages(nc, stream, session_id)
    events = [decode(raw.data, subject=raw.subject) for raw in messages]
    return [event.payload.reminder_id for event in events if isinstance(event.payload, Fired)]


async def test_the_observer_notifies_in_the_logs_order(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("observer")
    received: dict[str, list[tuple[str, str]]] = defaultdict(list)

    async def on_message(message: Any) -> None:
        body = orjson.loads(message.data)
        params = body["params"]
        if body["method"] == "session/update":
            reminder = params["update"]["_meta"]["harn"]["reminder"]
        else:
            reminder = params["reminder"]
        received[params["sessionId"]].append((body["method"], reminder["reminderId"]))

    await nc.subscribe("reminders.v1.acp.>", cb=on_message)
    ledger = ReminderClient(nc)

    async def write(session_id: str) -> None:
        for number in range(REMINDERS):
            await ledger.inject(session_id, f"Step {number}.", ttl_turns=1)
        await ledger.render(session_id, turn=0)
        await ledger.inject(session_id, "One more.", ttl_turns=1)
        await ledger.render(session_id, turn=1)

    await asyncio.gather(*(write(session_id) for session_id in SESSIONS))
    expected_count = 2 * (REMINDERS + 1)
    for _ in range(200):
        if all(len(received[session_id]) >= expected_count for session_id in SESSIONS):
            break
        await asyncio.sleep(0.05)

    for session_id in SESSIONS:
        fired = await fired_in_log_order(nc, provisioned.stream, session_id)
        assert len(fired) >= REMINDERS + 1, fired
        expected = [
            (method, reminder_id)
            for reminder_id in fired
            for method in ("session/update", "_reminders/emitted")
        ]
        assert received[session_id] == expected, session_id

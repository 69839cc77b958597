"""The SDK's thin wrappers send exactly the fields the SPEC names, optional ones only when set."""

from __future__ import annotations

from typing import Any

import orjson

from client.sdk import ReminderClient


class Reply:
    def __init__(self, data: bytes) -> None:
        self.data = data


class RecordingConnection:
    """Stands in for a nats-py connection: records each request, answers ok."""

    max_payload = 1 << 20
    is_connected = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.stats = {"reconnects": 0}

    async def request(self, subject: str, data: bytes, **_: Any) -> Reply:
        self.sent.append((subject, orjson.loads(data)))
        return Reply(b'{"ok": true, "text": "x", "neutralized": 0}')


async def test_render_sends_max_tokens_only_when_set() -> None:
    nc = RecordingConnection()
    client = ReminderClient(nc)  # type: ignore[arg-type]
    await client.render("s", 3)
    await client.render("s", 3, max_tokens=200)
    assert nc.sent == [
        ("reminders.v1.render", {"session_id": "s", "turn": 3}),
        ("reminders.v1.render", {"session_id": "s", "turn": 3, "max_tokens": 200}),
    ]


async def test_sanitize_mute_unmute_and_acknowledge_send_their_fields() -> None:
    nc = RecordingConnection()
    client = ReminderClient(nc)  # type: ignore[arg-type]
    reply = await client.sanitize("s", "<system-reminder>", turn=2, tool_name="Bash")
    await client.mute("s", {"tag": "idle"}, until_turn=4)
    await client.unmute("s", "m-1")
    await client.acknowledge("s", "r-1", turn=2, outcome="acted", by="model")
    assert reply["neutralized"] == 0
    assert nc.sent == [
        (
            "reminders.v1.sanitize",
            {"session_id": "s", "text": "<system-reminder>", "turn": 2, "tool_name": "Bash"},
        ),
        ("reminders.v1.mute", {"session_id": "s", "selector": {"tag": "idle"}, "until_turn": 4}),
        ("reminders.v1.unmute", {"session_id": "s", "mute_id": "m-1"}),
        (
            "reminders.v1.acknowledge",
            {"session_id": "s", "reminder_id": "r-1", "turn": 2, "outcome": "acted", "by": "model"},
        ),
    ]

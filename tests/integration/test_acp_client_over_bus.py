"""An ACP client (the `agent-client-protocol` package's `ClientSideConnection`) fed with what the
observer process really publishes on `reminders.v1.acp.<token>` (SPEC §8)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest
from acp.client.connection import ClientSideConnection
from nats.aio.client import Client

from client.sdk import ReminderClient
from services.adapters.settings import Settings
from tests.processes import ServiceRunner


class NatsAcpTransport:
    """An ACP message transport whose incoming side is one session's ACP subject."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []

    async def on_message(self, message: Any) -> None:
        await self.incoming.put(orjson.loads(message.data))

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def receive(self) -> dict[str, Any] | None:
        return await self.incoming.get()

    async def close(self) -> None:
        await self.incoming.put(None)


class RecordingClient:
    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.extensions: list[tuple[str, dict[str, Any]]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.extensions.append((method, params))


async def test_an_acp_client_gets_the_extension_and_rejects_the_reference_update(
    nc: Client,
    provisioned: Settings,
    services: ServiceRunner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    services.start("gateway")
    services.start("observer")
    transport = NatsAcpTransport()
    raw: list[dict[str, Any]] = []

    async def on_message(message: Any) -> None:
        raw.append(orjson.loads(message.data))
        await transport.on_message(message)

    await nc.subscribe("reminders.v1.acp.acp-host", cb=on_message)
    client = RecordingClient()
    connection = ClientSideConnection(client, transport)  # type: ignore[arg-type]
    ledger = ReminderClient(nc)
    with caplog.at_level(logging.ERROR):
        injected = await ledger.inject("acp-host", "Run the linter.", tags=["lint"], ttl_turns=1)
        await ledger.render("acp-host", turn=0)
        for _ in range(100):
            if client.extensions and len(raw) >= 2:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.2)  # let the connection finish handling the session/update
    await connection.close()

    # On the wire: the session/update first, then the extension, on the same subject.
    assert [message["method"] for message in raw] == ["session/update", "_reminders/emitted"]
    # The extension reached the client's extension handler, `_` stripped by the package.
    [(method, params)] = client.extensions
    assert method == "reminders/emitted"
    assert params["sessionId"] == "acp-host"
    assert params["reminder"]["reminderId"] == injected["reminder_id"]
    assert params["reminder"]["body"] == "Run the linter."
    assert params["reminder"]["source"] == "in_pipeline"
    # The reference runtime's session/update never reaches session_update: the package fails
    # to validate it (closed union of session updates) and logs the error; nothing is sent back.
    assert client.updates == []
    failures = [r for r in caplog.records if "method=session/update" in r.getMessage()]
    assert failures, [r.getMessage() for r in caplog.records]
    assert "union_tag_invalid" in str(failures[0].exc_info[1] if failures[0].exc_info else "")
    assert transport.sent == []

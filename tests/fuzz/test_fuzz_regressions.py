"""Cases the fuzz campaign found, kept as plain regression tests over the bus."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from nats.aio.client import Client

from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from tests.processes import ServiceRunner


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("notifications/reminder", {"reminder": {"body": "mcp"}, "_meta": {"sessionId": "nr"}}),
        (
            "notifications/message",
            {"_meta": {"sessionId": "nr", "harn": {"reminder": {"body": "m"}}}},
        ),
    ],
)
async def test_a_notification_method_sent_with_an_id_gets_an_empty_result_once_applied(
    nc: Client, provisioned: Settings, services: ServiceRunner, method: str, params: dict[str, Any]
) -> None:
    """SPEC §8: a message with an `id` is a request whatever its method; found by the fuzz
    run as a request that timed out (no response at all) while its reminder was appended."""
    services.start("gateway")
    message = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    reply = await nc.request("reminders.v1.rpc", orjson.dumps(message), timeout=10)
    assert orjson.loads(reply.data) == {"jsonrpc": "2.0", "id": 7, "result": {}}
    assert len(await read_session(nc, provisioned.stream, "nr")) == 1

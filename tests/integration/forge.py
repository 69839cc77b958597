"""Test-only: publish raw bytes straight to the event stream, around the gateway's rules.

Only tests that must show how workers treat a forged or malformed event use this; every
other test goes through commands (`client.sdk.ReminderClient`).
"""

from __future__ import annotations

from typing import Any

import orjson
from nats.aio.client import Client


async def publish_raw(nc: Client, subject: str, body: bytes | dict[str, Any]) -> int:
    """Store `body` (bytes, or an envelope as JSON) on `subject`; returns its stream seq."""
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    ack = await nc.jetstream().publish(subject, data)
    return int(ack.seq)

"""Connecting to NATS from settings (one place, so credentials and TLS apply everywhere)."""

from __future__ import annotations

import nats
from nats.aio.client import Client

from services.settings import Settings


async def connect(settings: Settings, name: str) -> Client:
    """A nats-py connection named after the service, reconnecting forever."""
    return await nats.connect(
        settings.nats_url,
        name=name,
        connect_timeout=settings.request_timeout_s,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        allow_reconnect=True,
    )

"""Connecting to NATS from settings (one place, so credentials and TLS apply everywhere)."""

from __future__ import annotations

import asyncio
import logging

import nats
from nats.aio.client import Client

from services.adapters.credentials import nats_kwargs
from services.adapters.settings import Settings

log = logging.getLogger("reminders.nats")


class NatsUnreachable(RuntimeError):
    """The first connection could not be made in time."""


async def _quiet_error(exc: Exception) -> None:
    # nats-py prints a traceback by default; one line is enough, and never a payload. The
    # server's own error text (a permissions violation names the subject) carries none.
    log.warning(
        "nats connection trouble", extra={"error": type(exc).__name__, "detail": str(exc)[:200]}
    )


def server_urls(nats_url: str) -> list[str]:
    """The servers of `REMINDERS_NATS_URL`: one URL, or a cluster's as a comma-separated list
    (`nats://a:4222,nats://b:4222`), so a client fails over when the node it uses dies."""
    urls = [url.strip() for url in nats_url.split(",") if url.strip()]
    return urls or [nats_url]


async def connect(settings: Settings, name: str, startup_timeout_s: float = 10.0) -> Client:
    """A connection named after the service that reconnects forever once established.

    The first connection is bounded by `startup_timeout_s`, so a wrong URL fails fast.
    `settings.nats_url` may list several servers separated by commas (a cluster).
    """
    try:
        return await asyncio.wait_for(
            nats.connect(
                server_urls(settings.nats_url),
                name=name,
                connect_timeout=min(settings.request_timeout_s, startup_timeout_s),
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                allow_reconnect=True,
                error_cb=_quiet_error,
                **nats_kwargs(settings),
            ),
            timeout=startup_timeout_s,
        )
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        raise NatsUnreachable(
            f"cannot reach NATS at {settings.nats_url} within {startup_timeout_s:.0f}s"
        ) from exc

"""A flood of long-waiting queries shares one watch and never breaks other sessions' queries."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client

from client import ReminderClient
from services.adapters.settings import Settings
from tests.processes import ServiceRunner


async def test_a_flood_of_long_waits_on_one_session_leaves_other_sessions_answered(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    client = ReminderClient(nc, timeout_s=30)
    await client.inject("flooded", "x")
    consumers_before = (await nc.jetstream().account_info()).consumers

    flood = [
        client.request("state", {"session_id": "flooded", "min_seq": 10**9, "timeout_ms": 3000})
        for _ in range(1100)
    ]
    flooding = asyncio.gather(*flood)
    await asyncio.sleep(0.5)  # the flood is waiting now
    for n in range(5):
        await client.inject(f"calm-{n}", "read your write")
        reply = await client.request("state", {"session_id": f"calm-{n}", "timeout_ms": 3000})
        assert reply["ok"] is True, reply
        assert reply["stale"] is False and reply["state"]["session_seq"] == 1
    consumers_during = (await nc.jetstream().account_info()).consumers
    replies = await flooding

    # One shared watch, not a consumer per waiting query.
    assert consumers_during - consumers_before <= 2
    refused = [r for r in replies if not r["ok"]]
    answered = [r for r in replies if r["ok"]]
    assert refused, "a flood past the bound is refused, not queued"
    for reply in refused:
        assert reply["error"]["code"] == "rate_limited"
        assert reply["error"]["details"]["retry_after_ms"] > 0
    assert all(r["stale"] is True for r in answered)  # min_seq never reached: stale, in time

"""`ReminderClient` refuses a command the server could not take, before sending anything."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from client.sdk import ReminderClient
from contracts.errors import ErrorCode, ReminderError
from contracts.subjects import command_subject


async def test_a_body_over_max_payload_is_too_large_and_nothing_is_sent(nc: Client) -> None:
    received: list[Msg] = []

    async def note(msg: Msg) -> None:
        received.append(msg)

    subscription = await nc.subscribe(command_subject("inject"), cb=note)
    client = ReminderClient(nc, timeout_s=1)
    assert nc.max_payload > 0
    with pytest.raises(ReminderError) as caught:
        await client.inject("big", "x" * (2 * 1024 * 1024))
    assert caught.value.code is ErrorCode.TOO_LARGE
    assert caught.value.details["max_payload"] == nc.max_payload
    with pytest.raises(ReminderError) as raw:
        await client.request("inject", {"session_id": "big", "body": "x" * nc.max_payload})
    assert raw.value.code is ErrorCode.TOO_LARGE
    await nc.flush()
    await asyncio.sleep(0.2)
    assert received == []
    await subscription.unsubscribe()


async def test_a_body_under_the_limit_is_sent(nc: Client) -> None:
    async def answer(msg: Msg) -> None:
        await msg.respond(b'{"ok": true}')

    await nc.subscribe(command_subject("inject"), cb=answer)
    reply = await ReminderClient(nc, timeout_s=2).inject("ok", "x" * 100_000)
    assert reply == {"ok": True}

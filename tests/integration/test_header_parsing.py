"""The service's connections parse the headers of what they receive as nats-py would: a
stored event read back with a direct get, over a connection made as every process makes it."""

from __future__ import annotations

import orjson
from nats.aio.client import Client

from services.adapters.connection import connect
from services.adapters.nats_client import LedgerClient
from services.adapters.settings import Settings


async def test_a_stored_message_s_headers_arrive_as_nats_py_gives_them(
    nc: Client, provisioned: Settings
) -> None:
    headers = {"Nats-Msg-Id": "h-1", "X-Note": "café", "X-Empty": ""}
    ack = await nc.jetstream().publish(
        "transcript.reminder.injected.header-check", b"{}", headers=headers
    )
    ours = await connect(provisioned, "test-headers")
    try:
        assert isinstance(ours, LedgerClient)
        request = orjson.dumps({"seq": ack.seq})
        subject = f"$JS.API.DIRECT.GET.{provisioned.stream}"
        mine = await ours.request(subject, request, timeout=5)
        stock = await nc.request(subject, request, timeout=5)
    finally:
        await ours.close()
    assert mine.headers == stock.headers
    assert mine.headers is not None
    assert mine.headers["X-Note"] == "café"
    assert mine.headers["Nats-Sequence"] == str(ack.seq)
    assert mine.headers["Nats-Msg-Id"] == "h-1"

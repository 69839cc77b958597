"""Raw JetStream pull consumer with a pinned-client priority group (server ≥ 2.11).

nats-py has no priority-group support, so the consumer is created with the raw API and
pulled with `$JS.API.CONSUMER.MSG.NEXT` carrying `group` and the pin id. The server pins one
client and stamps `Nats-Pin-Id` on what it delivers; a pull with another id gets status 423,
and when the pinned client stops pulling for `priority_timeout` another one is pinned.
Delivered messages are ordinary JetStream messages: `ack()` and `nak(delay=…)` work.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg

from services.consumer import NS

H_PIN_ID = "Nats-Pin-Id"


def pinned_consumer_config(
    durable: str,
    group: str,
    filter_subject: str,
    *,
    priority_timeout_s: float = 5.0,
    ack_wait_s: float = 5.0,
    max_ack_pending: int = 10_000,
) -> dict[str, Any]:
    """A durable pull consumer whose replicas form one pinned-client priority group."""
    return {
        "durable_name": durable,
        "ack_policy": "explicit",
        "deliver_policy": "all",
        "filter_subject": filter_subject,
        "max_ack_pending": max_ack_pending,
        "max_deliver": -1,
        "ack_wait": int(ack_wait_s * NS),
        "priority_groups": [group],
        "priority_policy": "pinned_client",
        "priority_timeout": int(priority_timeout_s * NS),
    }


async def fetch_pinned(
    nc: Client,
    stream: str,
    durable: str,
    group: str,
    batch: int,
    expires_s: float,
    pin_id: str | None,
    *,
    no_wait: bool = False,
) -> tuple[list[Msg], str | None]:
    """One pull request; returns the messages and the (possibly new, or lost) pin id.

    With `no_wait` the server answers at once with what is there. Without it the request
    stays open until `batch` messages came or it expires; the caller long-polls with a batch
    of one, so an open request never outlives our subscription with messages still owed.
    """
    request: dict[str, Any] = {"batch": batch, "expires": int(expires_s * NS), "group": group}
    if pin_id:
        request["id"] = pin_id
    if no_wait:
        request["no_wait"] = True
    inbox = nc.new_inbox()
    messages: list[Msg] = []
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    pin = [pin_id]

    def finish() -> None:
        if not finished.done():
            finished.set_result(None)

    # A callback, not `next_msg` per message: one future for the whole request instead of a
    # timer per message, which is most of what a fetch costs in Python.
    async def on_message(message: Msg) -> None:
        if finished.done():
            return
        status = message.headers.get("Status") if message.headers and not message.data else None
        if status is None:
            new_pin = message.headers.get(H_PIN_ID) if message.headers else None
            if new_pin:
                pin[0] = new_pin
            messages.append(message)
            if len(messages) >= batch:
                finish()
            return
        if status == "100":  # idle heartbeat
            return
        if status == "423":  # another client is pinned: compete again without an id
            pin[0] = None
        finish()  # 404 no messages, 408 expired, 409 and others end this request

    subscription = await nc.subscribe(inbox, cb=on_message)
    try:
        await nc.publish(
            f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}", orjson.dumps(request), reply=inbox
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(finished), expires_s + 1.0)
    finally:
        finish()
        await subscription.unsubscribe()
    return messages, pin[0]


async def next_batch(
    nc: Client, stream: str, durable: str, group: str, batch: int, pin_id: str | None
) -> tuple[list[Msg], str | None]:
    """What is there now (up to `batch`), or else the first message within a second."""
    messages, pin_id = await fetch_pinned(
        nc, stream, durable, group, batch, 5.0, pin_id, no_wait=True
    )
    if messages:
        return messages, pin_id
    return await fetch_pinned(nc, stream, durable, group, 1, 1.0, pin_id)

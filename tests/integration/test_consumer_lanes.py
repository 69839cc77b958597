"""The keyed consumer loop (the providers'): messages of one key in delivery order, and a
slow key never holds up the others, on a real server."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StreamConfig
from opentelemetry.trace import NoOpTracer

from services.adapters.provisioning import DurableConsumer, ensure_consumer
from services.adapters.settings import Settings
from services.consumer import ACK, EventConsumer, Settlement, retry
from services.runtime import Runtime

STREAM = "LANES"
NS = 1_000_000_000


async def consumer_on_lanes(nc: Client, max_ack_pending: int) -> EventConsumer:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=STREAM, subjects=["lanes.>"]))
    durable = DurableConsumer(
        STREAM,
        {
            "durable_name": "lanes",
            "filter_subject": "lanes.>",
            "ack_policy": "explicit",
            "deliver_policy": "all",
            "ack_wait": 30 * NS,
            "max_ack_pending": max_ack_pending,
            "max_deliver": -1,
        },
    )
    await ensure_consumer(nc, durable)
    return EventConsumer(durable, batch=max_ack_pending, tracer=NoOpTracer())


async def run_until(
    consumer: EventConsumer,
    runtime: Runtime,
    outcome_of: object,
    finished: asyncio.Event,
    timeout_s: float = 10,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.create_task(
        consumer.run_messages(
            runtime,
            outcome_of,  # type: ignore[arg-type]
            stop,
            key_of=lambda message: message.subject.rsplit(".", 1)[1],
        )
    )
    try:
        await asyncio.wait_for(finished.wait(), timeout_s)
    finally:
        stop.set()
        await asyncio.wait_for(loop, 5)


async def test_a_slow_key_does_not_hold_up_the_other_keys_and_each_key_keeps_its_order(
    nc: Client, settings: Settings
) -> None:
    consumer = await consumer_on_lanes(nc, max_ack_pending=4)
    js = nc.jetstream()
    await js.publish("lanes.a", b"a0")
    for n in range(20):
        await js.publish(f"lanes.{'b' if n % 2 else 'c'}", f"{n}".encode())
    await js.publish("lanes.a", b"a1")
    runtime = Runtime("lanes", settings, nc=nc)
    others_done = asyncio.Event()
    finished = asyncio.Event()
    seen: dict[str, list[bytes]] = {"a": [], "b": [], "c": []}

    async def outcome_of(message: Msg) -> Settlement:
        key = message.subject.rsplit(".", 1)[1]
        if message.data == b"a0":
            # Four in flight at most, and "a0" holds one place until every message of the
            # other keys — most of them fetched after it — has been settled.
            await asyncio.wait_for(others_done.wait(), 5)
        seen[key].append(message.data)
        if len(seen["b"]) + len(seen["c"]) == 20:
            others_done.set()
        if len(seen["a"]) == 2:
            finished.set()
        return ACK

    await run_until(consumer, runtime, outcome_of, finished)
    assert seen["a"] == [b"a0", b"a1"]
    assert seen["b"] == [f"{n}".encode() for n in range(1, 20, 2)]
    assert seen["c"] == [f"{n}".encode() for n in range(0, 20, 2)]
    info = await js.consumer_info(STREAM, "lanes")
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_a_retried_message_comes_back_and_is_settled_later(
    nc: Client, settings: Settings
) -> None:
    consumer = await consumer_on_lanes(nc, max_ack_pending=8)
    js = nc.jetstream()
    for n in range(5):
        await js.publish(f"lanes.k{n}", f"{n}".encode())
    runtime = Runtime("lanes", settings, nc=nc)
    finished = asyncio.Event()
    attempts: dict[bytes, int] = {}

    async def outcome_of(message: Msg) -> Settlement:
        attempts[message.data] = attempts.get(message.data, 0) + 1
        if message.data == b"3" and attempts[message.data] == 1:
            return retry(0.2)
        if len(attempts) == 5 and attempts[b"3"] == 2:
            finished.set()
        return ACK

    await run_until(consumer, runtime, outcome_of, finished)
    assert attempts == {b"0": 1, b"1": 1, b"2": 1, b"3": 2, b"4": 1}

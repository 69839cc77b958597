"""`PullFlow` on a real server: every message once, never more held than its capacity, one
pull request for many messages, an idle flow asking about once a second, and a stop within
about a second."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StreamConfig

from services.adapters.nats_client import LedgerClient
from services.adapters.provisioning import DurableConsumer, ensure_consumer
from services.adapters.pull_flow import PullFlow

NS = 1_000_000_000


async def durable_on(nc: Client, stream: str, max_ack_pending: int) -> None:
    await nc.jetstream().add_stream(StreamConfig(name=stream, subjects=[f"{stream.lower()}.>"]))
    await ensure_consumer(
        nc,
        DurableConsumer(
            stream,
            {
                "durable_name": "flow",
                "filter_subject": f"{stream.lower()}.>",
                "ack_policy": "explicit",
                "deliver_policy": "all",
                "ack_wait": 30 * NS,
                "max_ack_pending": max_ack_pending,
                "max_deliver": -1,
            },
        ),
    )


class CountedRequests:
    """Counts the flow's pull requests by watching the consumer's API subject."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    async def watch(self, nc: Client, stream: str) -> None:
        async def seen(message: Msg) -> None:
            self.batches.append(int(orjson.loads(message.data)["batch"]))

        await nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.flow", cb=seen)


@pytest.mark.parametrize("service_client", [False, True], ids=["nats-py", "LedgerClient"])
async def test_every_message_once_and_never_more_held_than_the_capacity(
    nc: Client, ledger_nc: LedgerClient, service_client: bool
) -> None:
    """With the service's client, the flow takes its messages as they are read."""
    await durable_on(nc, "FLOWALL", max_ack_pending=1000)
    js = nc.jetstream()
    for n in range(300):
        await js.publish(f"flowall.k{n % 7}", f"{n}".encode())
    requests = CountedRequests()
    await requests.watch(nc, "FLOWALL")
    seen: list[bytes] = []
    most_held = 0
    done = asyncio.Event()
    stop = asyncio.Event()

    async def settle(message: Msg) -> None:
        await asyncio.sleep(0.001)
        await message.ack()
        seen.append(message.data)
        flow.release()
        if len(seen) == 300:
            done.set()

    def deliver(message: Msg) -> None:
        nonlocal most_held
        most_held = max(most_held, flow.held)
        asyncio.get_running_loop().create_task(settle(message))

    client = ledger_nc if service_client else nc
    flow = PullFlow(client, "FLOWALL", "flow", capacity=40, deliver=deliver)
    running = asyncio.create_task(flow.run(stop))
    await asyncio.wait_for(done.wait(), 10)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert sorted(seen, key=int) == [f"{n}".encode() for n in range(300)]
    assert most_held <= 40
    # Each request asks for at least a quarter of the places: nowhere near one per message.
    assert all(batch >= 10 for batch in requests.batches)
    assert len(requests.batches) <= 300 // 10 + 2
    info = await js.consumer_info("FLOWALL", "flow")
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_an_idle_flow_asks_about_once_a_second_and_stops_within_about_one(
    nc: Client,
) -> None:
    await durable_on(nc, "FLOWIDLE", max_ack_pending=100)
    requests = CountedRequests()
    await requests.watch(nc, "FLOWIDLE")
    stop = asyncio.Event()
    delivered: list[Msg] = []
    flow = PullFlow(nc, "FLOWIDLE", "flow", capacity=8, deliver=delivered.append, expires_s=0.5)
    running = asyncio.create_task(flow.run(stop))
    await asyncio.sleep(2.2)
    # One open request at a time, each answered by the server when its 0.5 s ran out.
    assert 4 <= len(requests.batches) <= 6
    await nc.jetstream().publish("flowidle.k", b"late")
    for _ in range(50):  # the open request takes it at once
        if delivered:
            break
        await asyncio.sleep(0.02)
    assert [message.data for message in delivered] == [b"late"]
    stopped_at = time.monotonic()
    stop.set()
    await asyncio.wait_for(running, 5)
    assert time.monotonic() - stopped_at < 1.5

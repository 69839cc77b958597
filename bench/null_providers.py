"""The null providers: the least a providers process must do per runtime event, as one
Python process on stock nats-py.

`python -m bench.null_providers URL` takes runtime events from the providers' durable
consumer on `AGENT_EVENTS` (the service's delivery: one subscription, one pull request open
at a time, `services.adapters.pull_flow`) and, for each: parses its JSON without a model,
reads the session's value from the projection bucket with one direct get (not parsed),
sends one canned `evaluate` (`bench.providers_throughput.evaluate_command`: one fired
`idle_nudge`, as the benchmark's runtime events cause) with the event's ids, parses the
reply and acks. No validation, no view, no evaluation, no session order: what is left is
the messaging a providers process cannot avoid, in the same client library and process
shape. It prints `ready` once it pulls.

`python -m bench.providers_throughput` runs it in place of the providers service for a third
phase, so the service's CPU per runtime event stands beside this floor.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import nats
import orjson
from nats.aio.msg import Msg

from bench.providers_throughput import evaluate_command
from contracts.subjects import EVALUATE_OP, command_subject, session_token
from services.adapters.pull_flow import PullFlow
from services.adapters.settings import Settings
from services.providers.app import DURABLE


async def serve(url: str) -> None:
    """Answer runtime events until SIGTERM."""
    settings = Settings.from_env({}, nats_url=url)
    nc = await nats.connect(url)
    bucket = settings.kv_bucket
    subject = command_subject(EVALUATE_OP)
    tasks: set[asyncio.Task[None]] = set()

    async def handle(message: Msg) -> None:
        event = orjson.loads(message.data)
        session_id = event["session_id"]
        token = session_token(session_id)
        await nc.request(f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.{token}", b"", timeout=5)
        command = evaluate_command(session_id, event["event_id"], event["turn"])
        reply = await nc.request(subject, orjson.dumps(command), timeout=30)
        orjson.loads(reply.data)
        await message.ack()
        flow.release()

    def deliver(message: Msg) -> None:
        task = asyncio.create_task(handle(message))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    flow = PullFlow(nc, settings.agent_events_stream, DURABLE, 256, deliver)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await flow.run(stop)
    if tasks:
        await asyncio.wait(list(tasks))
    await nc.drain()


def main() -> None:
    asyncio.run(serve(sys.argv[1]))


if __name__ == "__main__":
    main()

"""The null gateway: the least a gateway must do per command, as one Python process.

`python -m bench.null_gateway URL` subscribes to every command subject in the gateway's
queue group and, for each request: parses its JSON, publishes one stored event (the bytes of
a real `injected` event) on the session's subject with the per-subject expectation (the
session's last sequence, kept in memory), awaits the stream's ack and replies `ok`. No
decision, no chain, no fold, no session read: what is left is the messaging a gateway cannot
avoid, in the same client library and process shape. It prints `ready` once subscribed.

The `write_gateway` scenario measures it with the same load generator as the gateway, so
the gateway's figure over this one is the share of its time spent on anything but that.

`python -m bench.null_gateway URL --echo` answers `ok` at once, without publishing: the
request and reply hops alone, which `sequential_latency` sets beside one gateway command.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import nats
import orjson
from nats.aio.msg import Msg

from bench.traffic import decide_session
from contracts.subjects import event_subject, session_subject_filter
from services.adapters.append import encode_event
from services.adapters.jetstream import H_EXPECTED_SEQ, H_EXPECTED_SUBJECT
from services.gateway.listener import QUEUE_GROUP

COMMANDS = "reminders.v1.*"


async def serve(url: str, echo: bool = False) -> None:
    """Answer commands until SIGTERM (with `echo`, at once and without a publish)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    data = encode_event(decide_session("null-template", [0])[0][0])
    last: dict[str, int] = {}
    locks: dict[str, asyncio.Lock] = {}
    tasks: set[asyncio.Task[None]] = set()

    async def handle(message: Msg) -> None:
        session_id = str(orjson.loads(message.data)["session_id"])
        # One command per session in flight, as the gateway does.
        async with locks.setdefault(session_id, asyncio.Lock()):
            headers = {
                H_EXPECTED_SUBJECT: session_subject_filter(session_id),
                H_EXPECTED_SEQ: str(last.get(session_id, 0)),
            }
            ack = await js.publish(event_subject("injected", session_id), data, headers=headers)
            last[session_id] = ack.seq
        await message.respond(orjson.dumps({"ok": True, "stream_seq": ack.seq}))

    async def receive(message: Msg) -> None:
        if echo:
            orjson.loads(message.data)
            await message.respond(b'{"ok":true}')
            return
        task = asyncio.ensure_future(handle(message))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    await nc.subscribe(COMMANDS, queue=QUEUE_GROUP, cb=receive)
    await nc.flush()  # the server has the subscription before anyone is told `ready`
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await nc.drain()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], echo="--echo" in sys.argv[2:]))

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

`python -m bench.null_gateway URL --core` adds the core's part of a command and nothing else:
the request validated as the gateway validates it (`parse_command`), decided by the core
against the session's state kept in memory (`decide`, with fresh ids and time), and the
state the decision folded kept (`Decision.state_after`, as the gateway keeps it); the
message published is the decision's last event, with the same expectation. No cache
bounds, limits, metrics, group commit or session reads: `bench.gateway_floor` sets it beside
the null gateway to show what the core alone leaves of the null gateway's rate. (Its figures
in `bench/results/gateway_floor.json` were measured when it folded the events again.)

`python -m bench.null_gateway URL --lean` does what `--core` does with the core's part made
by `bench.lean_inject` instead: the same request validation and the same event bytes, built
without the core's models or any rule the output does not need. It publishes the last event,
as `--core` does.

`--gateway-runtime` runs any of these on the gateway's event loop (uvloop where installed)
with the gateway's collector threshold, so that `--core` and `--lean` differ from the
gateway only in what they do per command. Without it, the process is stock asyncio with
Python's default collector, as the null gateway baseline is.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import nats
import orjson
from nats.aio.msg import Msg

from bench.lean_inject import LeanSessions
from bench.traffic import decide_session
from contracts import commands as cmd
from contracts.state import SessionState
from contracts.subjects import event_subject, last_token, session_subject_filter
from core import decide
from services.adapters.append import encode_event
from services.adapters.ids import fresh_context
from services.adapters.jetstream import H_EXPECTED_SEQ, H_EXPECTED_SUBJECT
from services.adapters.memory import collect_less_often
from services.gateway.listener import QUEUE_GROUP
from services.runtime import event_loop_factory

COMMANDS = "reminders.v1.*"


def decided_by_core(op: str, body: object, states: dict[str, SessionState]) -> tuple[str, bytes]:
    """The core's part of one command (`--core`): validate, decide against the session's
    state, keep the state the decision folded; the kind and bytes of the last event."""
    command, _ = cmd.parse_command(op, body)
    state = states.get(command.session_id) or SessionState()
    decision = decide(state, command, fresh_context())
    if not decision.events:
        # The error's code only: a reply may carry what the command sent.
        error = decision.reply.get("error") or {}
        raise RuntimeError(f"{op} decided nothing: {error.get('code')}")
    # As the gateway keeps it: the state the decision folded, not a second fold.
    states[command.session_id] = decision.state_after(state, state.stream_seq)
    return decision.events[-1].kind, decision.encoded[-1]


async def serve(url: str, echo: bool = False, core: bool = False, lean: bool = False) -> None:
    """Answer commands until SIGTERM (with `echo`, at once and without a publish; with
    `core`, each decided by the core first; with `lean`, by `bench.lean_inject`)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    data = encode_event(decide_session("null-template", [0])[0][0])
    last: dict[str, int] = {}
    locks: dict[str, asyncio.Lock] = {}
    states: dict[str, SessionState] = {}
    leans = LeanSessions()
    tasks: set[asyncio.Task[None]] = set()

    async def handle(message: Msg) -> None:
        body = orjson.loads(message.data)
        session_id = str(body["session_id"])
        # One command per session in flight, as the gateway does.
        async with locks.setdefault(session_id, asyncio.Lock()):
            kind, event = "injected", data
            if core:
                kind, event = decided_by_core(last_token(message.subject), body, states)
            elif lean:
                kind, events = leans.decide(last_token(message.subject), body, fresh_context())
                event = events[-1]
            headers = {
                H_EXPECTED_SUBJECT: session_subject_filter(session_id),
                H_EXPECTED_SEQ: str(last.get(session_id, 0)),
            }
            ack = await js.publish(event_subject(kind, session_id), event, headers=headers)
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


def main(argv: list[str]) -> None:
    """Serve with the flags of the module's docstring; with `--gateway-runtime`, on the
    gateway's event loop and with its collector threshold (`services.runtime`)."""
    flags = argv[2:]
    loop_factory = None
    if "--gateway-runtime" in flags:
        collect_less_often()
        loop_factory = event_loop_factory("auto")
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(
            serve(argv[1], echo="--echo" in flags, core="--core" in flags, lean="--lean" in flags)
        )


if __name__ == "__main__":
    main(sys.argv)

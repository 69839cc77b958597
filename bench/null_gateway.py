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

`python -m bench.null_gateway URL --atomic` appends what SPEC §3.4 and §3.4.1 ask of a gateway
instead of one plain publish: each command's events (the two of an inject with a dedupe key,
`deduped` and `injected`, as the load's commands write them; the first of a session only
`injected`), each with a message id of its own, group-committed with the gateway's own
`GroupCommitter` into atomic batches, each session's first message carrying the expectation.
Still no decision, validation or session read. With `--lean` as well, the events are made by
`bench.lean_inject` from the request, as `--lean` makes them. `--atomic-pipelined` does what
`--atomic` does with up to four batches in flight at once instead of one.

`--gateway-runtime` runs any of these on the gateway's event loop (uvloop where installed)
with the gateway's collector threshold, so that `--core` and `--lean` differ from the
gateway only in what they do per command. Without it, the process is stock asyncio with
Python's default collector, as the null gateway baseline is.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any, cast

import nats
import orjson
from nats.aio.msg import Msg

from bench.lean_inject import LeanEvent, LeanSessions
from bench.traffic import decide_session, inject_payload
from contracts import commands as cmd
from contracts.state import SessionState
from contracts.subjects import event_subject, last_token, session_subject_filter
from core import decide
from services.adapters.append import SessionAppend, encode_event
from services.adapters.ids import fresh_context, new_uuid7
from services.adapters.jetstream import H_EXPECTED_SEQ, H_EXPECTED_SUBJECT
from services.adapters.memory import collect_less_often
from services.gateway.committer import GroupCommitter
from services.gateway.listener import QUEUE_GROUP
from services.runtime import event_loop_factory

COMMANDS = "reminders.v1.*"
#: How long the `--atomic` process waits for a batch's PubAck, as the gateway's default.
COMMIT_TIMEOUT_S = 5.0

#: How many batches `--atomic-pipelined` has in flight at most.
PIPELINED_BATCHES = 4

#: One command's events: what the append reads of each (kind, session, message id) and
#: their wire bytes, in order.
Made = tuple[tuple[LeanEvent, ...], tuple[bytes, ...]]


def decided_by_core(op: str, body: object, states: dict[str, SessionState]) -> Made:
    """The core's part of one command (`--core`): validate, decide against the session's
    state, keep the state the decision folded; the events and their bytes."""
    command, _ = cmd.parse_command(op, body)
    state = states.get(command.session_id) or SessionState()
    decision = decide(state, command, fresh_context())
    if not decision.events:
        # The error's code only: a reply may carry what the command sent.
        error = decision.reply.get("error") or {}
        raise RuntimeError(f"{op} decided nothing: {error.get('code')}")
    # As the gateway keeps it: the state the decision folded, not a second fold.
    states[command.session_id] = decision.state_after(state, state.stream_seq)
    events = tuple(LeanEvent(e.kind, e.session_id, e.event_id) for e in decision.events)
    return events, decision.encoded


class PipelinedCommitter(GroupCommitter):
    """The gateway's group commit with up to `PIPELINED_BATCHES` batches in flight at once
    instead of one (`--atomic-pipelined`): a measurement of whether waiting for each batch's
    PubAck before sending the next is what holds `--atomic`, or the server's commits are."""

    async def _run(self) -> None:
        slots = asyncio.Semaphore(PIPELINED_BATCHES)
        in_flight: set[asyncio.Task[None]] = set()

        def settled(task: asyncio.Task[None]) -> None:
            in_flight.discard(task)
            slots.release()

        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                await slots.acquire()
                group = self._take_group()
                if not group:
                    slots.release()
                    continue
                task = asyncio.create_task(self._commit(group))
                in_flight.add(task)
                task.add_done_callback(settled)


#: The kinds and wire bytes of one command's events.
Template = tuple[tuple[str, bytes], ...]


def inject_template(session_id: str = "null-template") -> tuple[Template, Template]:
    """The kinds and wire bytes of the events of the benchmark's load's injects
    (`traffic.inject_payload`) into `session_id`, as the gateway writes them: for a
    session's first command (`injected`), and for each later one, whose dedupe key the
    session already holds (`deduped`, `injected`)."""
    sessions = LeanSessions()
    made: list[Template] = []
    for number in range(2):
        decision = sessions.decided("inject", inject_payload(session_id, number), fresh_context())
        made.append(
            tuple(
                (event.kind, data)
                for event, data in zip(decision.events, decision.encoded, strict=True)
            )
        )
    return made[0], made[1]


def templated(session_id: str, first: bool, template: tuple[Template, Template]) -> Made:
    """The template's events as `session_id`'s next command (its `first` or a later one)
    writes them, each with a message id of its own (the stream drops a repeated one)."""
    chosen = template[0] if first else template[1]
    events = tuple(LeanEvent(kind, session_id, new_uuid7()) for kind, _ in chosen)
    return events, tuple(data for _, data in chosen)


async def serve(url: str, mode: frozenset[str] = frozenset()) -> None:
    """Answer commands until SIGTERM, as the module's docstring says of each flag in `mode`
    (`echo`, `core`, `lean`, `atomic`, `atomic-pipelined`)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    template = inject_template()
    # The baseline publishes the bytes of one `injected` event, whatever the command.
    baseline = encode_event(decide_session("null-template", [0])[0][0])
    fixed: Made = ((LeanEvent("injected", "", ""),), (baseline,))
    last: dict[str, int] = {}
    locks: dict[str, asyncio.Lock] = {}
    states: dict[str, SessionState] = {}
    leans = LeanSessions()
    tasks: set[asyncio.Task[None]] = set()
    committer: GroupCommitter | None = None
    if "atomic" in mode:
        committer = GroupCommitter(nc)
    if "atomic-pipelined" in mode:
        committer = PipelinedCommitter(nc)
    if committer is not None:
        committer.start()

    def made(op: str, body: dict[str, Any], session_id: str) -> Made:
        if "core" in mode:
            return decided_by_core(op, body, states)
        if "lean" in mode:
            decision = leans.decided(op, body, fresh_context())
            return decision.events, decision.encoded
        if committer is None:
            return fixed
        return templated(session_id, session_id not in last, template)

    async def stored(
        session_id: str, events: tuple[LeanEvent, ...], data: tuple[bytes, ...]
    ) -> int:
        expected = last.get(session_id, 0)
        if committer is not None:
            # The events stand in for the core's: the append reads their kind, session and id.
            append = SessionAppend(session_id, expected, cast(Any, events), encoded=data)
            return (await committer.commit(append, COMMIT_TIMEOUT_S))[-1]
        headers = {
            H_EXPECTED_SUBJECT: session_subject_filter(session_id),
            H_EXPECTED_SEQ: str(expected),
        }
        subject = event_subject(events[-1].kind, session_id)
        return (await js.publish(subject, data[-1], headers=headers)).seq

    async def handle(message: Msg) -> None:
        body = orjson.loads(message.data)
        session_id = str(body["session_id"])
        # One command per session in flight, as the gateway does.
        async with locks.setdefault(session_id, asyncio.Lock()):
            events, data = made(last_token(message.subject), body, session_id)
            seq = last[session_id] = await stored(session_id, events, data)
        await message.respond(orjson.dumps({"ok": True, "stream_seq": seq}))

    async def receive(message: Msg) -> None:
        if "echo" in mode:
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
    if committer is not None:
        await committer.stop()
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
        runner.run(serve(argv[1], frozenset(flag.removeprefix("--") for flag in flags)))


if __name__ == "__main__":
    main(sys.argv)

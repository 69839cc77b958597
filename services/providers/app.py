"""The providers service (SPEC §9): runtime events become `evaluate` commands.

A thin shell around the pure `core.providers`: consume a runtime event from `AGENT_EVENTS`,
read the session view from the projection with `min_seq` = the `session_seq` of this
service's own last `evaluate` reply for that session (so back-to-back events see each other's
effects), evaluate every subscribed provider, send one `evaluate` command whose `request_id`
is derived from the runtime event id (a redelivery is answered from the log), then ack.

The view is read straight from the projection bucket, not through the gateway's `state`
query: one direct get of the session's key (a missing key or a tombstone is an empty view).
Older than `min_seq`: waited for on the replica's one shared watch of the bucket (the
gateway's kind, `services.adapters.projection`: one consumer per process, not one per read,
and no polling) for up to 2 s, then redelivered after 0.5 s. A value is parsed once, its
sequences looked at until it is ready, and the model built from that parse once, without
the gateway's remembered replies (`core.providers.NOT_IN_VIEW`). The gateway then spends its
CPU on the `evaluate` alone.

Settling: an undecodable or invalid runtime event goes to the DLQ with its code (it never
stalls the consumer); the gateway away, busy or in conflict → redelivered after a delay; a
refusal for good (e.g. `invalid_request`) → DLQ with the gateway's code. The configuration
is loaded when the worker starts, before it is ready: a bad one refuses to start with
its code (HARN-RMD-007 for more than 8 enabled providers and rules).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from nats.aio.msg import Msg

from contracts.agent_events import RuntimeEvent, decode_runtime_event
from contracts.decode import DecodeError
from contracts.state import SessionState
from contracts.subjects import (
    AGENT_EVENT_SUBJECTS,
    EVALUATE_OP,
    last_token,
    session_token,
)
from core.providers import (
    NOT_IN_VIEW,
    ProvidersConfig,
    evaluate_event,
    evaluation_request_id,
)
from services.adapters.memory import collect_less_often
from services.adapters.plugins import load_providers_config
from services.adapters.projection import BucketReader, Projected, TooManyWaiting
from services.adapters.provisioning import DurableConsumer
from services.adapters.settings import Settings
from services.adapters.telemetry import (
    LabelledCount,
    labelled_count,
    meter_provider,
    tracer_provider,
)
from services.consumer import (
    ACK,
    EventConsumer,
    Request,
    Settlement,
    dead_letter,
    durable_consumer,
    retry,
    send_command,
)
from services.runtime import Runtime

log = logging.getLogger("reminders.providers")

DURABLE = "providers"
#: Sessions whose last evaluate reply is remembered (for `min_seq`).
REMEMBERED_SESSIONS = 100_000

#: How long a view older than `min_seq` is waited for before the event is redelivered.
VIEW_WAIT_S = 2.0
#: Views waited for at once on one replica (runtime events in flight are fewer: the
#: consumer's `max_ack_pending`).
MAX_WAITING_VIEWS = 1024
#: Per session: a session's runtime events are handled one after another, so one wait is
#: the norm; the spare places only cover a redelivery racing its first delivery.
MAX_WAITING_VIEWS_PER_SESSION = 4


class ViewReads(Protocol):
    """The read port of the projection bucket (`BucketReader` in production)."""

    async def until(
        self, token: str, ready: Callable[[Projected], bool], timeout_s: float
    ) -> tuple[Projected, bool]:
        """A key's value once `ready` (waited for up to `timeout_s`), and whether it is
        still not (stale); `TooManyWaiting` when no place to wait is free."""
        ...


class LastReplies:
    """`session_seq` of this replica's last `evaluate` reply per session (bounded LRU)."""

    def __init__(self, capacity: int = REMEMBERED_SESSIONS) -> None:
        self._capacity = capacity
        self._seqs: OrderedDict[str, int] = OrderedDict()

    def get(self, session_id: str) -> int | None:
        """The remembered session_seq, if any."""
        return self._seqs.get(session_id)

    def put(self, session_id: str, session_seq: int) -> None:
        """Remember a reply's session_seq (never going backwards)."""
        self._seqs[session_id] = max(session_seq, self._seqs.get(session_id, 0))
        self._seqs.move_to_end(session_id)
        while len(self._seqs) > self._capacity:
            self._seqs.popitem(last=False)


def evaluate_command(
    event: RuntimeEvent, view: SessionState, config: ProvidersConfig
) -> dict[str, Any] | None:
    """The `evaluate` command for one runtime event against a view (None: no provider is
    subscribed to its kind, so there is nothing to record)."""
    evaluations = evaluate_event(view, event, config)
    if not evaluations:
        return None
    command: dict[str, Any] = {
        "session_id": event.session_id,
        "request_id": evaluation_request_id(event.event_id),
        "turn": event.turn,
        "runtime_event_id": event.event_id,
        "view_seq": view.session_seq,
        "evaluations": [
            evaluation.model_dump(mode="json", exclude_defaults=True)
            | {"fired": evaluation.fired, "reason": evaluation.reason}
            for evaluation in evaluations
        ],
    }
    if event.agent_id is not None:
        command["agent_id"] = event.agent_id
    return command


async def read_view(
    session_id: str, reads: ViewReads, min_seq: int, wait_s: float = VIEW_WAIT_S
) -> tuple[SessionState, bool]:
    """The session view from the bucket once its `session_seq` reaches `min_seq` (waited
    for up to `wait_s`); and whether it is still older (stale). A missing key or a tombstone
    is an empty view; `ValueError` (a `ValidationError` too) for what the projector would
    not write."""

    def covers(record: Projected) -> bool:
        return record.session_seq >= min_seq

    record, stale = await reads.until(session_token(session_id), covers, wait_s)
    # What the providers' view leaves out is not even validated: most of a busy session's
    # value, and most of what building its model cost.
    view = record.session_state(leave_out=NOT_IN_VIEW)
    return view or SessionState(session_id=session_id), stale


async def handle_runtime_event(
    event: RuntimeEvent,
    config: ProvidersConfig,
    request: Request,
    reads: ViewReads,
    last_replies: LastReplies,
    count: Callable[[str, str], None] = lambda provider_id, reason: None,
    wait_s: float = VIEW_WAIT_S,
) -> Settlement:
    """Read the view, evaluate, send one `evaluate`, settle."""
    min_seq = last_replies.get(event.session_id) or 0
    try:
        view, stale = await read_view(event.session_id, reads, min_seq, wait_s)
    except TooManyWaiting:
        return retry(0.5)
    except ValueError as exc:  # a value the projector would not write: retried, never dropped
        log.warning("unreadable session view", extra={"error": type(exc).__name__})
        return retry()
    except Exception as exc:  # NATS away: retried by redelivery, never dropped
        log.warning("session view read failed", extra={"error": type(exc).__name__})
        return retry()
    if stale:
        return retry(0.5)  # the projection lags behind our own last effects: wait for it
    command = evaluate_command(event, view, config)
    if command is None:
        return ACK
    outcome, reply = await send_command(
        request, EVALUATE_OP, command, "the gateway refused the evaluation"
    )
    if outcome == ACK:
        last_replies.put(event.session_id, int(reply.get("session_seq", 0)))
        for evaluation in command["evaluations"]:
            count(evaluation["provider_id"], evaluation["reason"])
    return outcome


async def runtime_event_outcome(
    message: Msg, handle: Callable[[RuntimeEvent], Awaitable[Settlement]]
) -> Settlement:
    """Decode one delivered runtime event (poison → DLQ with its code) and handle it."""
    try:
        event = decode_runtime_event(message.data, subject=message.subject)
    except DecodeError as exc:
        return dead_letter(exc.code, exc.reason)
    return await handle(event)


def providers_consumers(settings: Settings) -> list[DurableConsumer]:
    """Its durable consumer of every runtime event, on AGENT_EVENTS."""
    return [
        durable_consumer(
            settings.agent_events_stream, DURABLE, AGENT_EVENT_SUBJECTS, max_ack_pending=256
        )
    ]


@dataclass
class Providers:
    """The providers worker: runtime events in, `evaluate` commands out."""

    settings: Settings
    name: str = DURABLE
    config: ProvidersConfig | None = None
    consumer: EventConsumer | None = None
    evaluations: LabelledCount | None = None
    last_replies: LastReplies = field(default_factory=LastReplies)
    reads: BucketReader | None = None

    def consumers(self) -> list[DurableConsumer]:
        """Its durable consumer on AGENT_EVENTS."""
        return providers_consumers(self.settings)

    async def start(self, runtime: Runtime) -> None:
        """Load the configuration (a bad one refuses to start, with its code: the process
        exits before it is ready), set up the consumer loop and the evaluation counter."""
        self.config = load_providers_config(self.settings.providers_config)
        log.info("providers configured", extra={"enabled": self.config.enabled_ids})
        tracer = tracer_provider("reminders-providers", self.settings).get_tracer(DURABLE)
        self.consumer = EventConsumer(self.consumers()[0], batch=256, tracer=tracer)
        meter = meter_provider("reminders-providers").get_meter(DURABLE)
        # Plain counts read at scrape time: the SDK's `Counter.add` cleaned, hashed and
        # locked its attributes once per evaluation, a sizeable part of an event's CPU.
        self.evaluations = labelled_count(
            meter,
            "reminders_provider_evaluations",
            "Provider evaluations by provider and reason (no ids)",
        )
        collect_less_often()

    async def run(self, runtime: Runtime, stop: asyncio.Event) -> None:
        """Consume runtime events until stopped."""
        assert self.consumer is not None and self.config is not None
        counter = self.evaluations
        config: ProvidersConfig = self.config

        request = runtime.command
        reads = self.reads = BucketReader(
            runtime.connection,
            self.settings.kv_bucket,
            max_waiting=MAX_WAITING_VIEWS,
            max_waiting_per_session=MAX_WAITING_VIEWS_PER_SESSION,
            keep_parsed=True,
        )

        def count(provider_id: str, reason: str) -> None:
            if counter is not None:
                counter.add(1, {"provider": provider_id, "reason": reason})

        async def handle(event: RuntimeEvent) -> Settlement:
            return await handle_runtime_event(
                event, config, request, reads, self.last_replies, count
            )

        # One lane per session token: sessions are evaluated concurrently, and one
        # session's runtime events in order (each sees the previous one's effects).
        await self.consumer.run_messages(
            runtime,
            lambda message: runtime_event_outcome(message, handle),
            stop,
            key_of=lambda message: last_token(message.subject),
        )

    async def stop(self, runtime: Runtime) -> None:
        """Stop the shared watch of the bucket (if a wait ever started it)."""
        if self.reads is not None:
            await self.reads.watch.stop()

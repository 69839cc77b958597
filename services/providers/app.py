"""The providers service (SPEC §9): runtime events become `evaluate` commands.

A thin shell around the pure `core.providers`: consume a runtime event from `AGENT_EVENTS`,
read the session view from the projection (`state` with `min_seq` = the `session_seq` of this
service's own last `evaluate` reply for that session, so back-to-back events see each other's
effects), evaluate every subscribed provider, send one `evaluate` command whose `request_id`
is derived from the runtime event id (a redelivery is answered from the log), then ack.

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
from typing import Any

import orjson
from nats.aio.msg import Msg
from opentelemetry.metrics import Counter
from pydantic import ValidationError

from contracts.agent_events import RuntimeEvent, decode_runtime_event
from contracts.decode import DecodeError
from contracts.state import SessionState
from contracts.subjects import AGENT_EVENT_SUBJECTS, EVALUATE_OP, command_subject, last_token
from core.providers import ProvidersConfig, evaluate_event, evaluation_request_id
from services.adapters.jetstream import DurableConsumer
from services.adapters.plugins import load_providers_config
from services.adapters.settings import Settings
from services.adapters.telemetry import inject_traceparent, meter_provider, tracer_provider
from services.consumer import ACK, EventConsumer, Outcome, dead_letter, retry
from services.runtime import Runtime

log = logging.getLogger("reminders.providers")

DURABLE = "providers"
#: Gateway answers that a later attempt may turn into an ok.
RETRYABLE = frozenset({"unavailable", "conflict", "rate_limited"})
#: Sessions whose last evaluate reply is remembered (for `min_seq`).
REMEMBERED_SESSIONS = 100_000
NS = 1_000_000_000

#: Sends one command to the gateway and returns its reply; raises when nobody answered.
Request = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


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


async def handle_runtime_event(
    event: RuntimeEvent,
    config: ProvidersConfig,
    request: Request,
    last_replies: LastReplies,
    count: Callable[[str, str], None] = lambda provider_id, reason: None,
) -> Outcome:
    """Read the view, evaluate, send one `evaluate`, settle."""
    query: dict[str, Any] = {"session_id": event.session_id, "timeout_ms": 2000}
    min_seq = last_replies.get(event.session_id)
    if min_seq is not None:
        query["min_seq"] = min_seq
    try:
        answer = await request("state", query)
    except Exception as exc:  # gateway away: retried by redelivery, never dropped
        log.warning("state query failed", extra={"error": type(exc).__name__})
        return retry()
    if not answer.get("ok"):
        return retry()
    try:
        view = SessionState.model_validate(answer.get("state") or {})
    except ValidationError:
        return retry()
    if answer.get("stale") and view.session_seq < (min_seq or 0):
        return retry(0.5)  # the projection lags behind our own last effects: wait for it
    command = evaluate_command(event, view, config)
    if command is None:
        return ACK
    try:
        reply = await request(EVALUATE_OP, command)
    except Exception as exc:
        log.warning("evaluate failed", extra={"error": type(exc).__name__})
        return retry()
    if reply.get("ok"):
        last_replies.put(event.session_id, int(reply.get("session_seq", 0)))
        for evaluation in command["evaluations"]:
            count(evaluation["provider_id"], evaluation["reason"])
        return ACK
    code = str(reply.get("error", {}).get("code", "invalid_reply"))
    if code in RETRYABLE:
        return retry()
    return dead_letter(code, "the gateway refused the evaluation")


async def runtime_event_outcome(
    message: Msg, handle: Callable[[RuntimeEvent], Awaitable[Outcome]]
) -> Outcome:
    """Decode one delivered runtime event (poison → DLQ with its code) and handle it."""
    try:
        event = decode_runtime_event(message.data, subject=message.subject)
    except DecodeError as exc:
        return dead_letter(exc.code, exc.reason)
    return await handle(event)


def providers_consumer(settings: Settings) -> DurableConsumer:
    """The durable consumer of every runtime event."""
    return DurableConsumer(
        settings.agent_events_stream,
        {
            "durable_name": DURABLE,
            "filter_subject": AGENT_EVENT_SUBJECTS,
            "ack_policy": "explicit",
            "deliver_policy": "all",
            "ack_wait": 30 * NS,
            "max_ack_pending": 256,
            "max_deliver": -1,
        },
    )


@dataclass
class Providers:
    """The providers worker: runtime events in, `evaluate` commands out."""

    settings: Settings
    name: str = DURABLE
    config: ProvidersConfig | None = None
    consumer: EventConsumer | None = None
    evaluations: Counter | None = None
    last_replies: LastReplies = field(default_factory=LastReplies)

    def consumers(self) -> list[DurableConsumer]:
        """Its durable consumer on AGENT_EVENTS."""
        return [providers_consumer(self.settings)]

    async def start(self, runtime: Runtime) -> None:
        """Load the configuration (a bad one refuses to start, with its code: the process
        exits before it is ready), set up the consumer loop and the evaluation counter."""
        self.config = load_providers_config(self.settings.providers_config)
        log.info("providers configured", extra={"enabled": self.config.enabled_ids})
        tracer = tracer_provider("reminders-providers", self.settings).get_tracer(DURABLE)
        self.consumer = EventConsumer(self.consumers()[0], batch=256, tracer=tracer)
        meter = meter_provider("reminders-providers").get_meter(DURABLE)
        self.evaluations = meter.create_counter(
            "reminders_provider_evaluations",
            description="Provider evaluations by provider and reason (no ids)",
        )

    async def run(self, runtime: Runtime, stop: asyncio.Event) -> None:
        """Consume runtime events until stopped."""
        assert self.consumer is not None and self.config is not None
        counter = self.evaluations
        config: ProvidersConfig = self.config

        async def request(op: str, command: dict[str, Any]) -> dict[str, Any]:
            response = await runtime.connection.request(
                command_subject(op),
                orjson.dumps(command),
                timeout=self.settings.request_timeout_s,
                headers=inject_traceparent() or None,
            )
            reply: dict[str, Any] = orjson.loads(response.data)
            return reply

        def count(provider_id: str, reason: str) -> None:
            if counter is not None:
                counter.add(1, {"provider": provider_id, "reason": reason})

        async def handle(event: RuntimeEvent) -> Outcome:
            return await handle_runtime_event(event, config, request, self.last_replies, count)

        # One lane per session token: sessions are evaluated concurrently, and one
        # session's runtime events in order (each sees the previous one's effects).
        await self.consumer.run_messages(
            runtime,
            lambda message: runtime_event_outcome(message, handle),
            stop,
            key_of=lambda message: last_token(message.subject),
        )

    async def stop(self, runtime: Runtime) -> None:
        """Nothing of its own to release."""

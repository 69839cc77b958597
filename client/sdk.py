"""`ReminderClient`: what a host or producer uses to talk to the service in a few lines.

async with await ReminderClient.connect("nats://127.0.0.1:4222") as client:
    await client.inject("session-1", "Tests pass now.", ttl_turns=1)
    envelope = (await client.render("session-1", turn=0))["envelope"]
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import nats
import orjson
from nats.aio.client import DEFAULT_RECONNECT_TIME_WAIT, Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from contracts.agent_events import AGENT_EVENT_SCHEMA_V1, RuntimeEvent
from contracts.commands import PendingInjectionsQuery, StateQuery
from contracts.errors import ErrorCode, ReminderError
from contracts.tenants import (
    DEFAULT_TENANT,
    scoped_session_id,
    tenant_acp_subject,
    tenant_agent_event_subject,
    tenant_command_subject,
)
from services.adapters.failover import LeaveStaleServer
from services.adapters.jetstream import header_block_bytes
from services.adapters.settings import DEFAULT_MAX_OUTSTANDING_PINGS, DEFAULT_PING_INTERVAL_S
from services.adapters.telemetry import inject_traceparent

#: Reads: sending one again can change nothing.
READ_OPS = frozenset({StateQuery.op, PendingInjectionsQuery.op})
#: How often a request waiting for its reply looks whether the connection was replaced.
RECONNECT_CHECK_S = 0.1
#: After "no responders" (no gateway subscribed at that moment: one is moving to another
#: node, or restarting), a read or a command with a `request_id` is sent again this soon.
NO_RESPONDERS_RETRY_S = 0.25
#: A request unanswered this long is sent again: the gateway's deadline (5 s by default,
#: `Settings.request_timeout_s`) and a second for the way there and back.
RESEND_AFTER_S = 6.0
#: Once a request went unanswered that long, it is sent again every this fraction of it while
#: silence goes on: the resend itself may be lost, because for a few seconds after a node
#: froze the others still route part of the traffic for the gateway into it (its old
#: subscription, until their routes to it are found stale), and a second wait as long as
#: the first would outlast most clients' timeout.
RESEND_AGAIN_FRACTION = 1 / 3


class ReminderClient:
    """Async request/reply client for `reminders.v1.<op>` (SPEC §4)."""

    def __init__(
        self,
        nc: Client,
        timeout_s: float = 10.0,
        *,
        owns_connection: bool = False,
        tenant: str = DEFAULT_TENANT,
        resend_after_s: float | None = RESEND_AFTER_S,
        wait_for_gateway: bool = True,
    ):
        self._nc = nc
        self._timeout_s = timeout_s
        # A gateway answers every command it received within its deadline: silence past it
        # means the request or its reply was lost on the way (a node froze on the path).
        self._resend_after_s = resend_after_s
        # "No responders" sent again until the timeout (a gateway moving or restarting), or
        # answered `unavailable` at once: what a host that carries on without the ledger wants.
        self._wait_for_gateway = wait_for_gateway
        self._owns_connection = owns_connection
        # Tenants (SPEC §10.1): a host of tenant T talks on T's subjects; its credential
        # allows no others, and its session ids are its own (`default`: the plain subjects).
        self._tenant = tenant

    @classmethod
    async def connect(
        cls, url: str, timeout_s: float = 10.0, *, tenant: str = DEFAULT_TENANT, **options: Any
    ) -> ReminderClient:
        """Open a connection of its own (closed with the client).

        `options` go to `nats.connect` (credentials, TLS). With a `user`, replies come back
        under that user's private inbox `_INBOX.<user>` unless `inbox_prefix` says otherwise.
        The connection pings its server every second and leaves it, for another server of
        `url`'s list, after two unanswered pings (`ping_interval`, `max_outstanding_pings`),
        trying the server it left last (`reconnect_to_server_handler`: `LeaveStaleServer`).
        """
        if options.get("user") and "inbox_prefix" not in options:
            options["inbox_prefix"] = f"_INBOX.{options['user']}"
        options.setdefault("ping_interval", DEFAULT_PING_INTERVAL_S)
        options.setdefault("max_outstanding_pings", DEFAULT_MAX_OUTSTANDING_PINGS)
        failover = options.setdefault(
            "reconnect_to_server_handler",
            LeaveStaleServer(options.get("reconnect_time_wait", DEFAULT_RECONNECT_TIME_WAIT)),
        )
        nc = await nats.connect(url, name="reminders-client", max_reconnect_attempts=3, **options)
        if isinstance(failover, LeaveStaleServer):
            failover.connected(nc)
        return cls(nc, timeout_s, owns_connection=True, tenant=tenant)

    def acp_subject(self, session_id: str) -> str:
        """Where the observer sends this tenant's session's ACP notifications (SPEC §8)."""
        return tenant_acp_subject(scoped_session_id(self._tenant, session_id))[0]

    @property
    def connection(self) -> Client:
        """The nats-py connection the client talks through."""
        return self._nc

    async def close(self) -> None:
        """Close the connection if this client opened it."""
        if self._owns_connection:
            await self._nc.drain()

    async def __aenter__(self) -> ReminderClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def request(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Send one command; returns the reply (`ok` true or false) as a dict.

        A command larger than the server accepts (`max_payload`, headers included) raises
        `ReminderError` `too_large` before anything is sent.

        A read, or a command with a `request_id`, is sent again when the request or its reply
        may have been lost on the way: at once when the connection was replaced while the
        reply was awaited (its server stalled or went away, and nats-py reconnected to
        another); after `resend_after_s` of silence counted from the first send, whatever
        was sent in between (a node between here and the gateway froze with the request
        inside; the gateway answers within its deadline whatever it received, but may itself
        still have been on that node when the connection moved), and from then on every
        `RESEND_AGAIN_FRACTION` of it while silence goes on; and `NO_RESPONDERS_RETRY_S`
        after "no responders" (no gateway was subscribed: one is moving to another node, or
        restarting; not with `wait_for_gateway` False). The first reply to any attempt is the
        answer; the gateway answers a repeated `request_id` with the first reply, so nothing
        is applied twice. A command without a `request_id` is never sent twice. All within
        `timeout_s`.
        """
        data = orjson.dumps(payload)
        headers = inject_traceparent() or None
        self._check_size(op, data, headers)
        subject = tenant_command_subject(self._tenant, op)
        loop = asyncio.get_running_loop()
        pace = _Resends(
            resend=op in READ_OPS or bool(payload.get("request_id")),
            until=loop.time() + self._timeout_s,
            silent_after_s=self._resend_after_s,
            paced_from=loop.time(),
        )
        attempts: list[asyncio.Future[Msg]] = []
        try:
            while True:
                reconnects, sent = self._nc.stats["reconnects"], loop.time()
                attempts.append(
                    asyncio.ensure_future(
                        self._nc.request(subject, data, timeout=pace.until - sent, headers=headers)
                    )
                )
                reply = await self._first_reply(attempts, reconnects, pace)
                if reply is not None:
                    break
        except (NoRespondersError, NatsTimeoutError) as exc:
            raise ReminderError(
                ErrorCode.UNAVAILABLE, f"no gateway answered {op}: {type(exc).__name__}"
            ) from exc
        finally:
            for attempt in attempts:
                attempt.cancel()
        result: dict[str, Any] = orjson.loads(reply.data)
        return result

    async def _first_reply(
        self, attempts: list[asyncio.Future[Msg]], reconnects: int, pace: _Resends
    ) -> Msg | None:
        """The first reply to any of `attempts`; None when it is time to send again (see
        `_Resends.due`). The last attempt's failure (no responders, timeout) is raised
        unless it may be sent again; an earlier one's is left to the later attempts."""
        loop = asyncio.get_running_loop()
        while True:
            done, _ = await asyncio.wait(
                attempts, timeout=RECONNECT_CHECK_S, return_when=asyncio.FIRST_COMPLETED
            )
            last, nobody_listened = attempts[-1], False
            for attempt in done:
                failure = attempt.exception()
                if failure is None:
                    return attempt.result()
                attempts.remove(attempt)
                if attempt is last:
                    nobody_listened = (
                        self._wait_for_gateway
                        and isinstance(failure, NoRespondersError)
                        and pace.may_resend(loop.time() + NO_RESPONDERS_RETRY_S)
                    )
                    if not nobody_listened:
                        raise failure
            if nobody_listened:
                await asyncio.sleep(NO_RESPONDERS_RETRY_S)
                return None
            replaced = self._nc.stats["reconnects"] != reconnects and self._nc.is_connected
            if pace.due(loop.time(), replaced):
                return None

    def _check_size(self, op: str, data: bytes, headers: dict[str, str] | None) -> None:
        limit = self._nc.max_payload
        if not limit:  # not connected yet: the server has not told us its limit
            return
        size = len(data) + header_block_bytes(headers)
        if size > limit:
            raise ReminderError(
                ErrorCode.TOO_LARGE,
                f"{op} command is {size} bytes; the NATS server accepts at most {limit}",
                {"size_bytes": size, "max_payload": limit},
            )

    async def call(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Send one command; raises `ReminderError` when the reply is not ok."""
        reply = await self.request(op, payload)
        if not reply.get("ok"):
            error = reply.get("error") or {}
            raise ReminderError(
                ErrorCode(error.get("code", "invalid_request")),
                str(error.get("message", "")),
                dict(error.get("details") or {}),
            )
        return reply

    @staticmethod
    def _base(session_id: str, request_id: str | None, **extra: Any) -> dict[str, Any]:
        payload: dict[str, Any] = {"session_id": session_id}
        if request_id is not None:
            payload["request_id"] = request_id
        payload.update({key: value for key, value in extra.items() if value is not None})
        return payload

    async def inject(
        self,
        session_id: str,
        body: str,
        *,
        mode: str | None = None,
        request_id: str | None = None,
        agent_id: str | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        """Add a reminder (`spec` holds the other ReminderSpec fields)."""
        payload = self._base(session_id, request_id, mode=mode, agent_id=agent_id)
        payload["reminder"] = {"body": body, **spec}
        return await self.call("inject", payload)

    async def clear(
        self,
        session_id: str,
        *,
        id: str | None = None,
        tag: str | None = None,
        dedupe_key: str | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """Expire live reminders matching every given selector."""
        selector = {k: v for k, v in {"id": id, "tag": tag, "dedupe_key": dedupe_key}.items() if v}
        return await self.call("clear", self._base(session_id, request_id, selector=selector))

    async def checkpoint(
        self, session_id: str, seam: str, turn: int, *, request_id: str | None = None
    ) -> dict[str, Any]:
        """Drain queued reminders at a seam."""
        return await self.call(
            "checkpoint", self._base(session_id, request_id, seam=seam, turn=turn)
        )

    async def revoke(
        self, session_id: str, reminder_id: str, *, request_id: str | None = None
    ) -> dict[str, Any]:
        """Withdraw a queued reminder."""
        return await self.call(
            "revoke", self._base(session_id, request_id, reminder_id=reminder_id)
        )

    async def render(
        self,
        session_id: str,
        turn: int,
        *,
        format: str | None = None,
        user_text: str | None = None,
        max_tokens: int | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """Build the envelope for a prompt; `max_tokens` is the render budget (SPEC §12.1),
        sent only when set (else the session default applies)."""
        return await self.call(
            "render",
            self._base(
                session_id,
                request_id,
                turn=turn,
                format=format,
                user_text=user_text,
                max_tokens=max_tokens,
            ),
        )

    async def sanitize(
        self,
        session_id: str,
        text: str,
        *,
        turn: int,
        tool_name: str | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """Neutralise forged directive tags in a tool's output (SPEC §12.5); the reply holds
        `text` (escaped where forged) and `neutralized` (how many tags)."""
        return await self.call(
            "sanitize",
            self._base(session_id, request_id, text=text, turn=turn, tool_name=tool_name),
        )

    async def mute(
        self,
        session_id: str,
        selector: dict[str, Any],
        *,
        until_turn: int | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """Stop rendering what `selector` matches (SPEC §12.2); the reply holds `mute_id`."""
        return await self.call(
            "mute", self._base(session_id, request_id, selector=selector, until_turn=until_turn)
        )

    async def unmute(
        self, session_id: str, mute_id: str, *, request_id: str | None = None
    ) -> dict[str, Any]:
        """End a mute."""
        return await self.call("unmute", self._base(session_id, request_id, mute_id=mute_id))

    async def acknowledge(
        self,
        session_id: str,
        reminder_id: str,
        *,
        turn: int,
        outcome: str,
        by: str | None = None,
        note: str | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """Record what a delivered reminder did: `acted`, `ignored` or `dismissed` (§12.3)."""
        return await self.call(
            "acknowledge",
            self._base(
                session_id,
                request_id,
                reminder_id=reminder_id,
                turn=turn,
                outcome=outcome,
                by=by,
                note=note,
            ),
        )

    async def end_turn(
        self, session_id: str, turn: int, *, request_id: str | None = None
    ) -> dict[str, Any]:
        """The post-turn boundary."""
        return await self.call("end_turn", self._base(session_id, request_id, turn=turn))

    async def compact(
        self, session_id: str, turn: int, *, request_id: str | None = None
    ) -> dict[str, Any]:
        """The host compacted its transcript."""
        return await self.call("compact", self._base(session_id, request_id, turn=turn))

    async def handoff(
        self,
        session_id: str,
        child_session_id: str,
        *,
        sub_agent_id: str | None = None,
        child_turn: int | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """Hand propagating reminders to a sub-agent session."""
        return await self.call(
            "handoff",
            self._base(
                session_id,
                request_id,
                child_session_id=child_session_id,
                sub_agent_id=sub_agent_id,
                child_turn=child_turn,
            ),
        )

    async def publish_runtime_event(
        self,
        session_id: str,
        kind: str,
        payload: dict[str, Any],
        *,
        turn: int,
        event_id: str | None = None,
        agent_id: str | None = None,
        occurred_at: str | None = None,
    ) -> RuntimeEvent:
        """Publish one runtime event for the providers service (SPEC §9.1) and wait for the
        stream's ack. It is validated here first (a bad one raises `ReminderError`
        `invalid_request`), published on `agent.events.<kind>.<session_token>` with
        `Nats-Msg-Id` = `event_id`, so a retried publish is stored once."""
        import uuid
        from datetime import UTC, datetime

        from pydantic import ValidationError

        raw = {
            "schema": AGENT_EVENT_SCHEMA_V1,
            "event_id": event_id or str(uuid.uuid4()),
            "kind": kind,
            "session_id": session_id,
            "agent_id": agent_id,
            "turn": turn,
            "occurred_at": occurred_at
            or datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "payload": payload,
        }
        try:
            event = RuntimeEvent.model_validate(raw)
        except ValidationError as exc:
            places = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
            raise ReminderError(
                ErrorCode.INVALID_REQUEST,
                f"invalid runtime event at: {', '.join(places)}",
                {"fields": places},
            ) from None
        headers = {"Nats-Msg-Id": event.event_id, **inject_traceparent()}
        try:
            await self._nc.jetstream().publish(
                tenant_agent_event_subject(self._tenant, event.kind, event.session_id),
                orjson.dumps(event.to_wire()),
                timeout=self._timeout_s,
                headers=headers,
            )
        except (NoRespondersError, NatsTimeoutError) as exc:
            raise ReminderError(
                ErrorCode.UNAVAILABLE, f"AGENT_EVENTS did not ack: {type(exc).__name__}"
            ) from exc
        return event


@dataclass
class _Resends:
    """When one request is sent again: only a read or a command with a `request_id`
    (`resend`), only before `until`, on silence `silent_after_s` from `paced_from` and
    then every `RESEND_AGAIN_FRACTION` of it."""

    resend: bool
    until: float
    silent_after_s: float | None
    paced_from: float
    #: Whether silence already made it send again once (then it waits less for the next).
    resent_on_silence: bool = False

    def may_resend(self, at: float) -> bool:
        """Whether the request may be sent again at `at`."""
        return self.resend and at < self.until

    def due(self, now: float, replaced: bool) -> bool:
        """Whether to send again now: the connection was `replaced` since the last send, or
        silence lasted `silent_after_s` since the first send (a `RESEND_AGAIN_FRACTION` of
        it since the last send on silence). A send for any other reason does not postpone
        the next one on silence: the one it replaces may have gone to a gateway that was
        still on a node that froze."""
        if not self.may_resend(now):
            return False
        if self.silent_after_s is not None:
            wait_s = self.silent_after_s
            if self.resent_on_silence:
                wait_s *= RESEND_AGAIN_FRACTION
            if now - self.paced_from >= wait_s:
                self.paced_from, self.resent_on_silence = now, True
                return True
        return replaced

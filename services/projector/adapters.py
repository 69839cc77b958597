"""The projector's adapters: nats-py messages and the dead-letter stream (the bucket is
`services.adapters.records.KvSessionStore`)."""

from __future__ import annotations

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from contracts.subjects import token_subject_filter
from services.adapters.deadletter import send_to_dlq
from services.adapters.session_read import leader_first_after, leader_messages_between
from services.projector.ports import Delivery, LoggedEvent


class NatsDelivery:
    """A JetStream message seen through the `Delivery` protocol."""

    def __init__(self, message: Msg) -> None:
        self._message = message
        self.subject = message.subject
        self.data = message.data
        metadata = message.metadata
        self.stream_seq = int(metadata.sequence.stream)
        self.num_delivered = int(metadata.num_delivered)
        self.num_pending = int(metadata.num_pending)
        self.headers = message.headers

    async def ack(self) -> None:
        """Acknowledge."""
        await self._message.ack()

    async def nak(self, delay_s: float) -> None:
        """Redeliver after `delay_s`."""
        await self._message.nak(delay=delay_s)


class LeaderSessionLog:
    """The event stream, asked through its leader (the projector's `SessionLog`)."""

    def __init__(self, nc: Client, stream: str) -> None:
        self._nc = nc
        self._stream = stream

    async def first_after(self, token: str, after_seq: int) -> int | None:
        """The stream seq of the session's first event after `after_seq` (None: none)."""
        return await leader_first_after(
            self._nc, self._stream, token_subject_filter(token), after_seq
        )

    async def events_between(
        self, token: str, after_seq: int, before_seq: int, limit: int
    ) -> list[LoggedEvent]:
        """The session's events after `after_seq` and before `before_seq`, from the leader."""
        found = await leader_messages_between(
            self._nc, self._stream, token_subject_filter(token), after_seq, before_seq, limit
        )
        return [LoggedEvent(raw.subject, raw.data, raw.stream_seq) for raw in found]


class JetStreamDeadLetters:
    """Copies poison messages to `REMINDERS_DLQ`."""

    def __init__(self, js: JetStreamContext, service: str = "projector") -> None:
        self._js = js
        self._service = service
        self.sent = 0

    async def send(self, delivery: Delivery, token: str, code: str, reason: str) -> None:
        """Publish the copy and wait for the stream's ack."""
        await send_to_dlq(
            self._js,
            service=self._service,
            token=token,
            subject=delivery.subject,
            stream_seq=delivery.stream_seq,
            data=delivery.data,
            code=code,
            reason=reason,
        )
        self.sent += 1

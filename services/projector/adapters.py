"""The projector's adapters: nats-py messages, the KV bucket, the dead-letter stream."""

from __future__ import annotations

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from services.adapters.deadletter import send_to_dlq
from services.projector.apply import Delivery, StaleRevision


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


class KvSessionStore:
    """The projection bucket, with compare-and-set writes on the revision."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def read(self, token: str) -> tuple[bytes | None, int | None]:
        """Value and revision; a deleted key reads as empty with its revision."""
        try:
            entry = await self._kv.get(token)
        except nats.js.errors.KeyNotFoundError:
            return None, None
        except nats.js.errors.KeyDeletedError as deleted:
            return None, deleted.entry.revision
        return entry.value, entry.revision

    async def write(self, token: str, value: bytes, revision: int | None) -> int:
        """Create when there was no revision, else update on exactly that revision."""
        try:
            if revision is None:
                return int(await self._kv.create(token, value))
            return int(await self._kv.update(token, value, last=revision))
        except nats.js.errors.KeyWrongLastSequenceError as exc:
            raise StaleRevision(token) from exc


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

"""The dead-letter stream (SPEC §6.4): JetStream has none, so workers copy poison here.

A copy keeps the original bytes and says, in headers, where it came from and why it was
refused; the error text never quotes the message itself.
"""

from __future__ import annotations

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from contracts.subjects import dlq_subject, last_token

H_ERROR_CODE = "Reminders-Error-Code"
H_ERROR = "Reminders-Error"
H_ORIGINAL_SUBJECT = "Reminders-Original-Subject"
H_STREAM_SEQ = "Reminders-Stream-Seq"
H_SERVICE = "Reminders-Service"


async def send_to_dlq(
    js: JetStreamContext,
    *,
    service: str,
    token: str,
    subject: str,
    stream_seq: int,
    data: bytes,
    code: str,
    reason: str,
) -> None:
    """Publish the poison copy on `reminders.dlq.<service>.<token>`; waits for the ack."""
    await js.publish(
        dlq_subject(service, token),
        data,
        headers={
            H_ERROR_CODE: code,
            H_ERROR: reason[:500],
            H_ORIGINAL_SUBJECT: subject,
            H_STREAM_SEQ: str(stream_seq),
            H_SERVICE: service,
        },
    )


async def dead_letter_message(
    js: JetStreamContext, service: str, message: Msg, code: str, reason: str
) -> None:
    """Copy a delivered JetStream message to the DLQ, taking its place from the message."""
    await send_to_dlq(
        js,
        service=service,
        token=last_token(message.subject),
        subject=message.subject,
        stream_seq=int(message.metadata.sequence.stream),
        data=message.data,
        code=code,
        reason=reason,
    )

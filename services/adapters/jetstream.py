"""The JetStream API's wire, shared by the adapters that speak it: its error replies and the
headers of atomic appends. What each job does with them is in its own module:
`provisioning` (streams, the bucket, durable consumers), `append` (the atomic append and
what its failures mean) and `session_read` (reading one session back).

nats-py has no atomic-batch helper, so batches are built from the `Nats-Batch-*` headers;
expectation headers are sent by name because nats-py has no constant for the `-Subject` one.
`send_atomic_batch` sends one; the session appends and the projection bucket's writes both use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson
from nats.aio.client import Client

H_MSG_ID = "Nats-Msg-Id"
H_BATCH_ID = "Nats-Batch-Id"
H_BATCH_SEQ = "Nats-Batch-Sequence"
H_BATCH_COMMIT = "Nats-Batch-Commit"
H_EXPECTED_SEQ = "Nats-Expected-Last-Subject-Sequence"
H_EXPECTED_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"


def header_block_bytes(headers: dict[str, str] | None) -> int:
    """Bytes a message's headers take on the wire (the server counts them toward
    `max_payload` with the body): the `NATS/1.0` block, one `Key: Value` line each; 0 for
    none."""
    if not headers:
        return 0
    return len(b"NATS/1.0\r\n\r\n") + sum(
        len(f"{key}: {value}\r\n".encode()) for key, value in headers.items()
    )


class JetStreamApiError(RuntimeError):
    """A JetStream API or publish error, with the server's err_code."""

    def __init__(self, error: dict[str, Any]) -> None:
        self.code = int(error.get("code", 0))
        self.err_code = int(error.get("err_code", 0))
        self.description = str(error.get("description", ""))
        super().__init__(f"{self.code}/{self.err_code}: {self.description}")


#: One message of an atomic batch: subject, body and its own headers (the batch's are added).
BatchMessage = tuple[str, bytes, dict[str, str]]


async def send_atomic_batch(
    nc: Client,
    messages: Sequence[BatchMessage],
    batch_id: str,
    timeout_s: float,
    before_commit: Callable[[], None] | None = None,
) -> int:
    """Publish `messages` as one JetStream atomic batch (each with the batch id and its
    position; the last, with the commit, as a request for the batch's PubAck) and return the
    stream seq of the last one. `before_commit` runs once every other message is in the
    client's buffer.

    Raises `JetStreamApiError` when the server refuses the batch (nothing was stored), or
    nats-py's error (timeout, no responders, connection trouble), after which it is unknown
    whether the batch was stored."""
    if not messages:
        raise ValueError("an atomic batch needs at least one message")
    last = len(messages)
    for position, (subject, data, headers) in enumerate(messages, start=1):
        headers = {**headers, H_BATCH_ID: batch_id, H_BATCH_SEQ: str(position)}
        if position < last:
            await nc.publish(subject, data, headers=headers)
            continue
        headers[H_BATCH_COMMIT] = "1"
        if before_commit is not None:
            before_commit()
        return await publish_stored(nc, subject, data, headers, timeout_s)
    raise AssertionError("unreachable")


async def publish_stored(
    nc: Client, subject: str, data: bytes, headers: dict[str, str], timeout_s: float
) -> int:
    """Publish one message to a stream and return its stream seq from the PubAck. Raises
    `JetStreamApiError` when the server refuses it (a failed expectation: nothing stored),
    or nats-py's error, after which it is unknown whether it was stored."""
    reply = await nc.request(subject, data, timeout=timeout_s, headers=headers)
    ack = orjson.loads(reply.data)
    if "error" in ack:
        raise JetStreamApiError(ack["error"])
    return int(ack["seq"])

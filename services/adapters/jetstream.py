"""The JetStream API's wire, shared by the adapters that speak it: its error replies and the
headers of atomic appends. What each job does with them is in its own module:
`provisioning` (streams, the bucket, durable consumers), `append` (the atomic append and
what its failures mean) and `session_read` (reading one session back).

nats-py has no atomic-batch helper, so batches are built from the `Nats-Batch-*` headers;
expectation headers are sent by name because nats-py has no constant for the `-Subject` one.
"""

from __future__ import annotations

from typing import Any

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

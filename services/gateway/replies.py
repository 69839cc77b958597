"""The gateway's coded error replies (SPEC §2.2), made in one place."""

from __future__ import annotations

from typing import Any

from contracts.errors import ErrorCode
from contracts.replies import ErrorReply

#: What an `unavailable` answer tells the caller to wait before retrying.
RETRY_AFTER_MS = 1000


def error_reply(code: ErrorCode, message: str, **details: Any) -> dict[str, Any]:
    """The wire form of a coded error; `details` go into `error.details` as given."""
    return ErrorReply.model_validate(
        {"error": {"code": code, "message": message, "details": details}}
    ).to_wire()


#: What an overloaded gateway tells the caller to wait: long enough for its queue to drain.
OVERLOAD_RETRY_AFTER_MS = 200


def overloaded_reply() -> dict[str, Any]:
    """`unavailable` with `retry_after_ms` and `overloaded: true`: the gateway is serving as
    many commands as it may, so this one was not taken (nothing was decided or appended)."""
    return error_reply(
        ErrorCode.UNAVAILABLE,
        "the gateway is at capacity; retry after retry_after_ms",
        retry_after_ms=OVERLOAD_RETRY_AFTER_MS,
        overloaded=True,
    )


def unavailable_reply(maybe_applied: bool, retry_after_ms: int = RETRY_AFTER_MS) -> dict[str, Any]:
    """`unavailable` with `retry_after_ms`: the log could not take the command in time.

    With `maybe_applied` the command was sent and its outcome is unknown (it may still be
    stored): the caller retries with the same `request_id` and gets the first reply if it
    was."""
    details: dict[str, Any] = {"retry_after_ms": retry_after_ms}
    if maybe_applied:
        details["maybe_applied"] = True
    return error_reply(
        ErrorCode.UNAVAILABLE,
        "the event log is not available right now (e.g. a leader election); retry "
        "after retry_after_ms"
        + (" with the same request_id: it may yet be applied" if maybe_applied else ""),
        **details,
    )

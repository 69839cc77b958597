"""A query the log cannot answer in time (a leader election, a paused node) gets the coded
`unavailable` with `retry_after_ms` and a warning; nothing is logged as a broken command."""

from __future__ import annotations

import asyncio
import logging

import pytest
from nats.js.errors import ServiceUnavailableError

from services.adapters.jetstream import JetStreamApiError
from services.adapters.settings import Settings
from services.gateway.service import CommandService


class UnavailableReader:
    """The projection reader while the stream cannot answer: every read raises `failure`."""

    def __init__(self, failure: BaseException) -> None:
        self.failure = failure

    async def state_reply(self, *_: object) -> dict[str, object]:
        raise self.failure

    async def session_state(self, *_: object) -> tuple[object, bool]:
        raise self.failure


@pytest.mark.parametrize(
    "failure",
    [
        JetStreamApiError(
            {"code": 503, "err_code": 10008, "description": "JetStream temporarily unavailable"}
        ),
        ServiceUnavailableError(),
        TimeoutError(),
    ],
    ids=["jetstream-10008", "service-unavailable", "timeout"],
)
@pytest.mark.parametrize("op", ["state", "pending_injections"])
def test_a_query_the_log_cannot_answer_is_unavailable_with_a_retry_after(
    failure: BaseException, op: str, caplog: pytest.LogCaptureFixture
) -> None:
    service = CommandService(object(), Settings.from_env({}), object())  # type: ignore[arg-type]
    service._reader = UnavailableReader(failure)  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING):
        reply = asyncio.run(service.handle(op, b'{"session_id":"s1"}'))
    assert reply["ok"] is False
    assert reply["error"]["code"] == "unavailable"
    assert reply["error"]["details"]["retry_after_ms"] > 0
    messages = [record.getMessage() for record in caplog.records]
    assert "log unavailable for a query" in messages
    assert "command failed" not in messages
    assert all(record.exc_info is None for record in caplog.records)

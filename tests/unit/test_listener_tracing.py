"""Without a span exporter the gateway makes no span per command, yet a caller's trace
context still reaches the events it appends (their `traceparent` header), and a command
sent outside any trace appends events without one."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from nats.aio.msg import Msg

from core.size import HEADER_ALLOWANCE_BYTES, TRACE_HEADERS_MAX_BYTES
from services.adapters.telemetry import inject_traceparent
from services.gateway.listener import CommandListener
from services.gateway.service import CommandService

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class RecordingService:
    """Stands in for the command service: records the trace headers the events would carry."""

    def __init__(self) -> None:
        self.carried: list[dict[str, str]] = []

    async def handle(self, op: str, data: bytes, tenant: str = "default") -> dict[str, Any]:
        self.carried.append(inject_traceparent())
        return {"ok": True}


def serve(headers: dict[str, str] | None) -> dict[str, str]:
    service = RecordingService()
    listener = CommandListener(cast(Any, None), cast(CommandService, service), tracer=None)
    message = Msg(cast(Any, None), subject="reminders.v1.inject", data=b"{}", headers=headers)

    async def run() -> None:
        await listener._dispatch(message)
        await asyncio.gather(*listener._tasks)

    asyncio.run(run())
    return service.carried[0]


def test_a_callers_traceparent_is_carried_on_without_a_span_of_the_gateways() -> None:
    assert serve({"traceparent": PARENT}) == {"traceparent": PARENT}


def test_a_command_outside_any_trace_carries_no_traceparent() -> None:
    assert serve(None) == {}
    assert serve({"Nats-Msg-Id": "x"}) == {}


def test_a_callers_baggage_is_carried_on_while_it_is_small() -> None:
    carried = serve({"traceparent": PARENT, "baggage": "team=ledger"})
    assert carried == {"traceparent": PARENT, "baggage": "team=ledger"}


def test_a_callers_large_trace_context_is_cut_to_its_traceparent() -> None:
    # The server counts headers toward max_payload; the size invariant leaves them a fixed
    # allowance, so what a caller sends cannot grow the events' headers past it.
    baggage = ",".join(f"k{n}={'v' * 40}" for n in range(150))
    state = ",".join(f"v{n}={'s' * 200}" for n in range(30))
    headers = {"traceparent": PARENT, "baggage": baggage, "tracestate": state}
    assert sum(len(k) + len(v) for k, v in headers.items()) > TRACE_HEADERS_MAX_BYTES
    assert serve(headers) == {"traceparent": PARENT}
    # The rest of the allowance is ample for the fixed headers (batch, expectation, id).
    assert 2 * TRACE_HEADERS_MAX_BYTES <= HEADER_ALLOWANCE_BYTES

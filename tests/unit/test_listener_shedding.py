"""Load shedding (issue: overload): past its bound of commands in flight the gateway answers
at once `unavailable` with `retry_after_ms` and `overloaded`, instead of queueing, and takes
commands again as soon as a slot frees."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import orjson
from nats.aio.msg import Msg

from services.gateway.listener import CommandListener
from services.gateway.service import CommandService


class SlowService:
    """Holds every command until released; counts what it was given."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.served = 0

    async def handle(self, op: str, data: bytes, tenant: str = "default") -> dict[str, Any]:
        self.served += 1
        await self.release.wait()
        return {"ok": True, "session_seq": 1}

    async def handle_rpc(self, data: bytes, tenant: str = "default") -> dict[str, Any] | None:
        return {"jsonrpc": "2.0", "id": 1, "result": {}}


class Replies:
    """Stands in for the connection: collects what was published to each reply subject."""

    def __init__(self) -> None:
        self.sent: dict[str, Any] = {}

    async def publish(self, subject: str, payload: bytes, **_: Any) -> None:
        self.sent[subject] = orjson.loads(payload)


def message(replies: Replies, subject: str, reply: str, data: bytes = b"{}") -> Msg:
    return Msg(cast(Any, replies), subject=subject, reply=reply, data=data)


def test_past_the_bound_a_command_is_answered_overloaded_at_once() -> None:
    async def run() -> None:
        service, replies = SlowService(), Replies()
        listener = CommandListener(
            cast(Any, None), cast(CommandService, service), tracer=None, in_flight=2
        )
        for n in range(2):
            await listener._dispatch(message(replies, "reminders.v1.inject", f"in.{n}"))
        await asyncio.sleep(0)
        await listener._dispatch(message(replies, "reminders.v1.inject", "in.shed"))
        shed = replies.sent["in.shed"]
        assert shed["ok"] is False and shed["error"]["code"] == "unavailable"
        assert shed["error"]["details"]["overloaded"] is True
        assert shed["error"]["details"]["retry_after_ms"] > 0
        rpc = b'{"jsonrpc": "2.0", "id": 7, "method": "session/remind", "params": {}}'
        await listener._dispatch(message(replies, "reminders.v1.rpc", "in.rpc", rpc))
        assert replies.sent["in.rpc"]["id"] == 7
        assert replies.sent["in.rpc"]["error"]["data"]["code"] == "unavailable"
        assert service.served == 2  # the shed commands never reached the service
        service.release.set()
        await asyncio.gather(*listener._tasks)
        assert replies.sent["in.0"] == replies.sent["in.1"] == {"ok": True, "session_seq": 1}
        await listener._dispatch(message(replies, "reminders.v1.inject", "in.after"))
        await asyncio.gather(*listener._tasks)
        assert replies.sent["in.after"]["ok"] is True

    asyncio.run(run())


def test_queries_take_no_command_place_and_are_never_shed_here() -> None:
    """A flood of long `state` waits has its own bound (rate_limited, SPEC §4.10); it must
    not fill the places of commands, nor be shed as overload."""

    async def run() -> None:
        service, replies = SlowService(), Replies()
        listener = CommandListener(
            cast(Any, None), cast(CommandService, service), tracer=None, in_flight=1
        )
        for n in range(5):
            await listener._dispatch(message(replies, "reminders.v1.state", f"q.{n}"))
        await listener._dispatch(message(replies, "reminders.v1.inject", "cmd"))
        await asyncio.sleep(0)
        assert replies.sent == {} and service.served == 6
        service.release.set()
        await asyncio.gather(*listener._tasks)
        assert all(replies.sent[f"q.{n}"]["ok"] for n in range(5))

    asyncio.run(run())

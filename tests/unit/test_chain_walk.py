"""The back-pointer walk's direct gets (`ChainWalk`): each reply is handled in the inbox
subscription's callback, which may send the next get; a round ends when every get sent in it
is answered, raises what handling a reply raised, and gives up only when no reply has come
for its timeout — however long the whole round takes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from nats.errors import TimeoutError as NatsTimeoutError

from services.adapters.session_walk import BrokenChain, ChainWalk, NotStored


class Message:
    def __init__(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        self.subject = subject
        self.data = data
        self.headers = headers


class Subscription:
    def __init__(self) -> None:
        self.unsubscribed = False

    async def unsubscribe(self) -> None:
        self.unsubscribed = True


class Server:
    """Messages 1..`size`; a get by `seq` answers after `delay_s`, as nats-py does: later, one
    reply at a time through the subscription's callback, never inside `publish`. Seqs in
    `silent` are never answered; seqs above `size` are not stored (404)."""

    def __init__(self, size: int, delay_s: float = 0.0, silent: frozenset[int] = frozenset()):
        self.size = size
        self.delay_s = delay_s
        self.silent = silent
        self.requests: list[dict[str, Any]] = []
        self.subscription = Subscription()
        self._cb: Callable[[Message], Awaitable[None]] | None = None
        self._replies: asyncio.Queue[Message] = asyncio.Queue()
        self._delivery: asyncio.Task[None] | None = None

    def new_inbox(self) -> str:
        return "_INBOX.walk"

    async def subscribe(self, subject: str, cb: Callable[[Message], Awaitable[None]]) -> Any:
        assert subject == "_INBOX.walk.*"
        self._cb = cb
        self._delivery = asyncio.create_task(self._deliver())
        return self.subscription

    async def publish(self, subject: str, data: bytes, reply: str) -> None:
        assert subject == "$JS.API.DIRECT.GET.S"
        request = orjson.loads(data)
        self.requests.append(request)
        seq = int(request["seq"])
        if seq in self.silent:
            return
        if seq > self.size:
            headers = {"Status": "404", "Description": "Message Not Found"}
            message = Message(reply, b"", headers)
        else:
            headers = {"Nats-Sequence": str(seq), "Nats-Subject": "s"}
            message = Message(reply, str(seq).encode(), headers)
        asyncio.get_running_loop().call_later(self.delay_s, self._replies.put_nowait, message)

    async def _deliver(self) -> None:
        assert self._cb is not None
        while True:
            await self._cb(await self._replies.get())

    def close(self) -> None:
        if self._delivery is not None:
            self._delivery.cancel()


@contextlib.asynccontextmanager
async def walking(server: Server, timeout_s: float = 1.0) -> AsyncIterator[ChainWalk]:
    """A walk over `server` (in the place of a nats-py client), the server stopped after."""
    nc: Any = server
    try:
        async with ChainWalk(nc, "S", timeout_s) as walk:
            yield walk
    finally:
        server.close()


def walker(walk: ChainWalk, kept: list[int]) -> Callable[[Any], Awaitable[None]]:
    """A handler that keeps each message and walks down to seq 1."""

    async def step(message: Any) -> None:
        seq = int(message.headers["Nats-Sequence"])
        kept.append(seq)
        if seq > 1:
            await walk.get({"seq": seq - 1}, step)

    return step


async def test_a_round_ends_when_every_get_it_led_to_is_answered() -> None:
    server = Server(40)
    kept: list[int] = []
    async with walking(server) as walk:
        step = walker(walk, kept)
        await walk.round([({"seq": 40}, step), ({"seq": 41}, step)], missing_ok=True)
        assert walk.sent == 40
    assert kept == list(range(40, 0, -1))
    assert server.subscription.unsubscribed


async def test_a_missing_message_breaks_the_chain_unless_allowed() -> None:
    server = Server(3)
    kept: list[int] = []
    async with walking(server) as walk:
        with pytest.raises(NotStored):
            await walk.round([({"seq": 9}, walker(walk, kept))])
    assert kept == []


async def test_what_handling_a_reply_raises_the_round_raises() -> None:
    server = Server(10)

    async def refuse(message: Any) -> None:
        raise BrokenChain("points up")

    async with walking(server) as walk:
        with pytest.raises(BrokenChain, match="points up"):
            await walk.round([({"seq": 5}, refuse)])


async def test_a_slow_round_goes_on_while_replies_come() -> None:
    # Each reply takes a third of the timeout and the walk is 12 replies long: the round
    # takes four timeouts, and still completes.
    server = Server(12, delay_s=0.02)
    kept: list[int] = []
    async with walking(server, 0.06) as walk:
        await walk.round([({"seq": 12}, walker(walk, kept))])
    assert kept == list(range(12, 0, -1))


async def test_a_get_never_answered_times_the_round_out() -> None:
    server = Server(30, silent=frozenset({7}))
    kept: list[int] = []
    async with walking(server, 0.1) as walk:
        with pytest.raises(NatsTimeoutError):
            await walk.round([({"seq": 30}, walker(walk, kept))])
    assert kept == list(range(30, 7, -1))

"""A batched direct get that stops mid-batch (the replica answering it froze or went away) is
asked for again from the first message not yet read, when the reader allows it, and every
message is still read once, in order (`iterate_direct`'s `stall_retries`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from nats.errors import TimeoutError as NatsTimeoutError

from services.adapters.session_read import iterate_direct


class Message:
    def __init__(self, data: bytes, headers: dict[str, str]) -> None:
        self.data = data
        self.headers = headers


class Batch:
    """One request's inbox: the replies that arrive (`publish` hands them to the
    subscription's callback), then nothing more."""

    def __init__(self, cb: Callable[[Message], Awaitable[None]]) -> None:
        self._cb = cb
        self.unsubscribed = False

    async def arrive(self, replies: list[Message], stall_after: int | None) -> None:
        for reply in replies if stall_after is None else replies[:stall_after]:
            await self._cb(reply)

    async def unsubscribe(self) -> None:
        self.unsubscribed = True


class StallingStream:
    """A stream of `size` matching messages whose first `stalls` batches stop after
    `stall_after` messages."""

    def __init__(self, size: int, stalls: int, stall_after: int) -> None:
        self.size = size
        self.stalls = stalls
        self.stall_after = stall_after
        self.requests: list[dict[str, Any]] = []
        self.batches: list[Batch] = []
        self._pending: Batch | None = None

    def new_inbox(self) -> str:
        return f"_INBOX.{len(self.batches)}"

    async def subscribe(self, inbox: str, cb: Callable[[Message], Awaitable[None]]) -> Batch:
        self._pending = Batch(cb)
        return self._pending

    async def publish(self, subject: str, data: bytes, reply: str) -> None:
        request = orjson.loads(data)
        self.requests.append(request)
        seqs = list(range(request["seq"], self.size + 1))[: request["batch"]]
        replies = [
            Message(
                f"event {seq}".encode(),
                {
                    "Nats-Sequence": str(seq),
                    "Nats-Subject": "transcript.reminder.injected.s",
                    "Nats-Num-Pending": str(self.size - seq),
                },
            )
            for seq in seqs
        ]
        left = self.size - (seqs[-1] if seqs else self.size)
        replies.append(Message(b"", {"Status": "204", "Nats-Num-Pending": str(left)}))
        stall_after = self.stall_after if self.stalls > 0 else None
        self.stalls -= 1
        assert self._pending is not None
        await self._pending.arrive(replies, stall_after)
        self.batches.append(self._pending)


async def read_all(stream: StallingStream, **options: Any) -> list[int]:
    return [
        raw.stream_seq
        async for raw in iterate_direct(
            stream,  # type: ignore[arg-type]
            "REMINDERS",
            "transcript.reminder.>",
            batch=4,
            timeout_s=0.01,
            **options,
        )
    ]


async def test_a_stalled_batch_is_asked_for_again_from_the_first_message_not_read() -> None:
    stream = StallingStream(size=10, stalls=2, stall_after=2)
    assert await read_all(stream, stall_retries=2) == list(range(1, 11))
    # Stalled after 1, 2; again from 3: stalled after 3, 4; again from 5: 5-8, then 9-10.
    assert [request["seq"] for request in stream.requests] == [1, 3, 5, 9]
    assert all(batch.unsubscribed for batch in stream.batches)


async def test_a_reader_without_stall_retries_gets_the_timeout() -> None:
    stream = StallingStream(size=10, stalls=1, stall_after=2)
    with pytest.raises(NatsTimeoutError):
        await read_all(stream)


async def test_stalls_beyond_the_retries_raise_the_timeout() -> None:
    stream = StallingStream(size=10, stalls=3, stall_after=1)
    with pytest.raises(NatsTimeoutError):
        await asyncio.wait_for(read_all(stream, stall_retries=2), 1.0)
    assert len(stream.requests) == 3

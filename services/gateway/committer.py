"""Group commit (SPEC §3.4.1): commands of different sessions share one atomic batch.

Commands that arrive while a commit is in flight wait and then go together, up to the
batch bound. The caller guarantees one in-flight command per session. When the server
rejects a group, each command is retried alone, so one session's conflict never fails
another session's command; when the stream itself is away (a leader election, no
responders) the whole group fails as unavailable, which the command path retries within
each command's deadline — only a wrong expected sequence is a conflict.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from nats.aio.client import Client
from nats.errors import Error as NatsError

from services.adapters.append import SessionAppend, publish_atomic
from services.adapters.append_errors import AppendFailure, append_failure
from services.adapters.ids import new_uuid7
from services.adapters.jetstream import JetStreamApiError


class CommitConflict(Exception):
    """The session moved on since it was read (expectation failed)."""


class CommitUncertain(Exception):
    """The batch may or may not be stored (lost PubAck, duplicate id): re-read to know."""


class CommitUnavailable(Exception):
    """The stream could not take the batch just now (no leader, no responders, 5xx);
    nothing was stored, and a later attempt may succeed."""


class CommitFailed(Exception):
    """The server refused the batch for a reason a retry will not change; nothing stored."""


@dataclass
class _Waiting:
    append: SessionAppend
    done: asyncio.Future[list[int]]


_FAILURES: dict[AppendFailure, type[Exception]] = {
    AppendFailure.CONFLICT: CommitConflict,
    AppendFailure.UNAVAILABLE: CommitUnavailable,
    AppendFailure.UNCERTAIN: CommitUncertain,
    AppendFailure.REFUSED: CommitFailed,
}


def _classify(exc: BaseException) -> Exception:
    return _FAILURES[append_failure(exc)](f"{type(exc).__name__}: {exc}")


class GroupCommitter:
    """Coalesces session appends into atomic batches, one batch in flight at a time."""

    def __init__(
        self,
        nc: Client,
        max_messages: int = 1000,
        timeout_s: float = 5.0,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self._nc = nc
        self._max_messages = max_messages
        self._timeout_s = timeout_s
        self._on_batch = on_batch
        self._queue: deque[_Waiting] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the commit loop."""
        self._task = asyncio.create_task(self._run(), name="group-commit")

    async def stop(self) -> None:
        """Stop the loop; commands still waiting fail as uncertain (they were not sent)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        while self._queue:
            waiting = self._queue.popleft()
            if not waiting.done.done():
                waiting.done.set_exception(CommitFailed("gateway stopping"))

    async def commit(self, append: SessionAppend) -> list[int]:
        """Store one command's events; returns their stream sequences."""
        done: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiting(append, done))
        self._wake.set()
        return await done

    def _take_group(self) -> list[_Waiting]:
        group = [self._queue.popleft()]
        size = len(group[0].append.events)
        while self._queue and size + len(self._queue[0].append.events) <= self._max_messages:
            waiting = self._queue.popleft()
            size += len(waiting.append.events)
            group.append(waiting)
        return group

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                await self._commit(self._take_group())

    async def _commit(self, group: list[_Waiting]) -> None:
        try:
            last_seq = await publish_atomic(
                self._nc, [waiting.append for waiting in group], new_uuid7(), self._timeout_s
            )
        except (JetStreamApiError, TimeoutError, NatsError) as exc:
            failure = append_failure(exc)
            if (
                len(group) > 1
                and isinstance(exc, JetStreamApiError)
                and failure is not AppendFailure.UNAVAILABLE
            ):
                # One session's expectation (or one command's ids or content) sank the whole
                # group: find it by committing each command alone.
                for waiting in group:
                    await self._commit([waiting])
                return
            # No answer or no stream: the same for every command of the group.
            for waiting in group:
                _fail(waiting, _classify(exc))
            return
        if self._on_batch is not None:
            self._on_batch(len(group))
        total = sum(len(waiting.append.events) for waiting in group)
        next_seq = last_seq - total + 1
        for waiting in group:
            count = len(waiting.append.events)
            if not waiting.done.done():
                waiting.done.set_result(list(range(next_seq, next_seq + count)))
            next_seq += count


def _fail(waiting: _Waiting, exc: Exception) -> None:
    if not waiting.done.done():
        waiting.done.set_exception(exc)

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
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from nats.aio.client import Client
from nats.errors import Error as NatsError

from services.adapters import stages
from services.adapters.append import SessionAppend, publish_atomic
from services.adapters.append_errors import AppendFailure, append_failure
from services.adapters.ids import new_uuid7
from services.adapters.jetstream import JetStreamApiError
from services.gateway.failover import Failover

log = logging.getLogger("reminders.gateway")

#: A batch is given at least this long for its PubAck, however late its commands are.
MIN_COMMIT_TIMEOUT_S = 0.05


class CommitConflict(Exception):
    """The session moved on since it was read (expectation failed)."""


class CommitInProcess(Exception):
    """Another append of the session is proposed and not yet settled; nothing of this batch
    was stored, and the session's next state is unknown until that append settles."""


class CommitUncertain(Exception):
    """The batch may or may not be stored (lost PubAck, duplicate id): re-read to know."""


class CommitUnavailable(Exception):
    """The stream could not take the batch just now (no leader, no responders, 5xx);
    nothing was stored, and a later attempt may succeed."""


class CommitFailed(Exception):
    """The server refused the batch for a reason a retry will not change; nothing stored."""


@dataclass(eq=False)
class _Waiting:
    append: SessionAppend
    done: asyncio.Future[list[int]]
    #: Loop time after which nobody waits for the outcome (None: no limit).
    expires: float | None = None


_FAILURES: dict[AppendFailure, type[Exception]] = {
    AppendFailure.CONFLICT: CommitConflict,
    AppendFailure.IN_PROCESS: CommitInProcess,
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
        failover: Failover | None = None,
    ) -> None:
        self._nc = nc
        self._failover = failover
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

    async def commit(self, append: SessionAppend, timeout_s: float | None = None) -> list[int]:
        """Store one command's events; returns their stream sequences.

        With `timeout_s`, wait no longer than that: a command still queued behind the batch
        in flight is withdrawn (`CommitUnavailable`, nothing was sent), as is one given no
        time at all; one already sent is `CommitUncertain` (it may land without anyone
        waiting for it). A caller cancelled while it waits withdraws its command unless it
        was sent.
        """
        loop = asyncio.get_running_loop()
        if timeout_s is not None and timeout_s <= 0:
            raise CommitUnavailable("no time left to queue the command")
        done: asyncio.Future[list[int]] = loop.create_future()
        expires = None if timeout_s is None else loop.time() + timeout_s
        waiting = _Waiting(append, done, expires)
        self._queue.append(waiting)
        self._wake.set()
        if expires is None:
            return await done
        try:
            # `wait_for` on the shielded future, not one timer settling it: measured through
            # the gateway, the timer took as much CPU and fewer commands per second
            # (`bench/results/gateway_commit_timer_ab.json`).
            return await asyncio.wait_for(asyncio.shield(done), timeout_s)
        except TimeoutError:
            done.cancel()
            if waiting in self._queue:
                self._queue.remove(waiting)
                raise CommitUnavailable("still queued behind the batch in flight") from None
            raise CommitUncertain("sent; no answer before the command's deadline") from None
        except asyncio.CancelledError:
            done.cancel()  # its caller stopped waiting: never sent, if not sent yet
            raise

    def _take_group(self) -> list[_Waiting]:
        group: list[_Waiting] = []
        size = 0
        while self._queue:
            waiting = self._queue[0]
            if waiting.done.done():  # its caller stopped waiting: never send it
                self._queue.popleft()
                continue
            if group and size + len(waiting.append.events) > self._max_messages:
                break
            self._queue.popleft()
            size += len(waiting.append.events)
            group.append(waiting)
        return group

    def _timeout_of(self, group: list[_Waiting]) -> float:
        """The batch's commit timeout: no longer than anyone of the group still waits."""
        if any(waiting.expires is None for waiting in group):
            return self._timeout_s
        latest = max(waiting.expires or 0.0 for waiting in group)
        left = latest - asyncio.get_running_loop().time()
        return min(self._timeout_s, max(left, MIN_COMMIT_TIMEOUT_S))

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                group = self._take_group()
                if group:
                    await self._commit(group)

    async def _commit(self, group: list[_Waiting]) -> None:
        try:
            last_seq = await publish_atomic(
                self._nc,
                [waiting.append for waiting in group],
                new_uuid7(),
                self._timeout_of(group),
            )
        except (JetStreamApiError, TimeoutError, NatsError) as exc:
            failure = append_failure(exc)
            self._watch_leader(exc, failure)
            if (
                len(group) > 1
                and isinstance(exc, JetStreamApiError)
                and failure is not AppendFailure.UNAVAILABLE
            ):
                # One session's expectation (or one command's ids or content) sank the whole
                # group: find it by committing each command alone.
                for waiting in group:
                    if not waiting.done.done():  # else its caller already heard "uncertain"
                        await self._commit([waiting])
                return
            # No answer or no stream: the same for every command of the group.
            for waiting in group:
                _fail(waiting, _classify(exc))
            return
        except Exception as exc:
            # Anything else (an error the client does not wrap, a fault in building the
            # batch) must not end the loop, or every later command would wait behind a batch
            # that never settles. What was sent is unknown: each command of the group hears
            # so, and its caller reads the log to learn whether its events landed.
            log.exception("group commit failed", extra={"commands": len(group)})
            for waiting in group:
                _fail(waiting, CommitUncertain(f"group commit failed: {type(exc).__name__}"))
            return
        profile = stages.PROFILE
        since = 0.0 if profile is None else profile.now()
        if self._failover is not None:
            self._failover.answered()
        if self._on_batch is not None:
            self._on_batch(len(group))
        total = sum(len(waiting.append.events) for waiting in group)
        next_seq = last_seq - total + 1
        for waiting in group:
            count = len(waiting.append.events)
            if not waiting.done.done():
                waiting.done.set_result(list(range(next_seq, next_seq + count)))
            next_seq += count
        if profile is not None:
            profile.add("batch_settle", since)

    def _watch_leader(self, exc: BaseException, failure: AppendFailure) -> None:
        """Tell the fail-over whether a leader answered: a conflict or a refusal is an answer;
        no responders, no answer at all, a "no leader" error or an append still in process
        is not (a leader cut off from its quorum answers that for every session whose
        earlier append it still holds, so it must not count as a working leader)."""
        if self._failover is None:
            return
        answered = isinstance(exc, JetStreamApiError) and failure not in (
            AppendFailure.UNAVAILABLE,
            AppendFailure.IN_PROCESS,
        )
        if answered:
            self._failover.answered()
        else:
            self._failover.leaderless()


def _fail(waiting: _Waiting, exc: Exception) -> None:
    if not waiting.done.done():
        waiting.done.set_exception(exc)

"""The gateway's command path, a plain function of (command, ports): load the session, check
the caller, decide, commit, reply — retried within the command's deadline.

Three failures, three answers. A wrong expected sequence (the session moved on) is a
conflict: re-read and decide again, at most `conflict_retries` times. The log being away —
a leader election, no responders, a read that timed out — says nothing about the session:
wait and try again until the deadline nears, then answer `unavailable` with
`retry_after_ms`. A commit whose outcome is unknown (lost PubAck, timeout) may land even
later, so from then on every re-read first looks for this command's events after the state
it was decided on, and answers from the log if they are there.

`CommandPorts` is everything the path touches outside the core; `service.py` wires it to
NATS, the unit tests to fakes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from contracts.commands import Command
from contracts.errors import ErrorCode
from contracts.events import Event
from contracts.state import SessionState
from core import CommandContext, CoreConfig, decide
from core.decide import with_inline
from services.adapters.append import SessionAppend
from services.gateway.committer import (
    CommitConflict,
    CommitFailed,
    CommitUnavailable,
    CommitUncertain,
)
from services.gateway.replies import error_reply, unavailable_reply

log = logging.getLogger("reminders.gateway")

#: First pause after a conflict (doubling with each one): another writer is mid-command.
CONFLICT_PAUSE_S = 0.005
#: First pause while the log is away (doubling up to `MAX_PAUSE_S`): an election takes seconds.
UNAVAILABLE_PAUSE_S = 0.025
MAX_PAUSE_S = 0.5


@dataclass
class CachedSession:
    """A session's folded state and the stream sequence of its last event."""

    state: SessionState
    last_stream_seq: int


class LogUnavailable(Exception):
    """The session could not be read from the log just now (timeout, no responders, an
    error status); nothing about the session is known."""


class CommandPorts(Protocol):
    """What the command path needs from the world; every wait is given the time it may take."""

    core: CoreConfig
    conflict_retries: int

    def clock(self) -> float:
        """Monotonic seconds."""

    async def sleep(self, seconds: float) -> None:
        """Wait (between attempts)."""

    def jitter(self) -> float:
        """A random number in [0, 1) that spreads the retries of many commands."""

    def new_context(self) -> CommandContext:
        """The ids and time of the command being decided (once per command)."""

    async def load(self, session_id: str, timeout_s: float) -> CachedSession:
        """The session as last known: cached, or folded from the log; `LogUnavailable`."""

    async def read(
        self, session_id: str, timeout_s: float
    ) -> tuple[CachedSession, list[tuple[Event, int]]]:
        """The session freshly folded from the log, with its events; `LogUnavailable`."""

    async def commit(self, append: SessionAppend, timeout_s: float) -> list[int]:
        """Append atomically; the stream seqs, or one of the `Commit*` exceptions."""

    def check_caller(self, command: Command, state: SessionState) -> dict[str, Any] | None:
        """The per-command check of the caller, before every decide: None lets the command
        through, a reply refuses it (nothing is appended)."""

    def remember(self, entry: CachedSession, events: tuple[Event, ...], seqs: list[int]) -> None:
        """The command's events are stored at `seqs`: keep the new state, count them."""

    def forget_cached(self, session_id: str, conflict: bool) -> None:
        """The cached session may be stale (after a conflict, or an unknown outcome)."""


@dataclass
class Deadline:
    """The time a command has left, and the one retry helper: jittered doubling pauses that
    never run past the deadline."""

    at: float
    ports: CommandPorts

    def left(self) -> float:
        """Seconds until the deadline (negative once it passed)."""
        return self.at - self.ports.clock()

    async def pause(self, attempt: int, first_s: float) -> bool:
        """Wait before attempt `attempt + 1`; False (without waiting) when the wait would
        reach the deadline, so the caller answers now instead of too late."""
        pause = min(first_s * 2.0**attempt, MAX_PAUSE_S) * (0.5 + 0.5 * self.ports.jitter())
        if pause >= self.left():
            return False
        await self.ports.sleep(pause)
        return True


async def run_command(
    command: Command, warnings: list[Any], ports: CommandPorts, deadline: Deadline
) -> dict[str, Any]:
    """Decide `command` against its session and append the events, until stored, refused,
    or the deadline nears; the reply to send."""
    context = ports.new_context()
    session_id = command.session_id
    conflicts = waits = 0
    unsure_after: int | None = None  # this command may be stored after this stream seq
    while True:
        if deadline.left() <= 0:
            return _unavailable(command, "no time left", unsure_after)
        entry: CachedSession | None = None
        try:
            if unsure_after is None:
                entry = await ports.load(session_id, deadline.left())
            else:
                entry, events = await ports.read(session_id, deadline.left())
                stored = _stored_reply(command, context.command_id, events, unsure_after)
                if stored is not None:
                    return stored
            refusal = ports.check_caller(command, entry.state)
            if refusal is not None:
                return refusal
            decision = decide(entry.state, command, context, ports.core, warnings)
            if not decision.events:
                return decision.reply
            append = SessionAppend(
                session_id, entry.last_stream_seq, decision.events, encoded=decision.encoded
            )
            seqs = await ports.commit(append, deadline.left())
            ports.remember(entry, decision.events, seqs)
            return decision.reply
        except CommitConflict:
            ports.forget_cached(session_id, conflict=True)
            conflicts += 1
            if conflicts > ports.conflict_retries:
                return error_reply(
                    ErrorCode.CONFLICT,
                    "the session kept changing; optimistic concurrency gave up",
                    retries=ports.conflict_retries,
                )
            if await deadline.pause(conflicts - 1, CONFLICT_PAUSE_S):
                continue
            return _unavailable(command, "conflicts until the deadline", unsure_after)
        except CommitUncertain as exc:
            ports.forget_cached(session_id, conflict=False)
            assert entry is not None  # only a commit is uncertain, and it follows a load
            first = unsure_after is None
            unsure_after = (
                entry.last_stream_seq
                if unsure_after is None
                else min(unsure_after, entry.last_stream_seq)
            )
            if first:
                continue  # a lost PubAck: look in the log at once
            failure: Exception = exc
        except (CommitUnavailable, LogUnavailable) as exc:
            failure = exc
        except CommitFailed as exc:
            log.error("batch refused", extra={"op": command.op, "error": str(exc)})
            return error_reply(ErrorCode.UNAVAILABLE, "the log refused the append")
        if not await deadline.pause(waits, UNAVAILABLE_PAUSE_S):
            return _unavailable(command, _describe(failure), unsure_after)
        waits += 1


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _unavailable(command: Command, why: str, unsure_after: int | None) -> dict[str, Any]:
    """The deadline is near with the log still away: tell the caller when to retry."""
    log.warning(
        "log unavailable until the command deadline", extra={"op": command.op, "error": why}
    )
    return unavailable_reply(maybe_applied=unsure_after is not None)


def _stored_reply(
    command: Command, command_id: str, events: list[tuple[Event, int]], read_through: int
) -> dict[str, Any] | None:
    """After an uncertain commit: the reply, if this command's events did land.

    Other writers may have appended after them, so look at everything stored since the
    state the command was decided on, not only at the last event.
    """
    for event, stream_seq in reversed(events):
        if stream_seq <= read_through:
            break
        if event.command_id == command_id and event.reply is not None:
            return with_inline(command, event.reply)
    return None

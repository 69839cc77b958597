"""The gateway's command path, a plain function of (command, ports): load the session, check
the caller, decide, commit, reply — retried within the command's deadline.

Three failures, three answers. A wrong expected sequence (the session moved on) is a
conflict: re-read and decide again, at most `conflict_retries` times. The log being away —
a leader election, no responders, a read that timed out, another append of the session
still in process — says nothing settled about the session: wait and try again until the
deadline nears, then answer `unavailable` with `retry_after_ms`. A commit whose outcome is
unknown (lost PubAck, timeout) may land even later, so from then on every re-read first
looks for this command's events after the state it was decided on, and answers from the
log if they are there.

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
from contracts.session_index import SessionIndex
from contracts.state import SessionState
from core import CommandContext, CoreConfig, Decision, decide
from core.clock import timed
from core.decide import with_unstored
from services.adapters import stages
from services.adapters.append import SessionAppend
from services.gateway.committer import (
    CommitConflict,
    CommitFailed,
    CommitInProcess,
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
    #: Where the session's appends are, for the next append's index header
    #: (`contracts.session_index`); None when not known, and then none is written.
    index: SessionIndex | None = None


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
        self, session_id: str, timeout_s: float, events_after: int | None
    ) -> tuple[CachedSession, list[tuple[Event, int]]]:
        """The session freshly folded from the log, with its events stored after stream seq
        `events_after` (none for None: only the state is wanted); `LogUnavailable`."""

    async def commit(self, append: SessionAppend, timeout_s: float) -> list[int]:
        """Append atomically; the stream seqs, or one of the `Commit*` exceptions."""

    async def stored_reply(
        self, session_id: str, session_seq: int, timeout_s: float
    ) -> dict[str, Any] | None:
        """The reply stored on the session's event at `session_seq` (None: no such event);
        raises `LogUnavailable`."""
        ...

    async def last_stream_seq(self, session_id: str, timeout_s: float) -> int:
        """The stream seq of the session's last event in the log now (0 for none), as the
        stream's leader has it (a replica may lag); `LogUnavailable`."""

    def check_caller(self, command: Command, state: SessionState) -> dict[str, Any] | None:
        """The per-command check of the caller, before every decide: None lets the command
        through, a reply refuses it (nothing is appended)."""

    def remember(self, entry: CachedSession, decision: Decision, seqs: list[int]) -> None:
        """The decision's events are stored at `seqs`: keep the new state, count them."""

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
    """Load, check the caller, decide, commit, reply — tried again after a conflict or while
    the log is away, until stored, refused, or the deadline nears."""
    profile = stages.PROFILE
    since = 0.0 if profile is None else profile.now()
    context = ports.new_context()
    if profile is not None:
        profile.add("decide", since)
    retries = _Retries(deadline)
    while deadline.left() > 0:
        try:
            return await _attempt(command, warnings, context, ports, deadline, retries.unsure_after)
        except CommitConflict:
            ports.forget_cached(command.session_id, conflict=True)
            if retries.conflicts >= ports.conflict_retries:
                if retries.unsure_after is not None:
                    # An earlier attempt may have landed (its outcome was unknown, and the
                    # reads since may have come from a replica behind it): giving up is not
                    # a definite failure, so the caller must retry with the same request_id.
                    return unavailable_reply(maybe_applied=True)
                return error_reply(
                    ErrorCode.CONFLICT,
                    "the session kept changing; optimistic concurrency gave up",
                    retries=ports.conflict_retries,
                )
            again = await retries.after_conflict()
        except _Uncertain as exc:
            ports.forget_cached(command.session_id, conflict=False)
            again = await retries.after_uncertain(exc.decided_on, exc.__cause__ or exc)
        except CommitInProcess as exc:
            # Not a conflict: the append in process may be this command's own earlier
            # attempt, held by a leader without a quorum; a few quick retries would call
            # the session "changing" while nothing can land at all.
            ports.forget_cached(command.session_id, conflict=False)
            again = await retries.after_unavailable(exc)
        except (CommitUnavailable, LogUnavailable) as exc:
            again = await retries.after_unavailable(exc)
        except CommitFailed as exc:
            log.error("batch refused", extra={"op": command.op, "error": str(exc)})
            if retries.unsure_after is not None:
                # This attempt stored nothing, but an earlier one's outcome is unknown: the
                # caller must not take the refusal for proof that nothing was applied.
                return error_reply(
                    ErrorCode.UNAVAILABLE,
                    "the log refused the append; an earlier attempt may yet be applied: "
                    "retry with the same request_id",
                    maybe_applied=True,
                )
            return error_reply(ErrorCode.UNAVAILABLE, "the log refused the append")
        if not again:
            break
    log.warning(
        "log unavailable until the command deadline",
        extra={"op": command.op, "error": retries.last_failure},
    )
    return unavailable_reply(maybe_applied=retries.unsure_after is not None)


class _Uncertain(Exception):
    """The commit's outcome is unknown; the command was decided on the session as it was
    at stream seq `decided_on`."""

    def __init__(self, decided_on: int) -> None:
        super().__init__(decided_on)
        self.decided_on = decided_on


async def _attempt(
    command: Command,
    warnings: list[Any],
    context: CommandContext,
    ports: CommandPorts,
    deadline: Deadline,
    unsure_after: int | None,
) -> dict[str, Any]:
    """One try. After an unknown outcome (`unsure_after`), the session is re-read and the
    command answered from the log if its events landed."""
    if unsure_after is None:
        entry = await ports.load(command.session_id, deadline.left())
    else:
        entry, events = await ports.read(command.session_id, deadline.left(), unsure_after)
        stored = _stored_reply(command, context.command_id, events, unsure_after)
        if stored is not None:
            return stored
    profile = stages.PROFILE
    since = 0.0 if profile is None else profile.now()
    refusal = ports.check_caller(command, entry.state)
    if refusal is not None:
        return refusal
    # The session's recorded time never goes backwards (SPEC §12.4).
    decision = decide(entry.state, command, timed(context, entry.state), ports.core, warnings)
    if profile is not None:
        profile.add("decide", since)
    if decision.reply_in_log is not None:
        # A repeated request_id whose first reply only the log still holds whole.
        stored = await ports.stored_reply(
            command.session_id, decision.reply_in_log, deadline.left()
        )
        return decision.reply if stored is None else with_unstored(command, stored)
    if not decision.events:
        # Nothing to append, so no expected-sequence check will catch a session that is
        # behind the log: a cached one (another replica appended) or one just read from a
        # stream replica still catching up (after a partition healed; after an unknown
        # outcome that read may miss the command's own events). Look at the log's last seq
        # first, and decide again on the session as stored if it moved on.
        if entry.last_stream_seq != await ports.last_stream_seq(
            command.session_id, deadline.left()
        ):
            raise CommitConflict("the session decided on is behind the log")
        return decision.reply
    append = SessionAppend(
        command.session_id,
        entry.last_stream_seq,
        decision.events,
        encoded=decision.encoded,
        index=entry.index,
    )
    try:
        seqs = await ports.commit(append, deadline.left())
    except CommitUncertain as exc:
        raise _Uncertain(entry.last_stream_seq) from exc
    ports.remember(entry, decision, seqs)
    return decision.reply


@dataclass
class _Retries:
    """What the retries of one command have seen, and the wait before the next one."""

    deadline: Deadline
    conflicts: int = 0
    waits: int = 0
    #: Set once a commit's outcome was unknown: the command may be stored after this seq.
    unsure_after: int | None = None
    last_failure: str = "no time left"

    async def after_conflict(self) -> bool:
        """Another writer is mid-command: a short pause, then decide again."""
        self.conflicts += 1
        self.last_failure = "conflicts until the deadline"
        return await self.deadline.pause(self.conflicts - 1, CONFLICT_PAUSE_S)

    async def after_uncertain(self, decided_on: int, failure: BaseException) -> bool:
        """The first unknown outcome is looked up in the log at once (a lost PubAck);
        later ones wait like an absent log."""
        if self.unsure_after is None:
            self.unsure_after = decided_on
            return True
        self.unsure_after = min(self.unsure_after, decided_on)
        return await self.after_unavailable(failure)

    async def after_unavailable(self, failure: BaseException) -> bool:
        """The log is away: wait, doubling, while the deadline allows."""
        self.last_failure = f"{type(failure).__name__}: {str(failure)[:200]}"
        again = await self.deadline.pause(self.waits, UNAVAILABLE_PAUSE_S)
        self.waits += 1
        return again


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
            return with_unstored(command, event.reply)
    return None

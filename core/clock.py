"""The wall clock of SPEC §12.4, as pure rules over recorded times.

A command's time is the `occurred_at` its events record; nothing else reads a clock, so
replay stays exact. Every time the log holds has one form (UTC, milliseconds, `Z`: see
`contracts.spec.utc_millis`), so comparing two as strings compares them as times.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts.state import PendingRow, SessionState
from core.config import CommandContext


def command_time(clock: str, last_recorded: str | None) -> str:
    """A command's time: the later of the deciding clock and the session's last recorded
    `occurred_at`, so a session's recorded time never goes backwards (replicas whose clocks
    disagree cannot reorder it)."""
    if last_recorded is not None and last_recorded > clock:
        return last_recorded
    return clock


def timed(context: CommandContext, state: SessionState) -> CommandContext:
    """`context` at its command's time on the session of `state` (`command_time`): what the
    gateway decides with, so its events never record a time before the session's last."""
    occurred_at = command_time(context.occurred_at, state.last_occurred_at)
    if occurred_at == context.occurred_at:
        return context
    return context.model_copy(update={"occurred_at": occurred_at})


def not_yet_due(row: PendingRow, now: str) -> bool:
    """Whether a live reminder's `not_before` is later than `now` (it is not eligible)."""
    not_before = row.spec.not_before
    return not_before is not None and not_before > now


def past_deadline(pending: Sequence[PendingRow], now: str) -> list[PendingRow]:
    """The live reminders whose `expires_at` is at or before `now`, in injection order:
    every command expires them first (`expired {reason: deadline}`)."""
    return [
        row for row in pending if row.spec.expires_at is not None and row.spec.expires_at <= now
    ]


def first_backwards(times: Sequence[str]) -> int | None:
    """The index of the first time earlier than the one before it, if any (`--verify`)."""
    return next((i for i in range(1, len(times)) if times[i] < times[i - 1]), None)

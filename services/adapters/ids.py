"""Fresh ids and the clock: the impure edge that feeds `core.CommandContext`."""

from __future__ import annotations

import os
import time

from core.canonical import uuid7_text
from core.config import CommandContext

#: Random bytes drawn from the OS in bulk: one `os.urandom` call serves many ids.
_POOL_BYTES = 4096
_pool = b""
_pool_at = 0


def _random_bytes(count: int) -> bytes:
    global _pool, _pool_at
    if _pool_at + count > len(_pool):
        _pool, _pool_at = os.urandom(_POOL_BYTES), 0
    chunk = _pool[_pool_at : _pool_at + count]
    _pool_at += count
    return chunk


def new_uuid7() -> str:
    """A random UUIDv7 (RFC 9562): 48-bit millisecond time, then random bits."""
    return uuid7_text(time.time_ns() // 1_000_000, _random_bytes(10))


#: A fixed offset added to the gateway's clock, for the fault suite's clock-skew nemesis only
#: (two gateway replicas whose clocks disagree). `REMINDERS_CLOCK_OFFSET_MS`, read once at
#: start-up; unset (0) everywhere but in tests/faults.
CLOCK_OFFSET_MS = int(os.environ.get("REMINDERS_CLOCK_OFFSET_MS") or 0)

#: The second `utc_now_millis` formatted last, and its text: the date part changes once a
#: second, so it is formatted once a second.
_second = -1
_second_text = ""


def utc_now_millis() -> str:
    """Now, as `YYYY-MM-DDTHH:MM:SS.mmmZ`."""
    global _second, _second_text
    millis = time.time_ns() // 1_000_000 + CLOCK_OFFSET_MS
    second, rest = divmod(millis, 1000)
    if second != _second:
        _second, _second_text = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_second_text}.{rest:03d}Z"


def fresh_context() -> CommandContext:
    """A context for one command decided now.

    Built without validation: every field is made here in the form `CommandContext`
    checks (a UUIDv7, an RFC 3339 time in milliseconds, a hex nonce)."""
    return CommandContext.model_construct(
        command_id=new_uuid7(),
        occurred_at=utc_now_millis(),
        new_reminder_id=new_uuid7(),
        nonce=_random_bytes(8).hex(),
    )

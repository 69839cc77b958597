"""Fresh ids and the clock: the impure edge that feeds `core.CommandContext`."""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime

from core.config import CommandContext


def new_uuid7() -> str:
    """A random UUIDv7 (RFC 9562): 48-bit millisecond time, then random bits."""
    raw = bytearray(os.urandom(16))
    raw[0:6] = (time.time_ns() // 1_000_000).to_bytes(6, "big")
    raw[6] = 0x70 | (raw[6] & 0x0F)
    raw[8] = 0x80 | (raw[8] & 0x3F)
    return str(uuid.UUID(bytes=bytes(raw)))


def utc_now_millis() -> str:
    """Now, as `YYYY-MM-DDTHH:MM:SS.mmmZ`."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def fresh_context() -> CommandContext:
    """A context for one command decided now."""
    return CommandContext(
        command_id=new_uuid7(),
        occurred_at=utc_now_millis(),
        new_reminder_id=new_uuid7(),
        nonce=os.urandom(8).hex(),
    )

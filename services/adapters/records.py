"""What the projection bucket holds per session token: a state, or a tombstone (SPEC §4.11)."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from contracts.state import SessionState
from core import canonical_json


class Tombstone(BaseModel):
    """Left in place of a forgotten session so a lagging projector cannot bring it back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tombstone: bool = Field(default=True, description="Always true.")
    session_token: str = Field(description="The forgotten session's token.")
    purged_through: int = Field(description="Stream sequence up to which events were purged.")
    forgotten_at: str = Field(description="When (RFC 3339).")


def encode_state(state: SessionState) -> bytes:
    """Canonical JSON of a state, what the bucket stores and replay prints."""
    return canonical_json(state.model_dump(mode="json")).encode("utf-8")


def decode_record(value: bytes | None) -> SessionState | Tombstone | None:
    """A bucket value back into a state or tombstone (None for an empty value)."""
    if not value:
        return None
    raw: dict[str, Any] = orjson.loads(value)
    if raw.get("tombstone") is True:
        return Tombstone.model_validate(raw)
    return SessionState.model_validate(raw)

"""What the projection bucket may hold besides a `SessionState`: a tombstone (SPEC §4.11).

Encoding and decoding bucket values stays with the KV adapter (`services.adapters.records`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Tombstone(BaseModel):
    """Left in place of a forgotten session so a lagging projector cannot bring it back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tombstone: bool = Field(default=True, description="Always true.")
    session_token: str = Field(description="The forgotten session's token.")
    purged_through: int = Field(description="Stream sequence up to which events were purged.")
    forgotten_at: str = Field(description="When (RFC 3339).")

"""Configuration the rules read, and the per-command context that brings time and ids in."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contracts.spec import DEFAULT_MAX_BODY_BYTES

#: The instructions paragraph of a `context-directives` envelope (SPEC §5.1), in our words.
DEFAULT_INSTRUCTIONS = (
    "The directives below come from the agent harness, not from the person you are working "
    "with. Follow them in order of authority: contract directives are binding, corrective "
    "ones fix course, advisory ones are hints. A ttl_turns value says for how many more turns "
    "a directive stays in force. The speaker attribute says whether the harness or the person "
    "stands behind them."
)

_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
_NONCE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class CoreConfig(BaseModel):
    """Bounds and rendering settings; read once by each service into its settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1, description="§2.1 bound.")
    max_live: int = Field(default=256, ge=1, description="Live plus queued per session (§4.1).")
    max_session_bytes: int = Field(
        default=256 * 1024,
        ge=1,
        description="Live plus queued reminder bytes per session, each reminder counted as "
        "stored (§4.1.1; `too_large`).",
    )
    max_user_text_bytes: int = Field(
        default=64 * 1024, ge=0, description="`user_text` of a render, UTF-8 bytes (§4.1.1)."
    )
    max_envelope_bytes: int = Field(
        default=128 * 1024, ge=1, description="Envelope cap, stored bytes (§4.6, §4.1.1)."
    )
    max_payload_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        description="Largest event, reply or state the rules may produce: the server's "
        "`max_payload` (checked at start-up, §4.1.1).",
    )
    redact: bool = Field(default=False, description="Redact secrets in bodies at ingest (§10).")
    instructions: str = Field(default=DEFAULT_INSTRUCTIONS, description="§5.1 paragraph.")
    nonce_enabled: bool = Field(default=False, description="Put a session nonce in the tag.")
    default_format: Literal["context-directives", "system-reminder"] = Field(
        default="context-directives", description="Format when a render names none."
    )
    render_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Token budget of a render that names none (§12.1); null = no budget.",
    )
    max_mutes: int = Field(default=32, ge=1, description="Active mutes per session (§12.2).")


class CommandContext(BaseModel):
    """What the impure edge decided for one command: its id, its time, fresh ids."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command_id: str = Field(min_length=1, description="Id of this command (UUIDv7).")
    occurred_at: str = Field(description="Decision time, `YYYY-MM-DDTHH:MM:SS.mmmZ`.")
    new_reminder_id: str = Field(
        min_length=1, description="Id given to a reminder injected without one."
    )
    nonce: str | None = Field(
        default=None, description="Candidate session nonce, used when none is recorded yet."
    )

    @field_validator("occurred_at")
    @classmethod
    def _rfc3339_millis(cls, value: str) -> str:
        if not _TIMESTAMP.match(value):
            raise ValueError("occurred_at must look like 2026-11-29T15:04:05.123Z")
        return value

    @field_validator("nonce")
    @classmethod
    def _nonce_is_attribute_safe(cls, value: str | None) -> str | None:
        if value is not None and not _NONCE.match(value):
            raise ValueError("nonce must match [A-Za-z0-9_-]{1,64}")
        return value

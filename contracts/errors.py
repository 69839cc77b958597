"""Error codes (SPEC §2.2) and the one exception type that carries them."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ErrorCode(StrEnum):
    """Every stable error code a reply or a dead-letter record may carry."""

    INVALID_OPTION = "HARN-RMD-001"
    INVALID_RPC_PAYLOAD = "HARN-RMD-002"
    NO_COMPACTION_GUARD = "HARN-RMD-004"
    INVALID_PROPAGATE = "HARN-RMD-005"
    PROVIDER_MALFORMED = "HARN-RMD-006"
    TOO_MANY_PROVIDERS = "HARN-RMD-007"
    EVENT_CANNOT_CARRY = "HARN-RMD-008"
    CONFLICT = "conflict"
    ALREADY_DELIVERED = "already_delivered"
    UNKNOWN_REMINDER_ID = "unknown_reminder_id"
    UNKNOWN_MUTE_ID = "unknown_mute_id"
    STALE_TURN = "stale_turn"
    INVALID_REQUEST = "invalid_request"
    UNAVAILABLE = "unavailable"
    TOO_LARGE = "too_large"
    TOO_MANY = "too_many"
    RATE_LIMITED = "rate_limited"


class ErrorBody(BaseModel):
    """The `error` object of a failed reply."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: ErrorCode = Field(description="Stable machine-readable code (SPEC §2.2).")
    message: str = Field(description="One human-readable sentence naming the field at fault.")
    details: dict[str, Any] = Field(
        default_factory=dict, description="Structured extras, e.g. the unknown keys."
    )


class WarningBody(BaseModel):
    """A non-fatal remark attached to an accepted command's reply (e.g. HARN-RMD-004)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: ErrorCode = Field(description="Stable code of the warning.")
    message: str = Field(description="Human-readable explanation.")


class ReminderError(Exception):
    """A rejected command or payload. Raised by parsers; the core turns it into a reply."""

    def __init__(self, code: ErrorCode, message: str, details: dict[str, Any] | None = None):
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message
        self.details = details or {}

    def to_body(self) -> ErrorBody:
        """The wire form of this error."""
        return ErrorBody(code=self.code, message=self.message, details=self.details)

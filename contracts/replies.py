"""Replies to the commands of SPEC §4: `{"ok": true, ..., "session_seq": N}` or an error."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.errors import ErrorBody, WarningBody
from contracts.events import RenderSummary

#: Optional keys left out of the wire form when unset ("plus warnings when any").
_OMIT_WHEN_NONE = frozenset({"warnings", "inline", "summary", "dropped", "text"})


class Reply(BaseModel):
    """Base of every successful reply."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ok: Literal[True] = Field(default=True, description="Always true on success.")
    session_seq: int = Field(description="The session's last session_seq after the command.")
    warnings: list[WarningBody] | None = Field(
        default=None, description="Non-fatal remarks (e.g. HARN-RMD-004); absent when none."
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON object sent on the bus and recorded in the last event's `reply`."""
        wire = self.model_dump(mode="json")
        for key in _OMIT_WHEN_NONE:
            if key in wire and wire[key] is None:
                del wire[key]
        return wire


class InjectedReply(Reply):
    """Reply to a direct inject."""

    reminder_id: str = Field(description="The new reminder's id.")
    deduped_count: int = Field(description="How many live reminders it replaced.")


class QueuedReply(Reply):
    """Reply to an inject with a delivery mode."""

    reminder_id: str = Field(description="The queued reminder's id.")
    queued: Literal[True] = Field(default=True, description="Always true.")
    position: int = Field(description="Its 1-based FIFO position.")


class ClearReply(Reply):
    """Reply to clear."""

    removed_count: int = Field(description="Live reminders removed.")


class CheckpointReply(Reply):
    """Reply to checkpoint."""

    drained: list[str] = Field(description="Ids drained, oldest first.")
    dispatch_skipped: bool = Field(description="The host must skip its pending tool batch.")


class RevokeReply(Reply):
    """Reply to revoke."""

    status: Literal["revoked", "already_revoked"] = Field(description="Outcome.")


class Envelope(BaseModel):
    """The rendered envelope (SPEC §4.6)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(description="Exact text to commit as one trailing user message.")
    speaker: Literal["harness", "person"] = Field(description="Speaker (§5.3).")
    directive_ids: list[str] = Field(description="Reminder ids in rendered order.")
    turn_number: int = Field(description="The render's turn.")
    format: Literal["context-directives", "system-reminder"] = Field(description="Format.")


class InlinePlacement(BaseModel):
    """User text with the envelope folded in (SPEC §5.5)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(description="user_text, a blank line, then the envelope.")
    range: list[int] = Field(
        min_length=2, max_length=2, description="[start, end) of the envelope in UTF-16 units."
    )


class DroppedDirective(BaseModel):
    """A reminder a render dropped instead of rendering it (SPEC §5.4)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reminder_id: str = Field(description="The reminder that left the session.")
    code: str = Field(description="Why, e.g. `spoofed_tag`.")


class RenderReply(Reply):
    """Reply to render."""

    envelope: Envelope | None = Field(description="Null when nothing is left to render.")
    inline: InlinePlacement | None = Field(
        default=None, description="Only when the render carried user_text and an envelope."
    )
    summary: RenderSummary | None = Field(
        default=None,
        description="What the render cost and held back (§12.1); on every render reply "
        "(absent only in replies recorded before it existed).",
    )
    dropped: list[DroppedDirective] | None = Field(
        default=None, description="Reminders dropped by this render (§5.4); absent when none."
    )


class MuteReply(Reply):
    """Reply to mute."""

    mute_id: str = Field(description="The new mute's id, for `unmute`.")


class UnmuteReply(Reply):
    """Reply to unmute."""

    mute_id: str = Field(description="The mute that ended.")


class SanitizeReply(Reply):
    """Reply to sanitize (SPEC §12.5). The log records it without `text`."""

    neutralized: int = Field(description="How many tags were escaped.")
    text: str | None = Field(
        default=None,
        description="The input with every directive-shaped tag escaped; on the wire always, "
        "in the log never (added to the reply after it is recorded).",
    )


class AcknowledgeReply(Reply):
    """Reply to acknowledge (SPEC §12.3)."""

    reminder_id: str = Field(description="The reminder acknowledged.")
    outcome: str = Field(description="The outcome recorded.")
    already_acknowledged: bool = Field(
        description="True when the same outcome was recorded before: nothing was appended."
    )


class EndTurnReply(Reply):
    """Reply to end_turn."""

    expired_count: int = Field(description="Reminders expired by this pass.")
    decremented_count: int = Field(description="Reminders whose TTL went down.")
    remaining_count: int = Field(description="Live reminders after the pass.")


class AlreadyAppliedReply(Reply):
    """The boundary (or handoff) was already applied; nothing was appended."""

    already_applied: Literal[True] = Field(default=True, description="Always true.")


class CompactReply(Reply):
    """Reply to compact."""

    expired_count: int = Field(description="Expired by the pre-compact TTL pass.")
    compacted_count: int = Field(description="Expired because not preserved.")
    preserved_count: int = Field(description="Survivors re-armed for the next render.")
    directives_cleared: int = Field(description="Directives in the cleared history.")


class HandoffReply(Reply):
    """Reply to handoff."""

    propagated_ids: list[str] = Field(description="Reminder ids handed to the child.")


class InheritReply(Reply):
    """Reply to the propagator's inherit."""

    inherited_ids: list[str] = Field(description="Reminders now live in the child.")
    skipped_ids: list[str] = Field(description="Already live in the child; left alone.")


class ErrorReply(BaseModel):
    """Every failed reply."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ok: Literal[False] = Field(default=False, description="Always false on failure.")
    error: ErrorBody = Field(description="The coded error.")

    def to_wire(self) -> dict[str, Any]:
        """The JSON object sent on the bus."""
        return self.model_dump(mode="json")


class EvaluateReply(Reply):
    """Reply to evaluate (SPEC §4.10.1)."""

    injected_ids: list[str] = Field(description="Reminders injected, in evaluation order.")
    evaluated_count: int = Field(description="`provider_evaluated` events appended.")

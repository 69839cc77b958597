"""The session state of SPEC §6.2: what the projector stores and what replay prints.

Choices where the SPEC is silent, written down here:
- `recent_replies` is a list of `{request_id, reply}` rows in commit order, not a JSON
  object: canonical JSON sorts object keys, which would lose the eviction order of the
  last-256 window after a round trip through the KV store.
- `degraded` is null or `{stream_seq, code}` of the first poison message (§6.4).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.events import AckOutcome, MuteSelector
from contracts.spec import DeliveryMode, ResolvedSpec

#: Envelopes kept in full in `delivered`; older ones keep only their digest (§6.2).
FULL_ENVELOPES_KEPT = 64
#: Stored bytes of envelope text kept in full (§4.1.1): the newest envelopes within it (the
#: newest always), older ones as digests. A constant of the state, not a setting: the fold
#: reads no configuration, so a replay anywhere gives the same bytes.
FULL_ENVELOPE_TEXT_BYTES = 256 * 1024
#: Request ids whose replies the state remembers (§4.1).
RECENT_REPLIES_KEPT = 256
#: Stored bytes the remembered replies (request id and reply) may take (§4.1.1): the newest
#: within it are kept. A render's reply is kept without its envelope text, which is rebuilt
#: from its `delivered` row (not stored twice).
RECENT_REPLIES_BYTES = 128 * 1024


class StateModel(BaseModel):
    """Base of state rows: frozen, no unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class QueuedRow(StateModel):
    """A reminder waiting for a seam."""

    reminder: ResolvedSpec = Field(description="The full spec.")
    mode: DeliveryMode = Field(description="Which seams drain it.")
    position: int = Field(description="1-based FIFO position.")


class PendingRow(StateModel):
    """A live reminder."""

    spec: ResolvedSpec = Field(description="The full spec as injected.")
    ttl_remaining: int | None = Field(description="Turns left; null = no TTL.")
    delivered: bool = Field(description="Already committed in an envelope since compaction.")
    delivered_at_turn: int | None = Field(description="Turn of that envelope.")
    audit_only: bool = Field(description="Recorded only, never rendered.")
    provider_id: str | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="The provider that injected it (from its `provider_evaluated`), for "
        "`provider_id` mutes; absent for reminders no provider injected.",
    )


class ActiveMute(StateModel):
    """A mute in force in the session (SPEC §12.2)."""

    mute_id: str = Field(description="The mute's id.")
    selector: MuteSelector = Field(description="What it holds back.")
    until_turn: int | None = Field(description="Ends at this turn's post-turn; null = unmute.")


class DeliveredEnvelope(StateModel):
    """A committed envelope kept in full (the last 64)."""

    turn_number: int = Field(description="The render's turn.")
    speaker: Literal["harness", "person"] = Field(description="The speaker.")
    directive_ids: list[str] = Field(description="Reminder ids in rendered order.")
    text: str = Field(description="The exact envelope text.")
    format: Literal["context-directives", "system-reminder"] = Field(description="Its format.")
    nonce: str | None = Field(description="The nonce in the opening tag, if any.")


class DeliveredDigest(StateModel):
    """An older committed envelope, kept as its digest only."""

    turn_number: int = Field(description="The render's turn.")
    directive_ids: list[str] = Field(description="Reminder ids in rendered order.")
    text_sha256: str = Field(description="SHA-256 hex of the envelope text.")


class RecentReply(StateModel):
    """The reply first sent for a request id."""

    request_id: str = Field(description="The idempotency key.")
    reply: dict[str, Any] = Field(description="The reply, exactly as sent (no `inline`).")


class DegradedMark(StateModel):
    """Where a poison message hit this session (§6.4)."""

    stream_seq: int = Field(description="Stream sequence of the offending message.")
    code: str = Field(description="Why it was refused.")


class ProviderMark(StateModel):
    """What the log says about one provider in the session (folded from
    `provider_evaluated`): its once-latch and its threshold latch."""

    fired_count: int = Field(default=0, description="Evaluations that fired (once-latch > 0).")
    level: int | None = Field(
        default=None, description="Latch value recorded by its last evaluation."
    )
    last_fired_turn: int | None = Field(default=None, description="Turn it last fired.")


class ProvidersState(StateModel):
    """The providers' trail folded into the session (SPEC §9.2–§9.3)."""

    marks: dict[str, ProviderMark] = Field(
        default_factory=dict, description="Per provider id, its latches."
    )
    evaluations: int = Field(default=0, description="`provider_evaluated` events applied.")
    budget_turn: int | None = Field(
        default=None, description="The turn `budget_bytes` counts provider bodies for."
    )
    budget_bytes: int = Field(
        default=0, description="UTF-8 bytes of provider bodies injected in `budget_turn`."
    )


class SessionState(StateModel):
    """One session's state, canonical JSON with sorted keys (SPEC §6.2)."""

    session_id: str = Field(default="", description="The session; empty before any event.")
    session_seq: int = Field(default=0, description="session_seq of the last applied event.")
    stream_seq: int = Field(default=0, description="Stream sequence of the last applied event.")
    turn: int = Field(default=0, description="Highest turn seen.")
    last_ended_turn: int | None = Field(default=None, description="Last TTL pass turn.")
    queued: list[QueuedRow] = Field(default_factory=list, description="FIFO queue.")
    pending: list[PendingRow] = Field(default_factory=list, description="Live, injection order.")
    delivered: list[DeliveredEnvelope | DeliveredDigest] = Field(
        default_factory=list, description="Envelopes since the last compaction."
    )
    compactions: int = Field(default=0, description="How many compactions happened.")
    counters: dict[str, int] = Field(default_factory=dict, description="Events per kind.")
    revoked_ids: list[str] = Field(default_factory=list, description="Revoked reminder ids.")
    seen_ids: list[str] = Field(default_factory=list, description="Every reminder id seen.")
    recent_replies: list[RecentReply] = Field(
        default_factory=list, description="Replies of the last 256 request ids, commit order."
    )
    inherited_from: list[str] = Field(
        default_factory=list, description="`handed_off` event ids already applied."
    )
    nonce: str | None = Field(default=None, description="The session nonce, once decided.")
    degraded: DegradedMark | None = Field(default=None, description="Poison message mark.")
    chain_head: str = Field(default="", description="`chain` of the last applied event.")
    providers: ProvidersState | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Provider latches and per-turn budget, once a provider was evaluated in "
        "the session (absent before, so states without providers keep their bytes).",
    )
    mutes: list[ActiveMute] = Field(
        default_factory=list,
        exclude_if=lambda value: not value,
        description="Mutes in force, oldest first (absent when none, so states without "
        "mutes keep their bytes).",
    )
    last_occurred_at: str | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="`occurred_at` of the last applied event: a command's time is never "
        "earlier (SPEC §12.4) (absent before the first event).",
    )
    fired_ids: list[str] = Field(
        default_factory=list,
        exclude_if=lambda value: not value,
        description="Every reminder id fired (delivered) at least once, in first-delivery "
        "order: what `acknowledge` `acted`/`ignored` needs (SPEC §12.3), known after the "
        "reminder expired or a compaction cleared the history (absent when none).",
    )
    acknowledged: dict[str, list[AckOutcome]] = Field(
        default_factory=dict,
        exclude_if=lambda value: not value,
        description="Per reminder id, the outcomes acknowledged, in order: a repeat of one "
        "is a no-op (SPEC §12.3) (absent when none).",
    )

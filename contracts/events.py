"""The event envelope (SPEC §3.3) and one payload model per kind (SPEC §3.5).

Events are facts in the past tense. Payload field names follow the reference runtime's
lifecycle records so existing tooling reads them as they are.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from contracts.kinds import payload_by_kind, require_payload_kind
from contracts.spec import Authority, DeliveryMode, Propagate, ResolvedSpec, RoleHint, Source

SCHEMA_V1: Final = "reminder-ledger.event/v1"
"""The only envelope version this build reads and writes (SPEC §3.7)."""

EventKind = Literal[
    "queued",
    "injected",
    "deduped",
    "revoked",
    "fired",
    "delivered",
    "post_turn",
    "expired",
    "dropped",
    "compacted",
    "handed_off",
    "inherited",
    "provider_evaluated",
    "withheld",
    "muted",
    "unmuted",
    "forged_directive_neutralized",
    "acknowledged",
]

AckOutcome = Literal["acted", "ignored", "dismissed"]
"""What became of a reminder (SPEC §12.3)."""
AckBy = Literal["host", "model", "operator"]
"""Who acknowledged it (SPEC §12.3)."""


class Payload(BaseModel):
    """Base of every payload: frozen, no unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Redacting(Payload):
    """A payload that ingests a body: `redactions` (SPEC §10), left out when 0 so a log
    written without redaction is byte for byte what it was before the field existed."""

    redactions: int = Field(
        default=0,
        ge=0,
        exclude_if=lambda count: count == 0,
        description="Secrets replaced by [REDACTED:<kind>] at ingest.",
    )


class Queued(Redacting):
    """A reminder was queued for a seam."""

    reminder: ResolvedSpec = Field(description="The full spec, id and fired_at_turn set.")
    mode: DeliveryMode = Field(description="Which seams drain it.")
    position: int = Field(description="1-based FIFO position, never reused in the session.")


class Injected(Redacting):
    """A reminder became live (pending) in the session."""

    reminder_id: str = Field(description="The reminder's id.")
    tags: list[str] = Field(description="Its tags.")
    dedupe_key: str | None = Field(description="Its dedupe key.")
    source: Source = Field(description="Who produced it.")
    role_hint: RoleHint = Field(description="Its role hint.")
    authority: Authority = Field(description="Its authority.")
    ttl_turns: int | None = Field(description="Its TTL at injection.")
    propagate: Propagate = Field(description="Its propagation.")
    originating_agent_id: str | None = Field(description="The first emitter.")
    audit_only: bool = Field(description="Recorded only, never rendered (loop_exit drain).")
    reminder: ResolvedSpec = Field(description="The full spec, body included.")


class Deduped(Payload):
    """Live reminders with the newcomer's dedupe key were removed."""

    reminder_id: str = Field(description="The newcomer, or the survivor at compaction.")
    replacing_id: str = Field(description="The same id again (reference runtime's name).")
    replaced_id: str = Field(description="The first reminder removed.")
    replaced_ids: list[str] = Field(description="Every reminder removed, in injection order.")
    dropped_reminder_ids: list[str] = Field(
        description="The same list as `replaced_ids`, under the reference runtime's name."
    )
    dedupe_key: str = Field(description="The shared key.")
    dropped_count: int = Field(description="How many were removed.")
    boundary: Literal["inject", "compact"] = Field(
        description="`inject`, or `compact` for the dedupe of preserved survivors (§4.8 2b)."
    )


class Revoked(Payload):
    """A queued reminder was withdrawn."""

    reminder_id: str = Field(description="The revoked reminder.")


class Fired(Payload):
    """A reminder was rendered as a directive of an envelope."""

    reminder_id: str = Field(description="The reminder.")
    turn_number: int = Field(description="The render's turn.")
    tags: list[str] = Field(description="Its tags.")
    dedupe_key: str | None = Field(description="Its dedupe key.")
    source: Source = Field(description="Who produced it.")
    role_hint: RoleHint = Field(description="Its role hint.")
    authority: Authority = Field(description="Its authority.")
    rendered_role: Literal["user"] = Field(description="The message role it was rendered in.")
    ttl_turns: int | None = Field(description="Its TTL remaining when rendered.")
    propagate: Propagate = Field(description="Its propagation.")
    originating_agent_id: str | None = Field(description="The first emitter.")
    body: str = Field(description="Its body, unescaped.")


class RenderSummary(Payload):
    """What one render cost and what it held back (SPEC §12.1).

    The same object is the render reply's top-level `summary`; `by_authority` and
    `by_source` list only non-zero counts.
    """

    directives: int = Field(description="Directives in the envelope.")
    by_authority: dict[str, int] = Field(description="Directives per authority (non-zero).")
    by_source: dict[str, int] = Field(description="Directives per source (non-zero).")
    bytes: int = Field(description="UTF-8 bytes of the whole envelope text (0 when none).")
    est_tokens: int = Field(description="Estimated tokens of the whole envelope text.")
    estimator: str = Field(description="The named estimator, e.g. `utf8_bytes/4`.")
    budget_tokens: int | None = Field(description="The token budget applied, or null.")
    shed_ids: list[str] = Field(description="Eligible reminders shed to fit the budget.")
    muted_ids: list[str] = Field(description="Eligible reminders held back by a mute.")
    not_yet_ids: list[str] = Field(description="Reminders whose `not_before` is still ahead.")
    dropped_ids: list[str] = Field(description="Reminders dropped at this render (§5.4).")
    over_budget: bool = Field(description="Contract directives alone exceed the budget.")


class Delivered(Payload):
    """An envelope was committed to the transcript."""

    turn_number: int = Field(description="The render's turn.")
    format: Literal["context-directives", "system-reminder"] = Field(description="Its format.")
    speaker: Literal["harness", "person"] = Field(description="The speaker (§5.3).")
    nonce: str | None = Field(description="The session nonce, when configured.")
    instructions: str = Field(description="The instructions paragraph used (may be empty).")
    directive_ids: list[str] = Field(description="Reminder ids, in rendered order.")
    text: str = Field(description="The exact envelope text.")
    text_sha256: str = Field(description="SHA-256 hex of the UTF-8 text.")
    summary: RenderSummary | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="What the render cost and held back (§12.1); absent only in logs "
        "written before the summary existed, which keep their bytes.",
    )


class PostTurn(Payload):
    """The post-turn TTL pass ran."""

    turn_number: int = Field(description="The turn that ended.")
    decremented_ids: list[str] = Field(description="Reminders whose TTL went down by one.")
    expired_count: int = Field(description="Reminders that expired in this pass.")
    decremented_count: int = Field(description="len(decremented_ids).")
    remaining_count: int = Field(description="Live reminders after the pass.")


ExpiredReason = Literal["ttl", "compaction", "cleared", "deadline", "dismissed"]
"""Why a live reminder left the session."""
ExpiredBoundary = Literal["post_turn", "pre_compact", "clear", "deadline", "acknowledge"]
"""Which boundary removed it."""


class Expired(Payload):
    """A live reminder left the session."""

    reminder_id: str = Field(description="The reminder.")
    reason: ExpiredReason = Field(description="Why.")
    ttl_turns_before: int | None = Field(description="Its TTL remaining before.")
    expired_at_turn: int = Field(description="The turn of the boundary.")
    expired_at_boundary: ExpiredBoundary = Field(description="Which boundary removed it.")


class Dropped(Payload):
    """A reminder was refused at render time and left the session."""

    reminder_id: str = Field(description="The reminder.")
    reason: Literal["invalid", "capability_mismatch"] = Field(description="Why.")
    code: str = Field(description="Machine code, e.g. `spoofed_tag`.")
    error: str = Field(description="Human-readable explanation (never the body).")


class Compacted(Payload):
    """The host compacted: delivered history cleared, preserved reminders re-armed."""

    turn_number: int = Field(description="The compaction's turn.")
    decremented_ids: list[str] = Field(description="TTL decrements of the pre-compact pass.")
    preserved_ids: list[str] = Field(description="Survivors kept, now undelivered.")
    directives_cleared: int = Field(description="Directives in the cleared delivered history.")


class HandedOff(Payload):
    """The parent handed reminders to a sub-agent session."""

    child_session_id: str = Field(description="The sub-agent's session.")
    sub_agent_id: str = Field(description="The sub-agent.")
    propagated_ids: list[str] = Field(description="Ids handed over.")
    reminders: list[ResolvedSpec] = Field(description="The specs exactly as the child gets them.")


class Inherited(Payload):
    """A reminder arrived from a parent session (after its `injected`)."""

    reminder_id: str = Field(description="The reminder.")
    originating_agent_id: str | None = Field(description="The first emitter.")
    sub_agent_id: str = Field(description="The receiving sub-agent.")
    parent_session_id: str = Field(description="The session it came from.")
    propagate: Propagate = Field(description="Its propagation.")


#: Why a provider fired or not (SPEC §9.2): short, stable codes.
EvaluationReason = Literal[
    "fired",
    "below_threshold",
    "threshold_already_reported",
    "predicate_false",
    "once_latched",
    "unchanged_durable_reminder",
    "disabled",
    "malformed_spec",
    "provider_error",
    "budget_exceeded",
    "muted",
]


class ProviderEvaluated(Payload):
    """A provider was evaluated against a runtime event (SPEC §3.5, §9.2).

    `level` and `view_seq` are this build's additions: `level` is the provider's latch value
    after this evaluation (token_pressure: the highest threshold at or below the reading, in
    per mille, or null below the lowest), which the fold records so a threshold is never
    reported twice; `view_seq` is the `session_seq` of the session view the provider saw,
    so `replay --verify` re-derives the evaluation against exactly that view.
    """

    provider_id: str = Field(description="The provider (built-in, rule or plug-in id).")
    event: str = Field(description="The runtime event kind.")
    runtime_event_id: str = Field(description="The runtime event evaluated.")
    fired: bool = Field(description="Whether it produced a reminder that was injected.")
    reason: str = Field(
        description="Why it fired or not: one of the §9.2 codes (`EvaluationReason`); the "
        "reader accepts any string so a later code never makes an old log unreadable."
    )
    reminder_id: str | None = Field(description="The reminder injected, when it fired.")
    error: str | None = Field(description="Coded error (`HARN-RMD-006 ...`), if it failed.")
    level: int | None = Field(
        default=None, description="The provider's latch value after this evaluation."
    )
    view_seq: int | None = Field(
        default=None, description="session_seq of the session view the provider saw."
    )


class Withheld(Payload):
    """A render delivered nothing while eligible reminders were shed, muted or not yet due."""

    turn_number: int = Field(description="The render's turn.")
    summary: RenderSummary = Field(description="What was held back and why (§12.1).")


class MuteSelector(Payload):
    """Which reminders a mute holds back; only the fields given are stored, and every one
    given must match (a tag matches when any tag equals it)."""

    source: Source | None = Field(
        default=None, exclude_if=lambda value: value is None, description="Reminder source."
    )
    tag: Annotated[str, StringConstraints(max_length=128)] | None = Field(
        default=None, exclude_if=lambda value: value is None, description="One of its tags."
    )
    provider_id: Annotated[str, StringConstraints(max_length=128)] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="The provider that injected it; the provider is also not evaluated.",
    )
    dedupe_key: Annotated[str, StringConstraints(max_length=256)] | None = Field(
        default=None, exclude_if=lambda value: value is None, description="Its dedupe key."
    )


class Muted(Payload):
    """A mute began in the session (SPEC §12.2)."""

    mute_id: str = Field(description="The mute's id, derived from the command.")
    selector: MuteSelector = Field(description="What it holds back (given fields only).")
    until_turn: int | None = Field(description="Ends at this turn's post-turn; null = unmute.")


class Unmuted(Payload):
    """A mute ended on `unmute` (a mute past its `until_turn` ends with the post-turn)."""

    mute_id: str = Field(description="The mute that ended.")


class ForgedDirectiveNeutralized(Payload):
    """Directive-shaped tags in a tool result were escaped (SPEC §12.5); never the text."""

    turn_number: int = Field(description="The turn of the sanitize.")
    tool_name: str | None = Field(description="The tool whose output it was, if given.")
    count: int = Field(description="Tags neutralised.")
    input_sha256: str = Field(description="SHA-256 hex of the UTF-8 input text.")


class Acknowledged(Redacting):
    """Someone said what became of a reminder (SPEC §12.3); `dismissed` also removes it
    (an `expired {reason: dismissed}` in the same batch)."""

    reminder_id: str = Field(description="The reminder acknowledged.")
    turn_number: int = Field(description="The acknowledgement's turn.")
    outcome: AckOutcome = Field(
        description="`acted` (it did what it asked), `ignored` (delivered, no effect) or "
        "`dismissed` (asked to go)."
    )
    by: AckBy = Field(description="Who acknowledged it: `host`, `model` or `operator`.")
    note: str | None = Field(
        description="A free note of at most 256 characters (redacted like bodies), or null."
    )


AnyPayload = (
    Queued
    | Injected
    | Deduped
    | Revoked
    | Fired
    | Delivered
    | PostTurn
    | Expired
    | Dropped
    | Compacted
    | HandedOff
    | Inherited
    | ProviderEvaluated
    | Withheld
    | Muted
    | Unmuted
    | ForgedDirectiveNeutralized
    | Acknowledged
)


#: The kind of each payload model, for emitting events from a payload alone.
KIND_OF: dict[type[Payload], EventKind] = {
    Queued: "queued",
    Injected: "injected",
    Deduped: "deduped",
    Revoked: "revoked",
    Fired: "fired",
    Delivered: "delivered",
    PostTurn: "post_turn",
    Expired: "expired",
    Dropped: "dropped",
    Compacted: "compacted",
    HandedOff: "handed_off",
    Inherited: "inherited",
    ProviderEvaluated: "provider_evaluated",
    Withheld: "withheld",
    Muted: "muted",
    Unmuted: "unmuted",
    ForgedDirectiveNeutralized: "forged_directive_neutralized",
    Acknowledged: "acknowledged",
}
PAYLOADS: dict[str, type[Payload]] = {kind: model for model, kind in KIND_OF.items()}


class Event(BaseModel):
    """One message of the log: the envelope of SPEC §3.3 around a typed payload."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_: Literal["reminder-ledger.event/v1"] = Field(
        alias="schema", description="Envelope version."
    )
    event_id: str = Field(description="UUIDv7; also the `Nats-Msg-Id`.")
    kind: EventKind = Field(description="What happened; also the subject's kind token.")
    session_id: str = Field(description="The session.")
    agent_id: str = Field(description="The acting agent; defaults to the session id.")
    task_id: str | None = Field(description="The host task, if any.")
    session_seq: int = Field(ge=1, description="1-based, contiguous per session.")
    turn: int = Field(ge=0, description="The command's turn, else the highest seen.")
    occurred_at: str = Field(description="The gateway's clock at decision time (RFC 3339).")
    command_id: str = Field(description="Id of the command that decided it.")
    request_id: str | None = Field(description="The command's idempotency key.")
    payload: AnyPayload = Field(description="Kind-specific facts (SPEC §3.5).")
    reply: dict[str, Any] | None = Field(
        description="On the last event of a command: the reply that was sent."
    )
    chain: str = Field(description="Hash chain link (SPEC §3.3.1).")

    @model_validator(mode="before")
    @classmethod
    def _payload_by_kind(cls, data: Any) -> Any:
        return payload_by_kind(data, PAYLOADS)

    @model_validator(mode="after")
    def _payload_matches_kind(self) -> Event:
        require_payload_kind(self.payload, self.kind, PAYLOADS)
        return self

    def to_wire(self) -> dict[str, Any]:
        """The JSON object of SPEC §3.3, `chain` included."""
        return self.model_dump(mode="json", by_alias=True)

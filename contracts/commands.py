"""Commands of SPEC §4 (imperative, one model per op) and their parsing into coded errors."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from contracts.errors import ErrorCode, ReminderError, WarningBody
from contracts.events import AckBy, AckOutcome, EvaluationReason, MuteSelector
from contracts.spec import (
    DEFAULT_MAX_BODY_BYTES,
    MAX_WIRE_INT,
    DeliveryMode,
    ReminderSpec,
    Source,
    error_from_validation,
    has_control_chars,
    is_utf8_encodable,
    normalize_mode,
    parse_reminder,
)


def _check_session_id(value: str) -> str:
    if has_control_chars(value) or not is_utf8_encodable(value):
        raise ValueError("must not contain control characters")
    return value


def _check_text(value: str) -> str:
    if not is_utf8_encodable(value):
        raise ValueError("must be valid Unicode text")
    return value


SessionId = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_check_session_id)]
"""A session id: 1–256 characters, no control characters (SPEC §1)."""
Identifier = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_check_session_id)]
"""An agent, task, request or reminder id on the wire."""
Turn = Annotated[int, Field(ge=0, le=MAX_WIRE_INT)]
"""The host's turn counter."""
RenderFormat = Literal["context-directives", "system-reminder"]
Seam = Literal[
    "iteration_start",
    "post_tool_dispatch",
    "iteration_end",
    "pre_tool_dispatch",
    "daemon_idle_pre",
    "daemon_idle_post",
    "loop_exit",
]

#: Seam aliases of SPEC §4.4.
SEAM_ALIASES: dict[str, Seam] = {
    "iteration_start": "iteration_start",
    "turn_start": "iteration_start",
    "post_tool_dispatch": "post_tool_dispatch",
    "iteration_end": "iteration_end",
    "turn_end": "iteration_end",
    "pre_tool_dispatch": "pre_tool_dispatch",
    "daemon_idle_pre": "daemon_idle_pre",
    "daemon_idle_post": "daemon_idle_post",
    "loop_exit": "loop_exit",
}

#: Bound on the `text` of a `sanitize` in UTF-8 bytes (SPEC §12.5).
MAX_SANITIZE_TEXT_BYTES = 256 * 1024

#: Default bound on `user_text` of a render in UTF-8 bytes (SPEC §4.1.1): it is never
#: stored, but it is copied into the reply (configurable through the core config).
MAX_USER_TEXT_BYTES = 64 * 1024


class Command(BaseModel):
    """Fields every command may carry (SPEC §4.1)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    op: ClassVar[str]

    session_id: SessionId = Field(description="The session the command acts on.")
    agent_id: Identifier | None = Field(
        default=None, description="The acting agent; defaults to the session id."
    )
    task_id: Identifier | None = Field(default=None, description="Optional host task id.")
    request_id: Identifier | None = Field(
        default=None, description="Idempotency key: a repeat returns the first reply."
    )


class Inject(Command):
    """Add a reminder, directly into `pending` or queued for a seam (SPEC §4.2)."""

    op: ClassVar[str] = "inject"
    mode: DeliveryMode | None = Field(
        default=None, description="Queue for a seam; null injects straight into pending."
    )
    reminder: ReminderSpec = Field(description="The reminder to add.")


class ClearSelector(BaseModel):
    """Which live reminders a `clear` removes; every present selector must match."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    id: str | None = Field(default=None, description="Reminder id.")
    tag: str | None = Field(default=None, description="Matches when any tag equals it.")
    dedupe_key: str | None = Field(default=None, description="Dedupe key.")


class Clear(Command):
    """Expire live reminders that match a selector (SPEC §4.3)."""

    op: ClassVar[str] = "clear"
    selector: ClearSelector = Field(description="Trimmed; empty values are ignored.")


class Checkpoint(Command):
    """Drain queued reminders at a seam of the host loop (SPEC §4.4)."""

    op: ClassVar[str] = "checkpoint"
    seam: Seam = Field(description="The seam reached (aliases resolved on parse).")
    turn: Turn = Field(description="The host's current turn.")


class Revoke(Command):
    """Withdraw a queued reminder before it drains (SPEC §4.5)."""

    op: ClassVar[str] = "revoke"
    reminder_id: Identifier = Field(description="The queued reminder to withdraw.")


class Render(Command):
    """Build the envelope for a prompt (SPEC §4.6, §5)."""

    op: ClassVar[str] = "render"
    turn: Turn = Field(description="The turn being built.")
    format: RenderFormat | None = Field(
        default=None, description="Envelope format; null uses the configured default."
    )
    user_text: Annotated[str, AfterValidator(_check_text)] | None = Field(
        default=None, description="When set, the reply also holds the inline placement (§5.5)."
    )
    max_tokens: Annotated[int, Field(ge=1, le=MAX_WIRE_INT)] | None = Field(
        default=None,
        description="Token budget of the envelope (§12.1); null uses the session default.",
    )


class EndTurn(Command):
    """The post-turn boundary: TTL pass (SPEC §4.7)."""

    op: ClassVar[str] = "end_turn"
    turn: Turn = Field(description="The turn that ended.")


class Compact(Command):
    """The host compacted its transcript (SPEC §4.8)."""

    op: ClassVar[str] = "compact"
    turn: Turn = Field(description="The turn at which compaction happened.")


class Handoff(Command):
    """Hand propagating reminders to a sub-agent's session (SPEC §4.9)."""

    op: ClassVar[str] = "handoff"
    child_session_id: SessionId = Field(description="The sub-agent's session.")
    sub_agent_id: Identifier | None = Field(
        default=None, description="The sub-agent; defaults to the child session id."
    )
    child_turn: Turn = Field(
        default=0,
        description="The child's current turn, used as the inherited `fired_at_turn` "
        "(a new sub-agent session starts at 0).",
    )


class Inherit(Command):
    """Child side of a handoff, issued by the propagator for one `handed_off` event."""

    op: ClassVar[str] = "inherit"
    parent_session_id: SessionId = Field(description="The session that handed off.")
    parent_agent_id: Identifier = Field(description="The parent's agent id.")
    handoff_event_id: Identifier = Field(description="The `handed_off` event applied.")
    sub_agent_id: Identifier = Field(description="The sub-agent receiving the reminders.")
    reminders: list[ReminderSpec] = Field(description="The specs exactly as handed off.")


class Mute(Command):
    """Hold back matching reminders (and a named provider) in one session (SPEC §12.2)."""

    op: ClassVar[str] = "mute"
    selector: MuteSelector = Field(description="Trimmed; empty values ignored; one at least.")
    until_turn: Turn | None = Field(
        default=None, description="The mute ends at this turn's post-turn; null = until unmute."
    )


class Unmute(Command):
    """End an active mute (SPEC §12.2)."""

    op: ClassVar[str] = "unmute"
    mute_id: Identifier = Field(description="The mute to end.")


class Sanitize(Command):
    """Escape directive-shaped tags in a tool result before the model sees it (SPEC §12.5)."""

    op: ClassVar[str] = "sanitize"
    text: Annotated[str, AfterValidator(_check_text)] = Field(
        description="The tool output, at most 256 KiB of UTF-8; never stored."
    )
    turn: Turn = Field(description="The host's current turn.")
    tool_name: Identifier | None = Field(default=None, description="The tool it came from.")


#: Bound on an acknowledgement's `note` in characters (SPEC §12.3).
MAX_NOTE_CHARS = 256


class Acknowledge(Command):
    """Say what became of a reminder: acted on, ignored, or dismissed (SPEC §12.3)."""

    op: ClassVar[str] = "acknowledge"
    reminder_id: Identifier = Field(description="The reminder acknowledged.")
    turn: Turn = Field(description="The host's current turn.")
    outcome: AckOutcome = Field(description="`acted`, `ignored` or `dismissed`.")
    by: AckBy = Field(default="host", description="`host` (default), `model` or `operator`.")
    note: Annotated[str, Field(max_length=MAX_NOTE_CHARS), AfterValidator(_check_text)] | None = (
        Field(default=None, description="At most 256 characters; redacted like bodies.")
    )


class Forget(Command):
    """Purge a session from the log (operator only, SPEC §4.11)."""

    op: ClassVar[str] = "forget"


class StateQuery(Command):
    """Read the projected session state (SPEC §4.10)."""

    op: ClassVar[str] = "state"
    min_seq: Annotated[int, Field(ge=0, le=MAX_WIRE_INT)] | None = Field(
        default=None, description="Wait until at least this session_seq is projected."
    )
    timeout_ms: Annotated[int, Field(ge=0, le=60_000)] | None = Field(
        default=None, description="How long to wait for the projection (default 2000)."
    )


class PendingInjectionsQuery(Command):
    """List queued reminders in FIFO order (SPEC §4.10)."""

    op: ClassVar[str] = "pending_injections"
    timeout_ms: Annotated[int, Field(ge=0, le=60_000)] | None = Field(
        default=None, description="How long to wait for the projection (default 2000)."
    )


class EventsQuery(Command):
    """One page of a session's stored events, exactly as stored, in session order (read-only,
    for auditors; SPEC §7.1, §10.1)."""

    op: ClassVar[str] = "events"
    after_stream_seq: Annotated[int, Field(ge=0, le=MAX_WIRE_INT)] = Field(
        default=0,
        description="Only events stored after this stream sequence: 0 for the session's "
        "first page, else the previous page's `next_after_stream_seq`.",
    )
    from_session_seq: Annotated[int, Field(ge=1, le=MAX_WIRE_INT)] | None = Field(
        default=None, description="Only events with at least this session_seq."
    )


class SessionsQuery(Command):
    """One page of the caller tenant's session ids, from the projection (read-only, for
    auditors' `--all`; SPEC §10.1)."""

    op: ClassVar[str] = "sessions"
    session_id: None = Field(  # type: ignore[assignment]
        default=None, description="Never given: the listing is of the caller's own tenant."
    )
    after: Annotated[int, Field(ge=0, le=MAX_WIRE_INT)] = Field(
        default=0,
        description="Where the previous page stopped (its `next_after`); 0 for the first page.",
    )


class Evaluation(BaseModel):
    """One provider's evaluation of a runtime event, as the providers service decided it."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    provider_id: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        description="The provider, rule or plug-in id."
    )
    event: Annotated[str, Field(min_length=1, max_length=64)] = Field(
        description="The runtime event kind."
    )
    fired: bool = Field(description="Whether the provider produced a reminder.")
    reason: EvaluationReason = Field(description="Why it fired or not (§9.2).")
    error: Annotated[str, Field(max_length=1024)] | None = Field(
        default=None, description="Coded error when it failed."
    )
    reminder: dict[str, Any] | None = Field(
        default=None,
        description="The reminder to inject when it fired; validated by the gateway, which "
        "turns a rejected one into `fired: false, reason: malformed_spec`.",
    )
    reminder_id: Annotated[str, Field(min_length=1, max_length=128)] | None = Field(
        default=None,
        description="For `unchanged_durable_reminder`: the live reminder the skip kept.",
    )
    once: bool = Field(
        default=False,
        description="A once-latch: the gateway refuses to fire it again in the session.",
    )
    level: Annotated[int, Field(ge=0, le=1_000_000)] | None = Field(
        default=None,
        description="Threshold latch value: the gateway refuses to fire it unless it is "
        "above the level last recorded for the provider.",
    )


class Evaluate(Command):
    """Record a runtime event's provider evaluations and inject what fired (SPEC §4.10.1).

    Sent by the providers service only; its `request_id` is derived from `runtime_event_id`.
    """

    op: ClassVar[str] = "evaluate"
    turn: Turn = Field(description="The runtime event's turn.")
    runtime_event_id: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        description="The runtime event evaluated."
    )
    view_seq: Annotated[int, Field(ge=0, le=MAX_WIRE_INT)] | None = Field(
        default=None, description="session_seq of the session view the providers saw."
    )
    evaluations: Annotated[list[Evaluation], Field(max_length=64)] = Field(
        description="Every evaluation, in configuration order."
    )


#: Commands the core decides (they append events).
DECIDED_COMMANDS: tuple[type[Command], ...] = (
    Inject,
    Clear,
    Checkpoint,
    Revoke,
    Render,
    EndTurn,
    Compact,
    Handoff,
    Inherit,
    Evaluate,
    Mute,
    Unmute,
    Sanitize,
    Acknowledge,
)
_ALL_COMMANDS: tuple[type[Command], ...] = (
    *DECIDED_COMMANDS,
    Forget,
    StateQuery,
    PendingInjectionsQuery,
    EventsQuery,
    SessionsQuery,
)
COMMANDS: dict[str, type[Command]] = {command.op: command for command in _ALL_COMMANDS}


def _reject(message: str, field: str) -> ReminderError:
    return ReminderError(ErrorCode.INVALID_REQUEST, message, {"field": field})


def _prepare_inject(
    body: dict[str, Any], max_body_bytes: int
) -> tuple[dict[str, Any], list[WarningBody]]:
    if "reminder" not in body:
        raise _reject("missing field: reminder", "reminder")
    spec, warnings = parse_reminder(body["reminder"], max_body_bytes=max_body_bytes)
    return {**body, "reminder": spec, "mode": normalize_mode(body.get("mode"))}, warnings


_SOURCES: frozenset[str] = frozenset(Source.__args__)  # type: ignore[attr-defined]


def _trimmed_selector(body: dict[str, Any], fields: dict[str, Any], what: str) -> dict[str, str]:
    """The selector object of `body`, trimmed, empty values dropped; HARN-RMD-001 for a
    missing or empty one, an unknown key or a non-string value (SPEC §4.3, §12.2)."""
    selector = body.get("selector")
    if not isinstance(selector, dict):
        raise ReminderError(
            ErrorCode.INVALID_OPTION, f"{what} needs a selector object", {"field": "selector"}
        )
    unknown = sorted(str(key) for key in selector if key not in fields)
    if unknown:
        raise ReminderError(
            ErrorCode.INVALID_OPTION,
            f"unknown option(s): {', '.join(unknown)}",
            {"unknown": unknown},
        )
    trimmed: dict[str, str] = {}
    for key, value in selector.items():
        if value is None:
            continue
        if not isinstance(value, str):
            raise ReminderError(
                ErrorCode.INVALID_OPTION,
                f"invalid selector.{key}: must be a string",
                {"field": f"selector.{key}"},
            )
        if value.strip():
            trimmed[key] = value.strip()
    if not trimmed:
        names = ", ".join(fields)
        raise ReminderError(ErrorCode.INVALID_OPTION, f"{what} needs a selector: {names}")
    return trimmed


def _prepare_mute(body: dict[str, Any]) -> dict[str, Any]:
    selector = _trimmed_selector(body, dict(MuteSelector.model_fields), "mute")
    source = selector.get("source")
    if source is not None and source not in _SOURCES:
        raise ReminderError(
            ErrorCode.INVALID_OPTION,
            f"invalid selector.source: must be one of {', '.join(sorted(_SOURCES))}",
            {"field": "selector.source"},
        )
    try:
        return {**body, "selector": MuteSelector.model_validate(selector)}
    except ValidationError as exc:
        raise error_from_validation(
            exc, field_codes={}, default=ErrorCode.INVALID_OPTION, prefix="selector."
        ) from None


def _check_text_bytes(body: dict[str, Any], field: str, limit: int) -> None:
    """`too_large` for a text field over `limit` UTF-8 bytes (SPEC §4.1.1). Cheap first: a
    text of at most limit // 4 characters fits whatever its characters."""
    text = body.get(field)
    if isinstance(text, str) and len(text) > limit // 4:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise ReminderError(
                ErrorCode.TOO_LARGE,
                f"{field} is {size} bytes; the bound is {limit}",
                {"field": field, "limit": limit},
            )


def _prepare_clear(body: dict[str, Any]) -> dict[str, Any]:
    selector = _trimmed_selector(body, dict(ClearSelector.model_fields), "clear")
    return {**body, "selector": selector}


def _prepare_inherit(body: dict[str, Any], max_body_bytes: int) -> dict[str, Any]:
    reminders = body.get("reminders")
    if not isinstance(reminders, list):
        raise _reject("reminders must be a list", "reminders")
    specs = [parse_reminder(item, max_body_bytes=max_body_bytes)[0] for item in reminders]
    return {**body, "reminders": specs}


def parse_command(
    op: str,
    raw: object,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_user_text_bytes: int = MAX_USER_TEXT_BYTES,
) -> tuple[Command, list[WarningBody]]:
    """Validate a raw JSON value as the command `op`, or raise the coded error of §2.2.

    Returns the command and the warnings its reply must carry.
    """
    cls = COMMANDS.get(op)
    if cls is None:
        raise ReminderError(ErrorCode.INVALID_REQUEST, f"unknown op: {op[:64]!r}", {"op": op})
    if not isinstance(raw, dict):
        raise ReminderError(ErrorCode.INVALID_REQUEST, "a command must be a JSON object")
    body: dict[str, Any] = dict(raw)
    warnings: list[WarningBody] = []
    if cls is Inject:
        body, warnings = _prepare_inject(body, max_body_bytes)
    elif cls is Clear:
        body = _prepare_clear(body)
    elif cls is Inherit:
        body = _prepare_inherit(body, max_body_bytes)
    elif cls is Mute:
        body = _prepare_mute(body)
    elif cls is Sanitize:
        _check_text_bytes(body, "text", MAX_SANITIZE_TEXT_BYTES)
    elif cls is Checkpoint and isinstance(body.get("seam"), str):
        seam = SEAM_ALIASES.get(body["seam"])
        if seam is None:
            raise _reject(f"unknown seam: {body['seam'][:64]!r}", "seam")
        body["seam"] = seam
    _check_text_bytes(body, "user_text", max_user_text_bytes)
    try:
        command = cls.model_validate(body)
    except ValidationError as exc:
        raise error_from_validation(
            exc, field_codes=_FIELD_CODES, default=ErrorCode.INVALID_REQUEST
        ) from None
    return command, warnings


#: Fields whose invalid value is an invalid option (HARN-RMD-001) rather than a malformed
#: request: the render budget and the mute's end turn.
_FIELD_CODES: dict[str, ErrorCode] = {
    "max_tokens": ErrorCode.INVALID_OPTION,
    "until_turn": ErrorCode.INVALID_OPTION,
    "outcome": ErrorCode.INVALID_OPTION,
    "by": ErrorCode.INVALID_OPTION,
    "note": ErrorCode.INVALID_OPTION,
}

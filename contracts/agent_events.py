"""Runtime events a host publishes for the providers service (SPEC §9.1).

One JSON object per message on `agent.events.<kind>.<session_token>` (stream `AGENT_EVENTS`):
`{schema: "reminder-ledger.agent-event/v1", event_id, kind, session_id, agent_id?, turn,
occurred_at, payload}`, with one payload model per kind. `decode_runtime_event` is the one
reader: a message is either a `RuntimeEvent` or a `DecodeError` whose `code` is its stable
dead-letter code (`undecodable`, `invalid_runtime_event`, `unknown_schema`, `wrong_subject`)
and whose reason never quotes the message (a `user_turn` holds the user's text).

Choices where the SPEC is silent: payloads refuse unknown keys (a typo in a host is found at
once, in the DLQ, instead of silently never firing); `event_id` is 1–128 characters (it is the
`Nats-Msg-Id` and the seed of the `evaluate` command's request id); `turn` is required.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contracts.commands import Identifier, SessionId, Turn
from contracts.decode import InvalidEvent, Undecodable, UnknownSchema, subject_mismatch
from contracts.kinds import payload_by_kind, require_payload_kind
from contracts.subjects import parse_agent_event_subject
from contracts.tenants import (
    DEFAULT_TENANT,
    agent_event_tenant,
    is_reserved_session_id,
    scoped_session_id,
)

AGENT_EVENT_SCHEMA_V1: Final = "reminder-ledger.agent-event/v1"

RuntimeEventKind = Literal[
    "session_start",
    "budget",
    "session_idle",
    "tool_result",
    "post_compact",
    "worker_resumed",
    "user_turn",
    "worker_lifecycle",
]
#: Kinds whose events are observational only: a reminder for one is HARN-RMD-008 (§9.4).
OBSERVATIONAL_KINDS: frozenset[str] = frozenset({"worker_lifecycle"})

Count = Annotated[int, Field(ge=0, le=2**53 - 1)]
ShortText = Annotated[str, Field(max_length=4096)]


class RuntimePayload(BaseModel):
    """Base of every runtime event payload: frozen, no unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class SessionStart(RuntimePayload):
    """A session started (or its workspace was set)."""

    workspace_anchor: ShortText | None = Field(default=None, description="The workspace anchor.")
    roots: list[ShortText] | None = Field(default=None, max_length=64, description="Mounted roots.")


class Budget(RuntimePayload):
    """A context-budget reading."""

    used_tokens: Count = Field(description="Tokens in the context now.")
    context_window: Annotated[int, Field(ge=1, le=2**53 - 1)] = Field(
        description="The model's context window in tokens."
    )


class SessionIdle(RuntimePayload):
    """The session has been idle (a daemon's wake interval)."""

    idle_seconds: Count = Field(description="Seconds idle.")


class ToolResult(RuntimePayload):
    """A tool call finished."""

    tool_name: Annotated[str, Field(min_length=1, max_length=256)] = Field(description="The tool.")
    truncated: bool = Field(description="Its output was cut before the model saw it.")
    original_bytes: Count | None = Field(default=None, description="Output size before cutting.")
    shown_bytes: Count | None = Field(default=None, description="Output size the model saw.")
    exit_code: Annotated[int, Field(ge=-(2**31), le=2**32)] | None = Field(
        default=None, description="Exit code of a command tool."
    )
    output_tail: Annotated[str, Field(max_length=65536)] | None = Field(
        default=None, description="The last lines of its output (verifier evidence)."
    )


class PostCompact(RuntimePayload):
    """The host compacted its transcript."""

    archived_count: Count = Field(description="Messages archived.")
    summary: Annotated[str, Field(max_length=16384)] | None = Field(
        default=None, description="The compaction summary."
    )


class WorkerResumed(RuntimePayload):
    """A suspended worker resumed."""

    suspension_reason: ShortText | None = Field(default=None, description="Why it suspended.")
    resume_cause: ShortText | None = Field(default=None, description="What resumed it.")
    resume_input: ShortText | None = Field(default=None, description="Input given on resume.")
    pre_suspend_digest: ShortText | None = Field(
        default=None, description="Digest of the work before suspension."
    )
    suspended_at_turn: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="The turn at which the worker suspended (SPEC §9.3.1)."
    )


class UserTurn(RuntimePayload):
    """A user turn; its text is matched by rules and never stored in the ledger."""

    text: Annotated[str, Field(max_length=65536)] = Field(description="The user's text.")


class WorkerLifecycle(RuntimePayload):
    """A worker lifecycle phase (observational: it never carries reminders)."""

    phase: Annotated[str, Field(min_length=1, max_length=64)] = Field(description="The phase.")


RUNTIME_PAYLOADS: dict[str, type[RuntimePayload]] = {
    "session_start": SessionStart,
    "budget": Budget,
    "session_idle": SessionIdle,
    "tool_result": ToolResult,
    "post_compact": PostCompact,
    "worker_resumed": WorkerResumed,
    "user_turn": UserTurn,
    "worker_lifecycle": WorkerLifecycle,
}

AnyRuntimePayload = (
    SessionStart
    | Budget
    | SessionIdle
    | ToolResult
    | PostCompact
    | WorkerResumed
    | UserTurn
    | WorkerLifecycle
)

_TIMESTAMP_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$"


class RuntimeEvent(BaseModel):
    """One runtime event: the envelope of SPEC §9.1 around a typed payload."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_: Literal["reminder-ledger.agent-event/v1"] = Field(
        alias="schema", description="Envelope version."
    )
    event_id: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        description="Unique id of the runtime event; also its `Nats-Msg-Id`."
    )
    kind: RuntimeEventKind = Field(description="What happened; also the subject's kind token.")
    session_id: SessionId = Field(description="The session it happened in.")
    agent_id: Identifier | None = Field(default=None, description="The agent; default session.")
    turn: Turn = Field(description="The host's turn when it happened.")
    occurred_at: Annotated[str, Field(pattern=_TIMESTAMP_PATTERN)] = Field(
        description="When it happened (RFC 3339)."
    )
    payload: AnyRuntimePayload = Field(description="Kind-specific facts.")

    @model_validator(mode="before")
    @classmethod
    def _payload_by_kind(cls, data: Any) -> Any:
        return payload_by_kind(data, RUNTIME_PAYLOADS)

    @model_validator(mode="after")
    def _payload_matches_kind(self) -> RuntimeEvent:
        require_payload_kind(self.payload, self.kind, RUNTIME_PAYLOADS)
        return self

    def to_wire(self) -> dict[str, Any]:
        """The JSON object a host publishes."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=False)


class InvalidRuntimeEvent(InvalidEvent):
    """JSON, but not a valid runtime event; `places` are the failing field paths."""

    code: ClassVar[str] = "invalid_runtime_event"


class WrongRuntimeSubject(InvalidRuntimeEvent):
    """A runtime event whose subject does not confirm its kind and session."""

    code: ClassVar[str] = "wrong_subject"


def decode_runtime_event(
    source: bytes | Mapping[str, Any], subject: str | None = None
) -> RuntimeEvent:
    """The runtime event in `source`; raises a `DecodeError` (never quoting the message)."""
    if isinstance(source, bytes | bytearray):
        try:
            raw = orjson.loads(source)
        except orjson.JSONDecodeError:
            raise Undecodable("not a JSON object") from None
    else:
        raw = dict(source)
    if not isinstance(raw, dict):
        raise InvalidRuntimeEvent("not a JSON object")
    if raw.get("schema") != AGENT_EVENT_SCHEMA_V1:
        raise UnknownSchema(raw.get("schema"))
    try:
        event = RuntimeEvent.model_validate(raw)
    except ValidationError as exc:
        places = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
        raise InvalidRuntimeEvent(f"failed validation at: {', '.join(places)}", places) from None
    if subject is not None:
        # Tenants (SPEC §10.1): a tenant's subject names it; its session is scoped to it.
        tenant = agent_event_tenant(subject)
        problem = subject_mismatch(
            None if tenant is None else parse_agent_event_subject(tenant[1]),
            "agent.events.[t.<tenant>.]<kind>.<session_token>",
            event.kind,
            event.session_id,
        )
        if problem is not None or tenant is None:
            raise WrongRuntimeSubject(problem or "not a tenant's runtime event subject")
        if tenant[0] == DEFAULT_TENANT and is_reserved_session_id(event.session_id):
            raise WrongRuntimeSubject("a default host names a tenant's session")
        if tenant[0] != DEFAULT_TENANT:
            scoped = scoped_session_id(tenant[0], event.session_id)
            return event.model_copy(update={"session_id": scoped})
    return event

"""A msgspec mirror of the event envelope and of the five payload kinds the catch-up
benchmarks' logs hold (injected, deduped, fired, delivered, post_turn), for
`bench.decode_floor` only.

It measures issue #19's decode direction (a library that validates at least 3x faster than
the current path); nothing in the service reads it. The contract's models are those of
`contracts.events` and stay the only definition: this copy repeats their fields, bounds and
Python checks (`ReminderSpec`'s field validators, here in `__post_init__`) as far as the
benchmark needs, so both decoders do comparable work, and `bench.decode_floor` checks that
both accept every event of the log and refuse the same broken ones.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Raw, Struct

from contracts.events import EventKind
from contracts.spec import (
    MAX_WIRE_INT,
    Authority,
    Propagate,
    RoleHint,
    Source,
    has_control_chars,
    utc_millis,
)


def _ident(value: str | None) -> None:
    """Refuse an identifier with a control character or outer whitespace."""
    if value is not None and (has_control_chars(value) or value != value.strip()):
        raise ValueError("bad identifier")


class Spec(Struct, frozen=True, forbid_unknown_fields=True):
    """`contracts.spec.ResolvedSpec`."""

    body: str
    id: Annotated[str, Meta(min_length=1, max_length=128)]
    fired_at_turn: Annotated[int, Meta(ge=0, le=MAX_WIRE_INT)]
    tags: Annotated[list[str], Meta(max_length=32)] = []
    dedupe_key: str | None = None
    ttl_turns: Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)] | None = None
    preserve_on_compact: bool = False
    propagate: Propagate = "session"
    authority: Authority = "contract"
    role_hint: RoleHint = "system"
    source: Source = "in_pipeline"
    originating_agent_id: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    not_before: str | None = None
    expires_at: str | None = None

    def __post_init__(self) -> None:
        """The same checks as the pydantic model's field validators."""
        if not self.body.strip():
            raise ValueError("body must not be empty")
        for tag in self.tags:
            if not 1 <= len(tag.strip()) <= 128:
                raise ValueError("tag")
        if self.dedupe_key is not None and len(self.dedupe_key.strip()) > 256:
            raise ValueError("dedupe_key")
        _ident(self.id)
        _ident(self.originating_agent_id)
        for when in (self.not_before, self.expires_at):
            if when is not None:
                utc_millis(when)


class Injected(Struct, frozen=True, forbid_unknown_fields=True):
    """`contracts.events.Injected`."""

    reminder_id: str
    tags: list[str]
    dedupe_key: str | None
    source: Source
    role_hint: RoleHint
    authority: Authority
    ttl_turns: int | None
    propagate: Propagate
    originating_agent_id: str | None
    audit_only: bool
    reminder: Spec
    redactions: Annotated[int, Meta(ge=0)] = 0


class Deduped(Struct, frozen=True, forbid_unknown_fields=True):
    """`contracts.events.Deduped`."""

    reminder_id: str
    replacing_id: str
    replaced_id: str
    replaced_ids: list[str]
    dropped_reminder_ids: list[str]
    dedupe_key: str
    dropped_count: int
    boundary: Literal["inject", "compact"]


class Fired(Struct, frozen=True, forbid_unknown_fields=True):
    """`contracts.events.Fired`."""

    reminder_id: str
    turn_number: int
    tags: list[str]
    dedupe_key: str | None
    source: Source
    role_hint: RoleHint
    authority: Authority
    rendered_role: Literal["user"]
    ttl_turns: int | None
    propagate: Propagate
    originating_agent_id: str | None
    body: str


class RenderSummary(Struct, frozen=True, forbid_unknown_fields=True):
    """`contracts.events.RenderSummary`."""

    directives: int
    by_authority: dict[str, int]
    by_source: dict[str, int]
    bytes: int
    est_tokens: int
    estimator: str
    budget_tokens: int | None
    shed_ids: list[str]
    muted_ids: list[str]
    not_yet_ids: list[str]
    dropped_ids: list[str]
    over_budget: bool


class Delivered(Struct, frozen=True, forbid_unknown_fields=True):
    """`contracts.events.Delivered`."""

    turn_number: int
    format: Literal["context-directives", "system-reminder"]
    speaker: Literal["harness", "person"]
    nonce: str | None
    instructions: str
    directive_ids: list[str]
    text: str
    text_sha256: str
    summary: RenderSummary | None = None


class PostTurn(Struct, frozen=True, forbid_unknown_fields=True):
    """`contracts.events.PostTurn`."""

    turn_number: int
    decremented_ids: list[str]
    expired_count: int
    decremented_count: int
    remaining_count: int


PAYLOADS: dict[str, Any] = {
    "injected": Injected,
    "deduped": Deduped,
    "fired": Fired,
    "delivered": Delivered,
    "post_turn": PostTurn,
}


class _Envelope(Struct, frozen=True, forbid_unknown_fields=True, rename={"schema_": "schema"}):
    """`contracts.events.Event` without its payload, whose type each subclass chooses."""

    schema_: Literal["reminder-ledger.event/v1"]
    event_id: str
    kind: EventKind
    session_id: str
    agent_id: str
    task_id: str | None
    session_seq: Annotated[int, Meta(ge=1)]
    turn: Annotated[int, Meta(ge=0)]
    occurred_at: str
    command_id: str
    request_id: str | None
    reply: dict[str, Any] | None
    chain: str


class RawEnvelope(_Envelope, frozen=True, forbid_unknown_fields=True, rename={"schema_": "schema"}):
    """The envelope from the bytes, its payload left raw until its kind is known."""

    payload: Raw


_ENVELOPE = msgspec.json.Decoder(RawEnvelope)
_DECODERS = {kind: msgspec.json.Decoder(model) for kind, model in PAYLOADS.items()}


def decode(data: bytes) -> tuple[RawEnvelope, Any]:
    """The envelope and its payload, each validated (the payload by the kind's type)."""
    envelope = _ENVELOPE.decode(data)
    return envelope, _DECODERS[envelope.kind].decode(envelope.payload)


class DictEnvelope(
    _Envelope, frozen=True, forbid_unknown_fields=True, rename={"schema_": "schema"}
):
    """The envelope from an already parsed dict (what the projector holds after its parse)."""

    payload: dict[str, Any]


def convert(envelope: dict[str, Any]) -> tuple[DictEnvelope, Any]:
    """The same validation from the parsed dict (`msgspec.convert`)."""
    outer = msgspec.convert(envelope, DictEnvelope)
    return outer, msgspec.convert(outer.payload, PAYLOADS[outer.kind])

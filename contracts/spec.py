"""`ReminderSpec` (SPEC §2.1) and its coded validation (SPEC §2.2)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from contracts.errors import ErrorCode, ReminderError, WarningBody
from contracts.trusted import trusted

Propagate = Literal["all", "session", "none"]
Authority = Literal["contract", "corrective", "advisory"]
RoleHint = Literal["system", "developer", "user_block", "ephemeral_cache"]
Source = Literal["stdlib_provider", "hook", "bridge", "in_pipeline", "inherited"]
DeliveryMode = Literal["interrupt_immediate", "finish_step", "audit_only"]

#: Mode aliases accepted on input (SPEC §4.2); the canonical name is what the log records.
MODE_ALIASES: dict[str, DeliveryMode] = {
    "interrupt_immediate": "interrupt_immediate",
    "interrupt": "interrupt_immediate",
    "finish_step": "finish_step",
    "steer": "finish_step",
    "after_current_operation": "finish_step",
    "audit_only": "audit_only",
    "queue": "audit_only",
}

#: Largest integer accepted anywhere on the wire: safe in JavaScript, exact in every JSON reader.
MAX_WIRE_INT = 2**53 - 1
#: Default bound of a body in UTF-8 bytes (SPEC §2.1, configurable through the core config).
DEFAULT_MAX_BODY_BYTES = 32 * 1024


#: Unicode category Cc, which is closed: exactly the C0 controls, DEL and the C1 controls.
_CONTROL_CHAR = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def has_control_chars(text: str) -> bool:
    """True when `text` holds a C0/C1 control character (Unicode category Cc).

    One regular-expression search, not a category lookup per character: every identifier of
    every event is checked on each decode."""
    return _CONTROL_CHAR.search(text) is not None


def is_utf8_encodable(text: str) -> bool:
    """False for strings with lone surrogates, which no UTF-8 log can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: RFC 3339 date-time (SPEC §12.4): any offset, an optional fraction, `T`/`Z` in any case.
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def utc_millis(value: str) -> str:
    """An RFC 3339 time with any offset as the log stores times: UTC, milliseconds, `Z`
    (`2026-11-29T15:04:05.123Z`, like `occurred_at`). Digits past the millisecond are cut
    (never rounded up, so a deadline never moves later). Raises ValueError otherwise.

    Stored times have one width, so comparing them as strings compares them as times."""
    if not _RFC3339.match(value):
        raise ValueError("must be an RFC 3339 time such as 2026-11-29T15:04:05Z")
    head, _, rest = value.upper().partition(".")
    fraction = ""
    if rest:
        digits = re.match(r"\d+", rest)
        assert digits is not None
        fraction = digits.group(0)
        head += rest[len(fraction) :]
    try:
        moment = datetime.fromisoformat(head).astimezone(UTC)
    except ValueError:
        raise ValueError("must be a valid RFC 3339 time (a real date and time)") from None
    if not 1 <= moment.year <= 9999:
        raise ValueError("must fall within the years 0001-9999 in UTC")
    millis = (fraction + "000")[:3]
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{millis}Z"


def _omit_none(value: object) -> bool:
    return value is None


class ReminderSpec(BaseModel):
    """One reminder as a producer specifies it (SPEC §2.1).

    `id` and `fired_at_turn` may be omitted on input; the core fills them from the command
    context (a fresh UUIDv7, the session's current turn) before anything is logged, so every
    spec inside an event has both set.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    body: str = Field(description="The reminder text; non-empty after trim, bounded in bytes.")
    tags: list[str] = Field(
        default_factory=list, max_length=32, description="Up to 32 labels, each 1–128 chars."
    )
    dedupe_key: str | None = Field(
        default=None, description="A newer live reminder with the same key replaces older ones."
    )
    ttl_turns: int | None = Field(
        default=None, ge=1, le=MAX_WIRE_INT, description="Turns to live; null = until cleared."
    )
    preserve_on_compact: bool = Field(
        default=False, description="Survive compaction and be re-issued after it."
    )
    propagate: Propagate = Field(
        default="session", description="Which sub-agent sessions inherit it (SPEC §4.9)."
    )
    authority: Authority = Field(
        default="contract", description="Precedence: contract > corrective > advisory."
    )
    role_hint: RoleHint = Field(default="system", description="Only selects the speaker (§5.3).")
    source: Source = Field(
        default="in_pipeline", description="Who produced it; `inherited` only by propagation."
    )
    id: str | None = Field(
        default=None, min_length=1, max_length=128, description="Unique while live; UUIDv7."
    )
    fired_at_turn: int | None = Field(
        default=None, ge=0, le=MAX_WIRE_INT, description="Not rendered before this turn."
    )
    originating_agent_id: str | None = Field(
        default=None, min_length=1, max_length=256, description="Kept from the first emitter."
    )
    not_before: str | None = Field(
        default=None,
        exclude_if=_omit_none,
        description="Not rendered at a command whose time is earlier (SPEC §12.4); RFC 3339, "
        "stored in UTC with milliseconds; absent when unset.",
    )
    expires_at: str | None = Field(
        default=None,
        exclude_if=_omit_none,
        description="Expires at the first command of the session whose time is at or past it "
        "(SPEC §12.4); after `not_before`; RFC 3339, stored in UTC; absent when unset.",
    )

    @field_validator("not_before")
    @classmethod
    def _not_before_utc(cls, value: str | None) -> str | None:
        return None if value is None else utc_millis(value)

    @field_validator("expires_at")
    @classmethod
    def _expires_after_not_before(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        value = utc_millis(value)
        not_before = info.data.get("not_before")
        if isinstance(not_before, str) and value <= not_before:
            raise ValueError("must be later than not_before")
        return value

    @field_validator("body")
    @classmethod
    def _body_not_blank(cls, body: str) -> str:
        if not body.strip():
            raise ValueError("body must not be empty")
        if not is_utf8_encodable(body):
            raise ValueError("body must be valid Unicode text")
        return body

    @field_validator("tags")
    @classmethod
    def _tags_trimmed(cls, tags: list[str]) -> list[str]:
        trimmed = [tag.strip() for tag in tags]
        for tag in trimmed:
            if not 1 <= len(tag) <= 128 or not is_utf8_encodable(tag):
                raise ValueError("each tag must be 1–128 characters after trim")
        return trimmed

    @field_validator("dedupe_key")
    @classmethod
    def _key_trimmed(cls, key: str | None) -> str | None:
        # Trimmed like clear's selector values (§4.3), so a key can always be cleared by the
        # value it was given with; blank means none.
        if key is None or not key.strip():
            return None
        key = key.strip()
        if len(key) > 256 or not is_utf8_encodable(key):
            raise ValueError("dedupe_key must be 1–256 characters")
        return key

    @field_validator("id", "originating_agent_id")
    @classmethod
    def _plain_identifier(cls, value: str | None) -> str | None:
        if value is not None and (has_control_chars(value) or not is_utf8_encodable(value)):
            raise ValueError("must not contain control characters")
        if value is not None and value != value.strip():
            # clear trims its selector values (§4.3): such an id could never be selected.
            raise ValueError("must not start or end with whitespace")
        return value

    def body_bytes(self) -> int:
        """Size of the body in UTF-8 bytes, the unit of the size bound."""
        return len(self.body.encode("utf-8"))


class ResolvedSpec(ReminderSpec):
    """A reminder spec as the core resolved it (SPEC §2.1): `id` and `fired_at_turn` set.

    Every spec inside an event or a state row is resolved. The JSON object is the same as
    a `ReminderSpec`'s (same fields, names and values); here `id` and `fired_at_turn` are
    required and never null.
    """

    id: str = Field(min_length=1, max_length=128, description="Unique while live; UUIDv7.")
    fired_at_turn: int = Field(ge=0, le=MAX_WIRE_INT, description="Not rendered before this turn.")

    @classmethod
    def resolve(cls, spec: ReminderSpec, *, id: str, fired_at_turn: int) -> ResolvedSpec:
        """`spec` with `id` and `fired_at_turn` filled where it left them out.

        No second validation: `spec` is already valid, and the core's ids and turns are.
        """
        if isinstance(spec, ResolvedSpec):
            return spec
        values = dict(spec.__dict__)
        values["id"] = spec.id or id
        values["fired_at_turn"] = (
            spec.fired_at_turn if spec.fired_at_turn is not None else fired_at_turn
        )
        return trusted(cls, values)


REMINDER_FIELDS = frozenset(ReminderSpec.model_fields)


def error_from_validation(
    exc: ValidationError, *, field_codes: dict[str, ErrorCode], default: ErrorCode, prefix: str = ""
) -> ReminderError:
    """Turn pydantic's first complaint into one coded error naming the field."""
    first = exc.errors(include_url=False)[0]
    loc = [str(part) for part in first["loc"]]
    field = loc[0] if loc else "value"
    dotted = ".".join(loc) if loc else "value"
    message = first["msg"].removeprefix("Value error, ")
    code = field_codes.get(field, default)
    return ReminderError(
        code, f"invalid {prefix}{dotted}: {message}", {"field": f"{prefix}{dotted}"}
    )


def parse_reminder(
    raw: object, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> tuple[ReminderSpec, list[WarningBody]]:
    """Validate a raw JSON value as a `ReminderSpec`, or raise the coded error of §2.2.

    Returns the spec and the warnings to echo in the reply (HARN-RMD-004).
    """
    if not isinstance(raw, dict):
        raise ReminderError(ErrorCode.INVALID_OPTION, "reminder must be a JSON object")
    unknown = sorted(str(key) for key in raw if key not in REMINDER_FIELDS)
    if unknown:
        raise ReminderError(
            ErrorCode.INVALID_OPTION,
            f"unknown option(s): {', '.join(unknown)}",
            {"unknown": unknown},
        )
    try:
        spec = ReminderSpec.model_validate(raw)
    except ValidationError as exc:
        raise error_from_validation(
            exc,
            field_codes={"propagate": ErrorCode.INVALID_PROPAGATE},
            default=ErrorCode.INVALID_OPTION,
        ) from None
    # Stored trimmed, a repeated tag kept once, first occurrence first (SPEC §2.1).
    tags = list(dict.fromkeys(spec.tags))
    if spec.body != spec.body.strip() or tags != spec.tags:
        spec = spec.model_copy(update={"body": spec.body.strip(), "tags": tags})
    if spec.body_bytes() > max_body_bytes:
        raise ReminderError(
            ErrorCode.TOO_LARGE,
            f"body is {spec.body_bytes()} bytes; the bound is {max_body_bytes}",
            {"field": "body", "limit": max_body_bytes},
        )
    warnings: list[WarningBody] = []
    if raw.get("preserve_on_compact") is False and spec.ttl_turns is None:
        warnings.append(
            WarningBody(
                code=ErrorCode.NO_COMPACTION_GUARD,
                message="preserve_on_compact is false and ttl_turns is unset: "
                "the reminder lives until cleared or compacted",
            )
        )
    return spec, warnings


def normalize_mode(raw: object) -> DeliveryMode | None:
    """Resolve a delivery mode or one of its aliases (SPEC §4.2); None means direct inject."""
    if raw is None:
        return None
    if isinstance(raw, str) and raw in MODE_ALIASES:
        return MODE_ALIASES[raw]
    raise ReminderError(
        ErrorCode.INVALID_OPTION,
        f"invalid mode: {raw!r} is not one of {', '.join(sorted(MODE_ALIASES))}",
        {"field": "mode"},
    )

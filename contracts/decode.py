"""The one way to read an event envelope: `decode(bytes or dict[, subject]) -> Event`.

Every reader — gateway, projector, propagator, observer, replay, rebuild — decodes here, so
a message is either an `Event` of this build's envelope version or one `DecodeError` whose
`code` is the stable dead-letter code (§6.4) and whose `reason` never quotes the message
(it may hold a reminder body):

- `Undecodable` (`undecodable`): the bytes are not JSON;
- `InvalidEvent` (`invalid_event`): JSON, but not a valid envelope of a known kind;
- `UnknownSchema` (`unknown_schema`): an envelope version this build does not read (§3.7);
- `WrongSubject` (`wrong_subject`, an `InvalidEvent`): with `subject=`, the event's kind or
  session token differs from its subject, or the subject is not exactly
  `transcript.reminder.<kind>.<token>` (§6.3).

Use in a worker (all `DecodeError`s are `ValueError`s)::

    try:
        event = decode(message.data, subject=message.subject)
    except DecodeError as exc:
        await dead_letter_message(js, SERVICE, message, exc.code, exc.reason)
        await message.ack()
        return

Versioning seam (§3.7): an envelope whose `schema` is not `CURRENT_SCHEMA` is passed through
`UPCASTERS` (`{from_version: (to_version, function)}`), one explicit, tested step at a time,
until it reaches `CURRENT_SCHEMA`; a version with no step is `UnknownSchema`. v1 is the only
version today, so the table is empty; a v2 build adds `{SCHEMA_V1: (SCHEMA_V2, v1_to_v2)}`.
The hash chain always covers the envelope as stored, never the upcast one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

import orjson
from pydantic import ValidationError

from contracts.events import SCHEMA_V1, Event
from contracts.subjects import parse_event_subject, session_token

CURRENT_SCHEMA: Final = SCHEMA_V1
"""The envelope version `Event` models; everything else is upcast or refused."""

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
UPCASTERS: Mapping[str, tuple[str, Upcaster]] = {}
"""`{from_version: (to_version, function)}`; empty while v1 is the only version."""


class DecodeError(ValueError):
    """A message that is not an event this build reads; `code` is its stable DLQ code."""

    code: ClassVar[str] = "invalid_event"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason[:500]


class Undecodable(DecodeError):
    """The bytes are not JSON."""

    code: ClassVar[str] = "undecodable"


class InvalidEvent(DecodeError):
    """JSON, but not a valid event envelope; `places` are the failing field paths."""

    code: ClassVar[str] = "invalid_event"

    def __init__(self, reason: str, places: list[str] | None = None) -> None:
        super().__init__(reason)
        self.places = places or []


class UnknownSchema(DecodeError):
    """An envelope version this build does not read (§3.7); `schema` is the version seen."""

    code: ClassVar[str] = "unknown_schema"

    def __init__(self, schema: object) -> None:
        self.schema = str(schema)[:80]
        super().__init__(f"schema {self.schema}")


class WrongSubject(InvalidEvent):
    """An event whose subject does not confirm its kind and session (§6.3)."""

    code: ClassVar[str] = "wrong_subject"


def envelope_of(data: bytes) -> dict[str, Any]:
    """The JSON object in `data`; raises `Undecodable` or `InvalidEvent`."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise Undecodable("not a JSON object") from None
    if not isinstance(raw, dict):
        raise InvalidEvent("not a JSON object")
    return raw


def upcast(
    envelope: Mapping[str, Any], upcasters: Mapping[str, tuple[str, Upcaster]] | None = None
) -> Mapping[str, Any]:
    """The envelope at `CURRENT_SCHEMA`, through explicit steps; raises `UnknownSchema`."""
    steps = UPCASTERS if upcasters is None else upcasters
    seen: set[str] = set()
    while (schema := envelope.get("schema")) != CURRENT_SCHEMA:
        if not isinstance(schema, str) or schema not in steps or schema in seen:
            raise UnknownSchema(schema)
        seen.add(schema)
        target, step = steps[schema]
        envelope = step(dict(envelope))
        if envelope.get("schema") != target:
            raise UnknownSchema(schema)
    return envelope


def subject_mismatch(
    parsed: tuple[str, str] | None, shape: str, kind: str, session_id: str
) -> str | None:
    """Why a subject parsed as `(kind, token)` (None: not of `shape`) does not confirm an
    envelope's kind and session; None when it does (SPEC §6.3, for events and runtime
    events alike)."""
    if parsed is None:
        return f"the subject is not {shape}"
    if parsed[0] != kind:
        return "the event's kind differs from its subject"
    if parsed[1] != session_token(session_id):
        return "the event's session differs from its subject"
    return None


def check_subject(event: Event, subject: str) -> None:
    """Raise `WrongSubject` unless `subject` is `transcript.reminder.<kind>.<token>` of it."""
    shape = "transcript.reminder.<kind>.<session_token>"
    problem = subject_mismatch(parse_event_subject(subject), shape, event.kind, event.session_id)
    if problem is not None:
        raise WrongSubject(problem)


def decode(
    source: bytes | Mapping[str, Any],
    subject: str | None = None,
    *,
    upcasters: Mapping[str, tuple[str, Upcaster]] | None = None,
) -> Event:
    """The event in `source` (wire bytes or a parsed envelope), validated once.

    With `subject`, also checks that the subject confirms the event (`WrongSubject`).
    Raises a `DecodeError`; never anything else for bad input.
    """
    envelope = envelope_of(source) if isinstance(source, bytes | bytearray) else source
    envelope = upcast(envelope, upcasters)
    try:
        event = Event.model_validate(envelope)
    except ValidationError as exc:
        places = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
        raise InvalidEvent(f"failed validation at: {', '.join(places)}", places) from None
    if subject is not None:
        check_subject(event, subject)
    return event

"""A projection bucket value (a state, or a tombstone, SPEC §4.11) to and from bytes.

`encode_state` is on the projector's hot path (one call per touched session per batch), and
`model_dump` of a whole state cost several times what the projector spends on an event. The
state's models serialise as their plain fields (no serialisers, exclusions or computed
fields — `_plain_fields` checks each class once), so orjson writes the state directly from
each model's fields with sorted keys, in one pass. Anything else — a model that is not plain,
a value orjson would write differently from `canonical_json` (see `canonical_bytes`) — takes
the reference path, `canonical_json(state.model_dump(mode="json"))`; a unit test holds the
two byte-identical.

A session that has lived holds up to 256 remembered replies, most of its value, and each
event changes one of them at most: each reply's row is written once (`_reply_row`, kept per
row object as long as a state holds it) and joined into the state's bytes where orjson left
a mark for them (`_REPLIES_MARK`, one NUL byte, which orjson never writes itself: it escapes
every control character in a string), so neither orjson nor the float check goes through
the rows again on every write.

No client here: the fold's worker processes (`replay.fold_store`) encode with it and do not
load a NATS client.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import orjson
from pydantic import BaseModel, PlainSerializer, WrapSerializer

from contracts.records import Tombstone
from contracts.state import RecentReply, SessionState
from core.canonical import canonical_json, may_hold_float
from core.size import KeptOnce


@cache
def _exclusions(model: type[BaseModel]) -> tuple[tuple[str, Callable[[Any], bool]], ...] | None:
    """The `exclude_if` rules of a model whose JSON dump is otherwise just its fields;
    None when its dump is anything else (serialisers, computed or excluded fields)."""
    decorators = model.__pydantic_decorators__
    if decorators.field_serializers or decorators.model_serializers:
        return None
    if model.model_computed_fields:
        return None
    rules: list[tuple[str, Callable[[Any], bool]]] = []
    for name, info in model.model_fields.items():
        if info.exclude or any(
            isinstance(m, PlainSerializer | WrapSerializer) for m in info.metadata
        ):
            return None
        if info.exclude_if is not None:
            rules.append((name, info.exclude_if))
    return tuple(rules)


def _plain_fields(value: object) -> dict[str, Any]:
    """orjson's `default`: a plain model's fields as `model_dump` keeps them; anything else
    is refused (TypeError). A state's remembered replies are left as `_REPLIES_MARK`."""
    rules = _exclusions(type(value)) if isinstance(value, BaseModel) else None
    if rules is None:
        raise TypeError(type(value).__name__)
    fields: dict[str, Any] = value.__dict__
    if rules:
        fields = {**fields}
        for name, excluded in rules:
            if excluded(fields[name]):
                del fields[name]
    if type(value) is SessionState and value.recent_replies:
        fields = {**fields, "recent_replies": _REPLIES_MARK}
    return fields


#: Where a state's remembered replies go in its bytes: orjson writes a fragment as it is.
_REPLIES_MARK = orjson.Fragment(b"\x00")


_STATE_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def encode_state_reference(state: SessionState) -> bytes:
    """The definition: canonical JSON of the state's JSON dump."""
    return canonical_json(state.model_dump(mode="json")).encode("utf-8")


def encode_state(state: SessionState) -> bytes:
    """Canonical JSON of a state, what the bucket stores and replay prints (the bytes of
    `encode_state_reference`, written faster; see the module docstring)."""
    try:
        data = orjson.dumps(state, default=_plain_fields, option=_STATE_OPTIONS)
        rows = _reply_row.many(state.recent_replies)
    except TypeError:
        return encode_state_reference(state)
    if may_hold_float(data) or None in rows:
        return encode_state_reference(state)
    if not rows:
        return data
    head, tail = data.split(b"\x00")
    return b"".join((head, b"[", b",".join(rows), b"]", tail))  # type: ignore[arg-type]


def _write_reply_row(row: RecentReply) -> bytes | None:
    """A remembered reply's bytes in a state; None when they may differ from the reference
    (`may_hold_float`)."""
    data = orjson.dumps(row, default=_plain_fields, option=_STATE_OPTIONS)
    return None if may_hold_float(data) else data


_reply_row: KeptOnce[RecentReply, bytes | None] = KeptOnce(_write_reply_row)


def decode_record(value: bytes | None) -> SessionState | Tombstone | None:
    """A bucket value back into a state or tombstone (None for an empty value)."""
    if not value:
        return None
    raw: dict[str, Any] = orjson.loads(value)
    if raw.get("tombstone") is True:
        return Tombstone.model_validate(raw)
    return SessionState.model_validate(raw)


def record_position(value: bytes | None) -> Tombstone | int | None:
    """What a bucket value says of where its session is, without validating a whole state:
    the tombstone (decoded), or the state's `stream_seq`, or None for an empty value. A
    value whose `stream_seq` is not an integer is decoded in full (and refused there)."""
    if not value:
        return None
    raw = orjson.loads(value)
    if isinstance(raw, dict) and raw.get("tombstone") is not True:
        seq = raw.get("stream_seq", 0)
        if type(seq) is int:
            return seq
    record = decode_record(value)
    return record.stream_seq if isinstance(record, SessionState) else record

"""Bucket values: a state, or a tombstone (SPEC §4.11), to and from bytes.

The `Tombstone` model itself is a contract (`contracts.records`).
"""

from __future__ import annotations

from typing import Any

import orjson

from contracts.records import Tombstone
from contracts.state import SessionState
from core import canonical_json


def encode_state(state: SessionState) -> bytes:
    """Canonical JSON of a state, what the bucket stores and replay prints."""
    return canonical_json(state.model_dump(mode="json")).encode("utf-8")


def decode_record(value: bytes | None) -> SessionState | Tombstone | None:
    """A bucket value back into a state or tombstone (None for an empty value)."""
    if not value:
        return None
    raw: dict[str, Any] = orjson.loads(value)
    if raw.get("tombstone") is True:
        return Tombstone.model_validate(raw)
    return SessionState.model_validate(raw)

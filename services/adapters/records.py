"""The projection bucket: values (a state, or a tombstone, SPEC §4.11) to and from bytes,
and compare-and-set writes on the revision.

The `Tombstone` model itself is a contract (`contracts.records`).
"""

from __future__ import annotations

from typing import Any

import nats
import orjson
from nats.js.kv import KeyValue

from contracts.records import Tombstone
from contracts.state import SessionState
from core.canonical import canonical_bytes


def encode_state(state: SessionState) -> bytes:
    """Canonical JSON of a state, what the bucket stores and replay prints."""
    return canonical_bytes(state.model_dump(mode="json"))


def decode_record(value: bytes | None) -> SessionState | Tombstone | None:
    """A bucket value back into a state or tombstone (None for an empty value)."""
    if not value:
        return None
    raw: dict[str, Any] = orjson.loads(value)
    if raw.get("tombstone") is True:
        return Tombstone.model_validate(raw)
    return SessionState.model_validate(raw)


class StaleRevision(Exception):
    """Another writer changed the record since it was read."""


class KvSessionStore:
    """The projection bucket, with compare-and-set writes on the revision."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def read(self, token: str) -> tuple[bytes | None, int | None]:
        """Value and revision; a deleted key reads as empty with its revision."""
        try:
            entry = await self._kv.get(token)
        except nats.js.errors.KeyNotFoundError:
            return None, None
        except nats.js.errors.KeyDeletedError as deleted:
            return None, deleted.entry.revision
        return entry.value, entry.revision

    async def write(self, token: str, value: bytes, revision: int | None) -> int:
        """Create when there was no revision, else update on exactly that revision."""
        try:
            if revision is None:
                return int(await self._kv.create(token, value))
            return int(await self._kv.update(token, value, last=revision))
        except nats.js.errors.KeyWrongLastSequenceError as exc:
            raise StaleRevision(token) from exc

"""`StoredEvent`: one event as it sits in the stream, what export writes and readers read.

The envelope is kept exactly as stored (the hash chain covers those bytes' JSON, §3.3.1),
beside its `stream_seq` and `subject`. An export line (§7.2) is the envelope plus those two
keys. Turn it into an `Event` with `contracts.decode.decode(stored.envelope, stored.subject)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from contracts.decode import DecodeError, envelope_of


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One stored event: its raw envelope (exactly as stored) and where it sat."""

    envelope: dict[str, Any]
    stream_seq: int
    subject: str

    @classmethod
    def from_bytes(cls, data: bytes, stream_seq: int, subject: str) -> StoredEvent:
        """Parse a stored message body; raises `Undecodable` or `InvalidEvent`."""
        return cls(envelope_of(data), stream_seq, subject)

    @classmethod
    def leniently(cls, data: bytes, stream_seq: int, subject: str) -> StoredEvent:
        """A stored message body as a row whatever it holds: one that is not a JSON object
        gets an envelope with no schema, so a replay names it (and the projector's rules
        judge it poison)."""
        try:
            envelope = orjson.loads(data)
        except orjson.JSONDecodeError:
            envelope = {"schema": None}
        if not isinstance(envelope, dict):
            envelope = {"schema": None}
        return cls(envelope, stream_seq, subject)

    def export(self) -> dict[str, Any]:
        """The export form: the envelope plus `stream_seq` and `subject`."""
        return {**self.envelope, "stream_seq": self.stream_seq, "subject": self.subject}


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored message whose body is not even a JSON object: it has a place, no envelope."""

    stream_seq: int
    subject: str
    error: DecodeError


def read_stored(data: bytes, stream_seq: int, subject: str) -> StoredEvent | Unreadable:
    """A message body as a `StoredEvent`, or `Unreadable` with its `DecodeError`."""
    try:
        return StoredEvent.from_bytes(data, stream_seq, subject)
    except DecodeError as exc:
        return Unreadable(stream_seq, subject, exc)

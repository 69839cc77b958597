"""Canonical bytes, the hash chain (SPEC §3.3.1) and derived ids.

Session tokens and subjects (§3.2) live in `contracts.subjects`; re-exported here.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import datetime
from typing import Any

import orjson

from contracts.subjects import event_subject, session_subject_filter, session_token

__all__ = [
    "canonical_bytes",
    "canonical_json",
    "chain_link",
    "derived_uuid7",
    "epoch_millis",
    "event_subject",
    "links",
    "may_hold_float",
    "session_subject_filter",
    "session_token",
    "sha256_hex",
]


def canonical_json(value: Any) -> str:
    """UTF-8 JSON with sorted keys, no insignificant whitespace, non-ASCII unescaped.

    Exactly the SPEC's definition, so an outside auditor can reproduce it with the standard
    library alone.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


#: A number with a fraction or an exponent, as orjson writes one in compact output: after
#: `:`, `,` or `[` and before `,`, `}` or `]`. Text inside a string can match too (that only
#: costs the slow path); a float outside a string always does.
_FLOAT_TOKEN = re.compile(rb"[:,\[]-?[0-9]+(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)[,}\]]")
_DIGITS = frozenset(b"0123456789")
_ORJSON_CANONICAL = (
    orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def canonical_bytes(value: Any) -> bytes:
    """`canonical_json(value).encode("utf-8")`, computed by orjson where that is the same.

    For values parsed from JSON (JSON has no NaN or infinity) orjson with sorted keys writes
    the same bytes as the standard library, except for floats (`1e+16` against `1e16`) and
    integers past 64 bits (which orjson refuses, and which orjson's parser turns into
    floats): so anything orjson refuses, and any output holding what may be a float, is
    written by `canonical_json` instead.
    """
    try:
        data = orjson.dumps(value, option=_ORJSON_CANONICAL)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return canonical_json(value).encode("utf-8")
    if may_hold_float(data):
        return canonical_json(value).encode("utf-8")
    return data


def may_hold_float(data: bytes) -> bool:
    """Whether compact JSON written by orjson may hold a float (where it and
    `canonical_json` can differ); text that looks like one also counts.

    orjson writes a float with a `.` or an exponent (`e+`, `e-`) right after a digit; only
    at those few places is the token itself matched (a regex scan of the whole value cost
    more than writing it).
    """
    for marker in (b".", b"e+", b"e-", b"E"):
        at = data.find(marker)
        while at != -1:
            after_digit = at > 0 and data[at - 1] in _DIGITS
            if after_digit and _FLOAT_TOKEN.search(data, max(0, at - 40), at + 40):
                return True
            at = data.find(marker, at + 1)
    return False


def sha256_hex(text: str) -> str:
    """SHA-256 of the UTF-8 bytes of `text`, lowercase hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chain_link(previous_chain: str, envelope_without_chain: dict[str, Any]) -> str:
    """`sha256_hex(previous_chain + "\\n" + canonical(envelope without "chain"))`."""
    return sha256_hex(previous_chain + "\n" + canonical_json(envelope_without_chain))


def epoch_millis(occurred_at: str) -> int:
    """Milliseconds since the epoch of an RFC 3339 timestamp with a `Z` or offset."""
    return int(datetime.fromisoformat(occurred_at.replace("Z", "+00:00")).timestamp() * 1000)


def derived_uuid7(occurred_at: str, *seed: str) -> str:
    """A UUIDv7 whose time is `occurred_at` and whose random bits are a hash of `seed`.

    Event ids are derived, not drawn, so deciding the same command against the same state
    yields the same ids (and JetStream's duplicate window drops an exact re-send).
    """
    digest = bytearray(hashlib.sha256("\n".join(seed).encode("utf-8")).digest()[:16])
    millis = epoch_millis(occurred_at) & ((1 << 48) - 1)
    digest[0:6] = millis.to_bytes(6, "big")
    digest[6] = 0x70 | (digest[6] & 0x0F)
    digest[8] = 0x80 | (digest[8] & 0x3F)
    return str(uuid.UUID(bytes=bytes(digest)))


def links(previous_chain: str, envelope: dict[str, Any]) -> bool:
    """Whether a raw envelope's `chain` follows `previous_chain` (SPEC §3.3.1)."""
    body = {key: value for key, value in envelope.items() if key != "chain"}
    # Same bytes as `chain_link`'s canonical_json, several times faster on this hot path.
    text = previous_chain.encode("utf-8") + b"\n" + canonical_bytes(body)
    return envelope.get("chain") == hashlib.sha256(text).hexdigest()
